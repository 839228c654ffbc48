"""Fitting the calibration per chip family on the fit rows of a split (``codesign calibrate``).

Per calibration family (a catalog chip's ``family``; VALIDATION.md §4) the fit minimises the MAPE
of the family's fit rows over the fields of FIT_FIELDS (Nelder-Mead from three deterministic
starts, restarted until it stops gaining), each within its physical bounds (FIT_BOUNDS), with the
memory rule's one free field, the runtime reserve, searched on a grid around it. The stream
overlap is held at 0 (HELD_FIELDS) unless asked for; the die's bandwidth cap is fitted only for
a family whose chips share a die on different memories, the 8-bit compute efficiency only on
request and for a family measured at both an 8-bit and a wider precision. Predictions during the
fit are re-composed from the model's own terms (``codesign.calibration.terms``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

from codesign import catalog
from codesign.calibration.engine import (
    ENGINE_MAX_BATCH,
    ENGINE_USABLE_FRACTION,
    MEMORY_FIELDS,
    skip_reason,
)
from codesign.calibration.rows import Row, read_rows, read_split, split_of
from codesign.calibration.terms import CAP_FIELD, EIGHT_BIT_FIELD, HOST_FIELD, RowStack, TermCache
from codesign.model.calibration import CalibrationSet, shipped

#: calibration fields fitted per family by the simplex search
FIT_FIELDS = ("compute_efficiency", "memory_efficiency", "network_efficiency", "layer_overhead_us", "stream_overlap",
              "collective_step_latency_us")
#: fields of FIT_FIELDS every family holds instead of fitting: the compute and memory streams of a
#: step add (o = 0, eq. 5.3). Fitted per family, o comes out between 0 and 1 and trades against the
#: compute efficiency (ada: o = 1 with a compute efficiency of 0.46); held at 0, every family's
#: compute efficiency is 0.68-0.90 and the held-out rows are predicted better (VALIDATION.md).
#: ``FitOptions.fit_overlap`` fits it again
HELD_FIELDS: tuple[tuple[str, float], ...] = (("stream_overlap", 0.0),)
#: the physical bounds of each fitted field
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.05, 1.0),
    EIGHT_BIT_FIELD: (0.05, 1.0),
    "memory_efficiency": (0.05, 1.0),
    "network_efficiency": (0.05, 1.0),
    # kernel launches and synchronisation of one transformer layer: a handful of kernels of a few
    # microseconds each. TensorRT-LLM's own small-batch ITLs (70B, TP4, H100: 21 ms for 80 layers
    # incl. weights) leave no room for more than a few tens of microseconds per layer.
    "layer_overhead_us": (0.0, 50.0),
    "stream_overlap": (0.0, 1.0),
    # one ring step of a TP collective: the ranks hand a block on and pass a flag barrier, whatever
    # the message size; 2(n-1) steps per all-reduce over n ranks. A microbenchmark's small-message
    # step takes about a microsecond on NVLink and several over PCIe; inside a serving step the
    # barrier also waits for the slowest rank's kernel launches, which grows with n. An assumption
    # of order of magnitude, not a measured figure: 30 us bounds it
    "collective_step_latency_us": (0.0, 30.0),
    # host time per sequence of a step (only with FitOptions.fit_host): a Python scheduler and
    # sampler spend microseconds to tens of microseconds per request and step
    HOST_FIELD: (0.0, 200.0),
    # memory the runtime holds besides weights and KV cache: CUDA context (~0.5-1 GiB), the
    # engine's activation workspace and logits buffers (a few GiB)
    "runtime_reserve_GiB": (0.0, 16.0),
    # sustained local-memory bandwidth of one die: from a tenth of any GPU's peak to above every peak
    CAP_FIELD: (100.0, 20000.0),
}
#: runtime_reserve_GiB search: coarse grid (GiB), then +-0.5 and +-0.25 around the best
RESERVE_COARSE = tuple(float(g) for g in range(0, 13))
RESERVE_STEPS = (0.5, 0.25)
#: calibration fields written to a fitted chip's ``[chips.<id>]`` table
CHIP_PARAMS = (*FIT_FIELDS, EIGHT_BIT_FIELD, "usable_memory_fraction", "runtime_reserve_GiB", CAP_FIELD, HOST_FIELD)
#: key of the calibration fitted on every measured family together. It goes to the catalog chips
#: (all GPUs) of families without measurements, not ``[default]``'s initial assumptions, which
#: stay for the 3D families
POOLED = "pooled"

#: Nelder-Mead restarts per start, and the MAPE gain (points) below which a restart is the last
FIT_RESTARTS = 10
FIT_RESTART_GAIN_PCT = 1e-4
#: deterministic starting points of the simplex search
_STARTS = (
    {"compute_efficiency": 0.6, "memory_efficiency": 0.8, "network_efficiency": 0.6, "layer_overhead_us": 10.0,
     "stream_overlap": 0.5, "collective_step_latency_us": 10.0, HOST_FIELD: 10.0},
    {"compute_efficiency": 0.4, "memory_efficiency": 0.6, "network_efficiency": 0.3, "layer_overhead_us": 2.0,
     "stream_overlap": 0.2, "collective_step_latency_us": 3.0, HOST_FIELD: 2.0},
    {"compute_efficiency": 0.8, "memory_efficiency": 0.9, "network_efficiency": 0.9, "layer_overhead_us": 30.0,
     "stream_overlap": 0.8, "collective_step_latency_us": 30.0, HOST_FIELD: 30.0},
)
#: fitted fields in microseconds (searched linearly, in units of 10 µs)
_MICROSECONDS = ("layer_overhead_us", "collective_step_latency_us", HOST_FIELD)


@dataclass(frozen=True)
class FitOptions:
    """What the fit fits beyond the fields every fit fits (``codesign calibrate``'s flags).

    Attributes:
        fit_host: also fit the host time per sequence of a step (``--fit-host``; eq. 5.3).
        fit_8bit: fit the 8-bit tensor rate's own compute efficiency for a family whose fit rows
            run at both an 8-bit and a wider format (``--fit-8bit``; eq. 3.20c).
        fit_overlap: fit the stream overlap per family instead of holding it at 0 (``--fit-overlap``).
        fixed: calibration fields held at a value instead of fitted (on top of HELD_FIELDS; a
            field given here wins), e.g. ``(("stream_overlap", 1.0),)``.
    """

    fit_host: bool = False
    fit_8bit: bool = False
    fit_overlap: bool = False
    fixed: tuple[tuple[str, float], ...] = ()

    @property
    def fixed_values(self) -> dict[str, float]:
        held = {k: v for k, v in HELD_FIELDS if not (self.fit_overlap and k == "stream_overlap")}
        return {**held, **dict(self.fixed)}


def family_of(chip: str) -> str:
    """The calibration family of a catalog chip (its ``family``; the chip id itself if it has none
    or is not in the catalog)."""
    return catalog.chip_family(chip)


def chip_families() -> dict[str, tuple[str, ...]]:
    """Calibration family -> catalog chip ids. The calibration is fitted per family and written to
    the ``[chips.<id>]`` table of every chip of a fitted family."""
    out: dict[str, list[str]] = {}
    for cid in catalog.list_ids("chips"):
        out.setdefault(catalog.chip_family(cid), []).append(cid)
    return {fam: tuple(chips) for fam, chips in sorted(out.items())}


def memory_peaks_GBps(rows: Sequence[Row]) -> list[float]:
    """The distinct datasheet memory bandwidths of the rows' chips, ascending."""
    return sorted({float(catalog.load_chip(gpu).memory_bandwidth_GBps) for gpu in {r.gpu for r in rows}})


def cap_is_fitted(rows: Sequence[Row], options: FitOptions, peaks: Sequence[float] | None = None) -> bool:
    """Whether a fit of ``rows`` fits the die's bandwidth cap (eq. 3.21a): only for rows of one
    calibration family (one die) whose chips differ in memory bandwidth (``peaks``: the rows'
    ``memory_peaks_GBps`` if already known), unless the options hold it."""
    peaks = memory_peaks_GBps(rows) if peaks is None else peaks
    return len({family_of(r.gpu) for r in rows}) == 1 and len(peaks) > 1 and CAP_FIELD not in options.fixed_values


def eight_bit_is_fitted(stack: RowStack, options: FitOptions) -> bool:
    """Whether a fit of ``stack`` fits ``compute_efficiency_8bit`` (eq. 3.20c): only if asked
    (``fit_8bit``) and not held, the rows are of one calibration family (one die, as for the
    bandwidth cap: across families the 8-bit rows of one chip against the wider rows of another
    would measure the chips, not the format; the pooled fit never fits it), and some of the rows
    that fit in memory compute at the 8-bit tensor rate and some at a wider one."""
    if not options.fit_8bit or EIGHT_BIT_FIELD in options.fixed_values:
        return False
    if len({family_of(r.gpu) for r in stack.rows}) != 1:
        return False
    flags = np.asarray(stack.dec["eight_bit"])[np.asarray(stack.fits)]
    return bool(np.any(flags > 0) and np.any(flags == 0))


def _to_cal(z: np.ndarray, base: dict[str, float], free: Sequence[str]) -> dict[str, float]:
    """Optimiser coordinates -> calibration (log for efficiencies, µs/10 for the overheads, the
    overlap itself), clipped to FIT_BOUNDS."""
    cal = dict(base)
    for i, k in enumerate(free):
        lo, hi = FIT_BOUNDS[k]
        if k in _MICROSECONDS:
            v = 10.0 * z[i]
        elif k == "stream_overlap":
            v = z[i]
        else:  # clipped in log space: a coordinate the rows do not constrain may drift far
            v = math.exp(min(max(z[i], math.log(lo)), math.log(hi)))
        cal[k] = min(max(v, lo), hi)
    return cal


def _from_cal(cal: dict[str, float], free: Sequence[str]) -> np.ndarray:
    return np.array([cal[k] / 10.0 if k in _MICROSECONDS else cal[k] if k == "stream_overlap" else math.log(cal[k])
                     for k in free])


def fit_stack(stack: RowStack, base: dict[str, float], options: FitOptions) -> tuple[dict[str, float], float]:
    """Minimise ``stack.mape`` over the free calibration fields from the deterministic starts:
    (the best calibration, its MAPE)."""
    free = [k for k in FIT_FIELDS if k not in options.fixed_values]
    if options.fit_host and HOST_FIELD not in options.fixed_values:
        free.append(HOST_FIELD)
    peaks = memory_peaks_GBps(stack.rows)
    if cap_is_fitted(stack.rows, options, peaks):
        free.append(CAP_FIELD)
    elif CAP_FIELD not in options.fixed_values:
        base = {**base, CAP_FIELD: None}
    if eight_bit_is_fitted(stack, options):
        free.append(EIGHT_BIT_FIELD)
    elif EIGHT_BIT_FIELD not in options.fixed_values:
        base = {**base, EIGHT_BIT_FIELD: None}
    best: tuple[float, dict[str, float]] | None = None
    for start in _STARTS:
        # the cap starts between the slowest and the fastest memory of the family
        start = {**start, CAP_FIELD: start["memory_efficiency"] * math.sqrt(peaks[0] * peaks[-1])} if peaks else start
        start = {**start, EIGHT_BIT_FIELD: start["compute_efficiency"]}  # from the 16-bit one
        x = _from_cal(start, free)
        previous = math.inf
        for _ in range(FIT_RESTARTS):
            # Nelder-Mead's simplex collapses long before an 8-dimensional minimum: restart it from
            # its own result until a restart gains less than FIT_RESTART_GAIN_PCT
            res = minimize(lambda z: stack.mape(_to_cal(z, base, free)), x, method="Nelder-Mead",
                           options={"maxiter": 6000, "xatol": 1e-5, "fatol": 1e-7})
            x = _from_cal(_to_cal(res.x, base, free), free)  # the next start inside the bounds
            if previous - res.fun < FIT_RESTART_GAIN_PCT:
                break
            previous = res.fun
        cal = _to_cal(x, base, free)
        val = stack.mape(cal)
        if best is None or val < best[0] - 1e-12:
            best = (val, cal)
    assert best is not None
    return best[1], best[0]


def memory_base(calibration: CalibrationSet) -> dict[str, float]:
    """The memory fields of the engine's rule: u = 1, the reserve (fitted; 0 to start) and the
    calibration's ``kv_cache_free_fraction`` f."""
    return {"usable_memory_fraction": ENGINE_USABLE_FRACTION, "runtime_reserve_GiB": 0.0,
            "kv_cache_free_fraction": calibration.kv_cache_free_fraction}


def _fit_family(rows: list[Row], cache: TermCache, base: dict[str, float], options: FitOptions,
                cap: int | None, fit_memory: bool) -> tuple[dict[str, float], float]:
    """Best calibration of one family on ``rows`` (the runtime reserve by grid search if fitted)."""
    if not fit_memory:
        return fit_stack(RowStack.build(rows, cache, None, cap), base, options)
    key = "runtime_reserve_GiB"
    lo, hi = FIT_BOUNDS[key]
    tried: dict[float, tuple[dict[str, float], float]] = {}

    def at(v: float) -> None:
        v = min(max(round(v, 4), lo), hi)
        if v not in tried:
            cal0 = {**base, key: v}
            tried[v] = fit_stack(RowStack.build(rows, cache, {k: cal0[k] for k in MEMORY_FIELDS}, cap), cal0, options)

    def best() -> float:
        return min(tried, key=lambda v: (tried[v][1], v))

    for v in RESERVE_COARSE:
        at(v)
    for step in RESERVE_STEPS:
        v0 = best()
        at(v0 - step)
        at(v0 + step)
    return tried[best()]


def fit_group(fit_rows: list[Row], held_rows: list[Row], initial: dict[str, float], cache: TermCache,
              options: FitOptions, fit_memory: bool, cap: int | None) -> dict[str, Any]:
    """Fit one calibration on ``fit_rows`` starting from ``initial`` (the held fields and the
    engine's memory rule applied) and report it on ``held_rows``: params, row counts, fit and
    held-out MAPE."""
    base = {**initial, **options.fixed_values}
    if fit_memory:
        base.update(memory_base(cache.calibration))
    cal, fit_mape = _fit_family(fit_rows, cache, base, options, cap, fit_memory)
    mem = {k: cal[k] for k in MEMORY_FIELDS} if fit_memory else None
    held = RowStack.build(held_rows, cache, mem, cap)
    return {
        "params": {k: round(float(cal[k]), 4) for k in CHIP_PARAMS
                   if cal.get(k) is not None and (k != HOST_FIELD or cal[k] > 0)},
        "n_fit": len(fit_rows),
        "fit_mape_pct": float(fit_mape),
        "n_held_out": len(held_rows),
        "held_out_mape_pct": float(held.mape(cal)) if held_rows else float("nan"),
    }


def fit_calibration(
    csv_path: str | Path,
    split_file: str | Path | None,
    *,
    calibration: CalibrationSet | None = None,
    options: FitOptions = FitOptions(),
    fit_memory: bool = True,
    max_batch_cap: int | None = ENGINE_MAX_BATCH,
    families: Sequence[str] | None = None,
    pooled: bool = True,
    progress: Callable[[str], None] | None = None,
    engine: str | None = None,
) -> dict[str, Any]:
    """Fit the calibration per chip family on the split's ``fit`` rows (and, with ``pooled`` and
    every family, one calibration on all of them together for the chips of unmeasured families,
    key POOLED). Writes nothing (``codesign.calibration.write.write_calibration`` does).

    ``calibration`` (None: the shipped one) gives each family's starting values, the fields held,
    and the engine's ``kv_cache_free_fraction``; ``fit_memory`` fits the runtime reserve R by grid
    search (u = 1), else the calibration's memory fields are kept. The objective is the MAPE of the
    family's fit rows; ``split_file`` None labels the rows by ``split_of``. Returns ``{family:
    {"chips", "params", "n_fit", "fit_mape_pct", "n_held_out", "held_out_mape_pct"}}``, the family's
    values meant for each of its chips' table. ``progress`` is told each group before its fit.
    """
    calibration = shipped() if calibration is None else calibration
    rows = read_rows(csv_path, engine=engine)[0]
    labels = read_split(split_file) if split_file is not None else {r.id: split_of(r.id) for r in rows}
    usable = [r for r in rows if skip_reason(r) is None and r.id in labels]
    by_fam: dict[str, list[Row]] = defaultdict(list)
    for r in usable:
        by_fam[family_of(r.gpu)].append(r)
    cache = TermCache(calibration)
    result: dict[str, Any] = {}
    for fam in sorted(by_fam):
        if families is not None and fam not in families:
            continue
        fit_rows = [r for r in by_fam[fam] if labels[r.id] == "fit"]
        held_rows = [r for r in by_fam[fam] if labels[r.id] == "held-out"]
        if not fit_rows:
            continue
        if progress is not None:
            progress(f"fitting {fam} on {len(fit_rows)} rows")
        chips = sorted({r.gpu for r in by_fam[fam]} | set(chip_families().get(fam, ())))
        result[fam] = {"chips": chips, **fit_group(fit_rows, held_rows, calibration.for_chip(chips[0]).model_dump(),
                                                    cache, options, fit_memory, max_batch_cap)}
    if pooled and families is None and len(by_fam) > 1:
        # one calibration on every family's rows, for the catalog chips whose family has no rows
        every = [r for rs in by_fam.values() for r in rs]
        if progress is not None:
            progress(f"fitting every family pooled on {sum(labels[r.id] == 'fit' for r in every)} rows")
        result[POOLED] = {
            "chips": [c for c in catalog.list_ids("chips") if family_of(c) not in by_fam],
            **fit_group([r for r in every if labels[r.id] == "fit"], [r for r in every if labels[r.id] == "held-out"],
                        calibration.default.model_dump(), cache, options, fit_memory, max_batch_cap),
        }
    return result


def rows_weighted_mape(fitted: dict[str, Any], part: str = "held_out") -> float:
    """The MAPE over every row of a ``fit_calibration`` result's groups (``part`` "held_out" or
    "fit"): each group's MAPE weighted by its row count."""
    n = sum(g[f"n_{part}"] for g in fitted.values())
    return sum(g[f"{part}_mape_pct"] * g[f"n_{part}"] for g in fitted.values()) / n
