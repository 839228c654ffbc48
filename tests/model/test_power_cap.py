"""codesign.model.power_cap: the clock a power limit leaves (hand-derived), a cap at TDP is the
uncapped chip exactly, a cap costs compute-bound prefill more than memory-bound decode, a cap outside
the chip's range is refused with exit 2, the MIP equals brute force on a small power-cap instance,
and the shipped DVFS parameters are what tools/fit_power_cap.py fits (held-out error as stated)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.evaluate import evaluate
from codesign.model.hardware import hardware_table
from codesign.model.power_cap import Dvfs, capped_chip, clock_fraction, load_power_limits
from codesign.proof.driver import solve

ROOT = Path(__file__).resolve().parents[2]
NAME = "dgx-llama70b-power-cap"
#: the parameters the hand derivations below use (those shipped, written out)
DVFS = Dvfs(static_fraction=0.32, exponent=3.4, knee_clock_fraction=0.6, measurements="-", fit="-",
            held_out_mape=0.0, train_mape=0.0)


def test_the_clock_at_a_cap_by_hand() -> None:
    # H100: TDP 700 W, P_s = 0.32 x 700 = 224 W, dynamic at full clock 476 W; the knee's dynamic
    # fraction 0.6^3.4 = 0.1762. A 350 W cap: y = 126 / 476 = 0.26471 >= 0.1762, so r = y^(1/3.4)
    r = clock_fraction(350.0, 700.0, 700.0, DVFS)
    assert float(r) == pytest.approx(0.676431, abs=2e-6)
    assert float(r) == pytest.approx((126 / 476) ** (1 / 3.4), rel=1e-12)
    # 245 W: y = 21 / 476 = 0.044118 < 0.1762: below the knee, r = y x 0.6^(-2.4) = 0.044118 x 3.40751 = 0.150331
    assert float(clock_fraction(245.0, 700.0, 700.0, DVFS)) == pytest.approx(0.150331, abs=2e-6)
    # continuous at the knee: y = 0.6^3.4 gives r = 0.6 from both sides
    knee_cap = 224.0 + 476.0 * 0.6**3.4
    assert float(clock_fraction(knee_cap, 700.0, 700.0, DVFS)) == pytest.approx(0.6, rel=1e-12)
    # a cap that does not bind (at or above the draw) leaves the full clock; at the static power, none
    assert float(clock_fraction(300.0, 250.0, 700.0, DVFS)) == 1.0
    assert float(clock_fraction(224.0, 700.0, 700.0, DVFS)) == 0.0
    # the dynamic energy per FLOP falls with the clock: g(r)/r = r^2.4 above the knee
    chip = capped_chip(700.0, 0.5, DVFS)
    assert float(chip["power_W"]) == 350.0
    assert float(chip["flop_energy_factor"]) == pytest.approx(0.676431**2.4, rel=1e-5)


def test_the_shipped_parameters_are_the_ones_derived_above() -> None:
    d = load_power_limits().dvfs
    assert (d.static_fraction, d.exponent, d.knee_clock_fraction) == (0.32, 3.4, 0.6)
    limits = load_power_limits().chips["h100-sxm"]
    assert (limits.min_power_limit_W, limits.max_power_limit_W) == (200, 700)


def test_a_cap_at_tdp_is_the_uncapped_chip_exactly() -> None:
    capped = load_instance(NAME)
    plain = load_instance("dgx-llama70b-chip-choice")
    design = {"tp": 8, "pp": 1, "batch": 64}
    a = evaluate(capped, {**capped.baseline(), **design, "power_limit_fraction": 1.0})
    b = evaluate(plain, {**plain.baseline(), **design, "chip": "h100-sxm"})
    for key in ("tokens_per_s", "ttft_s", "tpot_s", "energy_per_token_J", "system_power_W"):
        assert a.metrics[key] == b.metrics[key], key  # bit for bit
    hw_a = hardware_table(capped, {"chip": np.array(["h100-sxm"], dtype=object), "power_limit_fraction": np.array([1.0])})
    hw_b = hardware_table(plain, {"chip": np.array(["h100-sxm"], dtype=object)})
    for name, col in hw_b.features.items():
        if name.startswith(("peak_flops", "s_per_flop", "J_per_flop", "power_W", "s_per_B_local")):
            assert np.array_equal(hw_a.features[name], col), name


def test_a_cap_costs_prefill_more_than_decode() -> None:
    inst = load_instance(NAME)
    design = {**inst.baseline(), "tp": 8, "batch": 64}
    full = evaluate(inst, {**design, "power_limit_fraction": 1.0}).metrics
    half = evaluate(inst, {**design, "power_limit_fraction": 0.5}).metrics
    assert half["system_power_W"] == 8 * 350.0
    ttft, tpot = half["ttft_s"] / full["ttft_s"], half["tpot_s"] / full["tpot_s"]
    assert ttft > tpot > 1.0  # compute-bound prefill slows more than memory-bound decode
    assert ttft < 1 / 0.676431 + 1e-9  # never more than the clock (the memory stream does not slow)
    assert half["energy_per_token_J"] < full["energy_per_token_J"]  # less energy per FLOP


def _small() -> dict:
    return {
        "name": "power-cap-small", "description": "a small power-cap instance", "system": {"devices": 8},
        "hardware": {"family": "catalog", "chip": "h100-sxm", "decisions": {"power_limit_fraction": [1.0, 0.7, 0.5, 0.35]}},
        "workloads": [{"workload": "llama-3.1-70b", "precision": "fp8", "phase": "both", "input_tokens": 1000,
                       "output_tokens": 1000, "tpot_slo_ms": 40.0,
                       "decisions": {"tp": [1, 2, 4, 8], "pp": [1, 2], "batch": [16, 64, 256]}}],
        "budgets": {"system_power_W": 4000.0},
    }


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
def test_the_mip_equals_brute_force_on_a_small_power_cap_instance(objective: str) -> None:
    data = _small()
    data["objective"] = {"metric": objective}
    problem = Grid(instance_from_data(data))
    brute = solve(problem, solver="brute")
    for solver in ("highs", "cpsat"):
        got = solve(problem, solver=solver)
        assert got.status == "optimal"
        assert got.objective == pytest.approx(brute.objective, rel=1e-9)
        assert got.design["power_limit_fraction"] == brute.design["power_limit_fraction"]
    if objective == "tokens_per_s":  # 8 x 700 W is over the 4 kW budget, 8 x 490 W the most under it
        assert brute.design["power_limit_fraction"] == 0.7


@pytest.mark.parametrize(("chip", "fractions", "pieces"), [
    ("h100-sxm", [1.0, 0.25], ["outside h100-sxm's power-limit range", "200 to 700 W"]),
    ("h100-sxm", [1.2], ["above the chip's TDP", "(0, 1]"]),
    ("h100-sxm", [0.3], ["static power", "fractions above 0.32"]),
    ("h200-sxm", [0.8], ["no published power-limit range", "h100-sxm"]),
])
def test_a_cap_outside_the_chips_range_is_refused(chip, fractions, pieces, cli, input_error, tmp_path) -> None:
    data = _small()
    data["hardware"] = {"family": "catalog", "chip": chip, "decisions": {"power_limit_fraction": fractions}}
    with pytest.raises(InputError) as err:
        instance_from_data(copy.deepcopy(data))
    assert err.value.key == "hardware.decisions.power_limit_fraction"
    text = (ROOT / "instances" / f"{NAME}.toml").read_text()
    text = text.replace('chip = "h100-sxm"', f'chip = "{chip}"').replace(
        "power_limit_fraction = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.35]", f"power_limit_fraction = {fractions}")
    text = text.replace("power_limit_fraction = 0.7", f"power_limit_fraction = {fractions[0]}")
    (tmp_path / "bad.toml").write_text(text)
    input_error(cli("show", str(tmp_path / "bad.toml")), "bad.toml", "hardware.decisions.power_limit_fraction", *pieces)


def test_a_power_cap_on_the_3d_family_is_an_unknown_decision() -> None:
    raw = load_instance("tiny-3d-llama8b").raw
    data = copy.deepcopy(raw)
    data["hardware"]["decisions"]["power_limit_fraction"] = [1.0]
    with pytest.raises(InputError, match="unknown decision"):
        instance_from_data(data)


def test_the_shipped_fit_is_reproduced_and_its_held_out_error_is_as_stated() -> None:
    spec = importlib.util.spec_from_file_location("fit_power_cap", ROOT / "tools" / "fit_power_cap.py")
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    points = fit.points()
    held = np.isin(points["gpu"], fit.HELD_OUT)
    train_error, dvfs = fit.fit(points, ~held)
    shipped = load_power_limits().dvfs
    assert (dvfs.static_fraction, dvfs.exponent, dvfs.knee_clock_fraction) == (
        shipped.static_fraction, shipped.exponent, shipped.knee_clock_fraction)
    assert train_error == pytest.approx(shipped.train_mape, abs=5e-5)
    assert fit.mape(points, dvfs, held) == pytest.approx(shipped.held_out_mape, abs=5e-5)
    assert held.sum() == 44 and (~held).sum() == 114
