"""Power caps on catalog chips: the compute clock a power limit leaves (DVFS), formulations/model.md
eq. 3.20d.

A cap C (``nvidia-smi -pl``) makes the GPU lower its compute clock until its power fits. With a
static part P_s = s·TDP and a dynamic part (TDP − P_s)·g(r) at the clock fraction r = f/f_max,

    C = P_s + (TDP − P_s)·g(r),   g(r) = r^α for r >= k,   g(r) = k^α·r/k below k,

(above the knee k the voltage follows the clock, P_dyn ∝ V²f ≈ f^α; below it the voltage is at
its floor and P_dyn ∝ f). Compute throughput scales with r; the memory bandwidth does not (the HBM
clock is separate), so memory-bound decode loses little and compute-bound prefill loses most.
The dynamic energy per FLOP scales with g(r)/r (P_dyn / FLOP rate). s, α and k are fitted on public
power-limit measurements (``instances/catalog/power/``, ``tools/fit_power_cap.py``); each chip's
allowed range of caps is its published ``nvidia-smi`` range.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike
from pydantic import Field

from codesign import catalog
from codesign.errors import InputError
from codesign.paths import catalog_dir
from codesign.schema import Strict, load_toml, validate

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Instance

#: the hardware decision (catalog family): the cap as a fraction of the chip's TDP
DECISION = "power_limit_fraction"


class Dvfs(Strict):
    static_fraction: float = Field(ge=0, lt=1)
    exponent: float = Field(ge=1, le=10)
    knee_clock_fraction: float = Field(gt=0, le=1)
    measurements: str
    fit: str
    held_out_mape: float = Field(ge=0)
    train_mape: float = Field(ge=0)


class ChipLimits(Strict):
    min_power_limit_W: float = Field(gt=0)
    max_power_limit_W: float = Field(gt=0)
    default_power_limit_W: float = Field(gt=0)
    source: list[str] = Field(min_length=1)


class PowerLimits(Strict):
    dvfs: Dvfs
    chips: dict[str, ChipLimits] = Field(default_factory=dict)


@cache
def load_power_limits() -> PowerLimits:
    """``instances/catalog/power/power_limits.toml``: the fitted DVFS model and each chip's range."""
    path = catalog_dir("power") / "power_limits.toml"
    return validate(PowerLimits, load_toml(path), file=path)


def dynamic_fraction(clock_fraction: ArrayLike, dvfs: Dvfs) -> np.ndarray:
    """g(r): dynamic power at the clock fraction r over the dynamic power at the full clock."""
    r = np.asarray(clock_fraction, dtype=float)
    a, k = dvfs.exponent, dvfs.knee_clock_fraction
    return np.where(r >= k, r**a, k**a * r / k)


def clock_fraction(cap_W: ArrayLike, full_W: ArrayLike, tdp_W: ArrayLike, dvfs: Dvfs) -> np.ndarray:
    """The clock fraction r = f/f_max at which a device that draws ``full_W`` at the full clock
    draws at most ``cap_W`` (eq. 3.20d): 1 when the cap does not bind; P_s = s·``tdp_W``. A cap at or
    below the static power has no clock (0)."""
    cap, full = np.asarray(cap_W, dtype=float), np.asarray(full_W, dtype=float)
    static = dvfs.static_fraction * np.asarray(tdp_W, dtype=float)
    y = np.clip((cap - static) / (full - static), 0.0, 1.0)
    a, k = dvfs.exponent, dvfs.knee_clock_fraction
    r = np.where(y >= k**a, y ** (1.0 / a), y * k ** (1.0 - a))
    return np.where(cap >= full, 1.0, r)


def capped_chip(tdp_W: ArrayLike, fraction: ArrayLike, dvfs: Dvfs) -> dict[str, np.ndarray]:
    """A catalog chip capped at ``fraction`` x TDP, whose design power at the full clock is its TDP:
    ``power_W`` (the cap), ``clock_fraction`` r (compute throughput x r) and
    ``flop_energy_factor`` g(r)/r (dynamic J per FLOP x it); exactly 1, 1 and TDP at fraction 1."""
    frac = np.asarray(fraction, dtype=float)
    cap = frac * tdp_W
    r = clock_fraction(cap, tdp_W, tdp_W, dvfs)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(r > 0, dynamic_fraction(r, dvfs) / r, np.inf)
    uncapped = frac == 1.0
    return {"power_W": np.where(uncapped, np.asarray(tdp_W, dtype=float), cap), "clock_fraction": np.where(uncapped, 1.0, r),
            "flop_energy_factor": np.where(uncapped, 1.0, factor)}


def check_limits(inst: Instance, path: Path | str | None) -> None:
    """Every (chip, cap) pair of a catalog instance's hardware space lies in the chip's published
    power-limit range; a cap on a chip without one (or at or below the model's static power) is an
    InputError naming the file, key, value, the range and a suggestion."""
    fracs = inst.hardware.decisions.get(DECISION)
    if not fracs or inst.hardware.family != "catalog":
        return
    key = f"hardware.decisions.{DECISION}"
    data = load_power_limits()
    for cid in inst.hardware.decisions.get("chip") or [inst.hardware.chip]:
        tdp = catalog.load_chip(cid).tdp_W
        limits = data.chips.get(cid)
        for frac in fracs:
            if frac > 1.0:
                raise InputError("a power limit above the chip's TDP", file=path, key=key, value=frac,
                                 expected="fractions of TDP in (0, 1]", suggestion="1.0 is the uncapped chip")
            if frac == 1.0:
                continue
            if limits is None:
                raise InputError(f"chip {cid!r} has no published power-limit range to cap within", file=path,
                                 key=key, value=frac, expected=f"1.0 for {cid} (chips with a range: "
                                 f"{', '.join(sorted(data.chips)) or 'none'})",
                                 suggestion="add the chip's nvidia-smi Min/Max Power Limit with its source to "
                                 "instances/catalog/power/power_limits.toml, or leave it uncapped")
            cap = frac * tdp
            lo, hi = limits.min_power_limit_W, limits.max_power_limit_W
            if not lo <= cap <= hi:
                raise InputError(f"{frac:g} x {tdp:g} W = {cap:g} W is outside {cid}'s power-limit range",
                                 file=path, key=key, value=frac,
                                 expected=f"{lo:g} to {hi:g} W: fractions {lo / tdp:.4g} to {min(hi / tdp, 1.0):.4g}",
                                 suggestion=f"nvidia-smi -pl accepts {lo:g}-{hi:g} W on {cid}")
            static = data.dvfs.static_fraction * tdp
            if cap <= static:
                raise InputError(f"{frac:g} x {tdp:g} W = {cap:g} W is at or below the DVFS model's static power "
                                 f"of {cid} ({static:g} W): the model has no clock for it", file=path, key=key,
                                 value=frac, expected=f"fractions above {data.dvfs.static_fraction:g}",
                                 suggestion="the model's static fraction is fitted (instances/catalog/power/"
                                 "power_limits.toml); cap higher")


def apply_caps(inst: Instance, t: Any) -> None:
    """Cap the catalog rows of a hardware table (``codesign.model.hardware.HardwareTable``) at their
    ``power_limit_fraction`` (eq. 3.20d): ``power_W`` is the cap, every precision's peak FLOP/s
    x r and s per FLOP (and per exponential) / r, dynamic J per FLOP x g(r)/r; memory, links and static power unchanged.
    Adds ``power_limit_W`` and ``clock_fraction``. No decision: the table is left as it is."""
    if DECISION not in t.decisions:
        return
    tdp = np.asarray(t.features["power_W"], dtype=float)
    cap = capped_chip(tdp, t.decisions[DECISION].astype(float), load_power_limits().dvfs)
    r = cap["clock_fraction"]
    for name in list(t.features):
        if name.startswith("peak_flops@"):
            t.features[name] = t.features[name] * r
        elif name.startswith("s_per_flop@") or name == "s_per_exp":  # the SFUs run at the SMs' clock
            t.features[name] = t.features[name] / r
        elif name.startswith("J_per_flop@"):
            t.features[name] = t.features[name] * cap["flop_energy_factor"]
    t.features["power_W"] = cap["power_W"]
    t.features["power_limit_W"] = cap["power_W"].copy()
    t.features["clock_fraction"] = r
    t.labels["power_limit_W"] = "power limit (nvidia-smi -pl) of one device, W"
    t.labels["clock_fraction"] = "compute clock under the power limit / full clock (DVFS, eq. 3.20d)"
