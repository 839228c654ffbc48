"""codesign.kinds.mapping.chips: a device group's chip as a hardware decision in the mapping's MIP.
The joint optimum of a tiny instance (tests/data/tiny-mapping-chips.toml: 2 stages, each an H100,
an H200 or a B200) equals an enumeration of every chip pair's every mapping by the model, with
HiGHS and CP-SAT; the chip-dependent figures and the power budget are checked by hand."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from codesign import catalog
from codesign.errors import InputError
from codesign.kinds.base import decision_groups
from codesign.kinds.mapping import joint
from codesign.kinds.mapping.problem import Mapping
from codesign.kinds.mapping.spec import mapping_from_data
from codesign.model.calibration import load_calibration, shipped, shipped_path
from codesign.proof.driver import solve
from codesign.proof.tolerances import AGREEMENT_RTOL
from codesign.schema import load_toml

TINY = Path(__file__).resolve().parents[2] / "data" / "tiny-mapping-chips.toml"
CHIPS = ("h100-sxm", "h200-sxm", "b200")


def tiny(objective: str = "tokens_per_s", calibration=None, **budgets) -> Mapping:
    raw = load_toml(TINY)
    raw["objective"] = {"metric": objective}
    if budgets:
        raw["budgets"] = budgets
    return Mapping(mapping_from_data(raw, source=TINY, calibration=calibration))


@pytest.fixture(scope="module")
def fast():
    return tiny()


def hw(first: str, second: str) -> dict:
    return {"modules": 1, "pool_ports": {"first": 1, "second": 1}, "chip": {"first": first, "second": second}}


def test_the_chip_decisions_are_listed_with_their_group(fast):
    chips = [(d.name, d.domain) for d in fast.decisions() if d.name.startswith("chip")]
    assert chips == [("chip[first]", CHIPS), ("chip[second]", CHIPS)]
    assert all(d.group == "hardware" for d in fast.decisions() if d.name.startswith("chip"))
    assert decision_groups(fast.decisions()) == ["hardware", "mapping", "placement"]
    assert len(fast.hardware.choices()) == 9
    assert fast.default_solver == "highs"


def test_a_one_layer_stage_computes_at_the_chips_peak_by_hand(fast):
    """compute = flops / (peak FP8 x compute efficiency) + layer overhead (eq. 9.2), per chip: the
    B200's 4,500 TFLOP/s at its pooled-fit efficiency against the H100's 1,978.9 at Hopper's."""
    one = {"layers_per_stage": [1, 2], "weights": ["local"] * 3, "kv": ["local"] * 3, "attach": [[], []]}
    flops = fast.model.layer.flops
    for chip in CHIPS:
        a = fast.assess({**one, "hardware": hw(chip, "h200-sxm")})
        cal = shipped().for_chip(chip)
        peak = catalog.load_chip(chip).peak_dense_TFLOPS["fp8"] * 1e12
        assert a.metrics["compute_s"][0] == pytest.approx(
            flops / (peak * cal.compute_efficiency_at("fp8")) + cal.layer_overhead_us * 1e-6, rel=1e-12)
    h100 = fast.assess({**one, "hardware": hw("h100-sxm", "b200")}).metrics["compute_s"][0]
    b200 = fast.assess({**one, "hardware": hw("b200", "b200")}).metrics["compute_s"][0]
    # the layer overhead is 0 in both fits: the ratio is that of the achieved FLOP/s
    assert h100 / b200 == pytest.approx((4500 * 0.7521) / (1978.9 * 0.7947), rel=1e-12)


def test_the_provisioned_power_budget_by_hand():
    """power_W bounds the devices' TDP (700 W per Hopper GPU, 1,000 W per B200; no lit-port power here)."""
    p = tiny(power_W=1700)
    base = {"layers_per_stage": [1, 2], "weights": ["local"] * 3, "kv": ["local"] * 3, "attach": [[], []]}
    for first in CHIPS:
        for second in CHIPS:
            h = hw(first, second)
            watts = sum(1000.0 if c == "b200" else 700.0 for c in (first, second))
            assert p.problem_at(h).devices_tdp_W == watts
            a = p.assess({**base, "hardware": h})
            assert a.feasible == (watts <= 1700)
            if watts > 1700:
                assert any("provisioned power 2000 W" in v for v in a.violations)


@pytest.mark.parametrize("objective,budgets", [
    ("tokens_per_s", {}),
    ("tokens_per_s", {"power_W": 1700}),  # at most one B200
    ("energy_per_token_J", {}),  # an H200 first, a B200 second: the B200's static power is not worth it everywhere
    ("energy_per_token_J", {"power_W": 1400}),  # Hopper only
    ("energy_per_token_J", {"power_W": 1700, "tpot_s": 0.06}),
])
def test_the_joint_optimum_equals_brute_force_with_both_solvers(objective, budgets):
    p = tiny(objective, **budgets)
    bf = p.brute_force()
    assert bf.complete and bf.points == p.space_size() == 52488 and bf.best is not None
    for solver in ("highs", "cpsat"):
        sol = solve(p, solver=solver)
        assert sol.status == "optimal"
        assert sol.objective == pytest.approx(bf.best.objective, rel=AGREEMENT_RTOL)
        a = p.assess(sol.design)
        assert a.feasible and a.objective == pytest.approx(sol.objective, rel=AGREEMENT_RTOL)


def test_the_chip_matters():
    """Unconstrained the B200 is fastest; energy takes an H200 for the one-layer first stage; a
    1,400 W envelope leaves Hopper only."""
    assert tiny().brute_force().best.design["hardware"]["chip"] == {"first": "b200", "second": "b200"}
    assert tiny("energy_per_token_J").brute_force().best.design["hardware"]["chip"] == {"first": "h200-sxm", "second": "b200"}
    assert "b200" not in tiny("energy_per_token_J", power_W=1400).brute_force().best.design["hardware"]["chip"].values()


def test_overlapping_streams_per_chip_equal_brute_force(tmp_path):
    """A calibration where the B200's compute and memory streams overlap (σ = 0.5) and the Hopper
    chips' add: the stage row per chip (U_k, M_k disaggregated) still equals the enumeration."""
    text = shipped_path().read_text()
    head, tail = text.split("[chips.b200]\n", 1)
    path = tmp_path / "calibration.toml"
    path.write_text(head + "[chips.b200]\n" + tail.replace("stream_overlap = 0.0", "stream_overlap = 0.5", 1))
    cal = load_calibration(path)
    assert cal.for_chip("b200").stream_overlap == 0.5 and cal.for_chip("h100-sxm").stream_overlap == 0.0
    for objective in ("tokens_per_s", "energy_per_token_J"):
        p = tiny(objective, calibration=cal, power_W=1700)
        bf = p.brute_force()
        for solver in ("highs", "cpsat"):
            sol = solve(p, solver=solver)
            assert sol.status == "optimal"
            assert sol.objective == pytest.approx(bf.best.objective, rel=AGREEMENT_RTOL)


def test_a_fixed_hardware_over_its_power_budget_has_no_design():
    raw = load_toml(TINY)
    for g in raw["devices"]:
        g["chip"] = "b200"
    raw["budgets"] = {"power_W": 1999}
    p = Mapping.from_data(copy.deepcopy(raw), source="over")
    assert not p.hardware.joint
    assert not p.assess(p.baseline()).feasible
    assert solve(p, solver="highs").status == "infeasible"
    assert p.brute_force().best is None


def test_chip_designs_are_checked(fast):
    with pytest.raises(InputError, match="not a value of the decision"):
        fast.parse_design({**fast.baseline(), "hardware": {"chip": {"first": "a100-sxm-80gb"}}})
    with pytest.raises(InputError, match="chip is a table"):
        fast.parse_design({**fast.baseline(), "hardware": {"chip": {"third": "b200"}}})
    raw = load_toml(TINY)
    raw["devices"][0]["chip"] = ["h100-sxm", "h100-sxm"]
    with pytest.raises(InputError):
        Mapping.from_data(raw, source="bad")
    raw["devices"][0]["chip"] = ["h100-sxm", "h300"]
    with pytest.raises(InputError, match="unknown chip"):
        Mapping.from_data(raw, source="bad")
    # a partial hardware table takes the rest from the baseline's
    d = fast.parse_full({**fast.baseline(), "hardware": {"chip": {"first": "h100-sxm"}}}, "design")
    assert d.hardware["chip"] == {"first": "h100-sxm", "second": fast.baseline()["hardware"]["chip"]["second"]}
    assert joint.instance_at(fast.inst, d.hardware).spec.devices[0].chip == "h100-sxm"
