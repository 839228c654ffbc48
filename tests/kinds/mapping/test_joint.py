"""codesign.kinds.mapping.joint: module count and pool ports as hardware decisions in the mapping's
MIP. The joint optimum of a tiny instance equals an enumeration of every hardware design's every
mapping by the model, with HiGHS and CP-SAT; the hardware-dependent terms are checked by hand."""

from __future__ import annotations

import pytest

from codesign.errors import InputError
from codesign.kinds.base import decision_groups
from codesign.kinds.mapping import joint
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.problem import Mapping
from codesign.proof.driver import solve
from codesign.proof.tolerances import AGREEMENT_RTOL

#: a lit port's laser, W (the figure pf-llama405b-joint cites: 0.7 pJ/bit x 7.2 Tbps)
PORT_W = 5.04


def tiny(objective: str = "tokens_per_s", tpot_s: float | None = None, **appliance) -> Mapping:
    """3 layers of Llama-3.1-405B on 2 H100s; 1 or 2 modules, 0, 1 or 2 ports per device: 6 hardware
    designs, 825,622 designs in all."""
    raw = generate_mapping(devices=2, modules=2, layers=3, ports=1, weights=("local", "pool"), kv=("local", "pool"),
                           objective=objective, tpot_s=tpot_s, name="tiny-joint")
    raw["appliance"].update({"modules": [1, 2], "port_static_power_W": PORT_W, **appliance})
    raw["devices"][0]["pool_ports"] = [0, 1, 2]
    return Mapping.from_data(raw, source="tiny-joint")


@pytest.fixture(scope="module")
def fast():
    return tiny()


def test_the_hardware_decisions_are_listed_with_their_group(fast):
    hw = [d for d in fast.decisions() if d.group == "hardware"]
    assert [(d.name, d.domain) for d in hw] == [("modules", (1, 2)), ("pool_ports[dev]", (0, 1, 2))]
    assert decision_groups(fast.decisions()) == ["hardware", "mapping", "placement"]
    assert len(fast.hardware.choices()) == 6
    assert fast.default_solver == "highs"  # --solver auto: HiGHS proves the named joint instances sooner


def test_auto_takes_cpsat_when_a_tpot_budget_caps_the_period_of_fixed_chips():
    assert tiny("energy_per_token_J", tpot_s=0.05).default_solver == "cpsat"


def test_a_scalar_keeps_the_fixed_hardware_instance():
    raw = generate_mapping(devices=2, modules=2, layers=3, ports=1, name="fixed")
    p = Mapping.from_data(raw, source="fixed")
    assert not p.hardware.joint
    assert decision_groups(p.decisions()) == ["mapping", "placement"]
    assert joint.HARDWARE_KEY not in p.baseline() and "hardware_static_W" not in p.assess(p.baseline()).metrics


def test_static_power_of_the_lit_ports_by_hand(fast):
    """Each device port and each module port draws PORT_W: 2 devices x P ports + M modules x 1 port."""
    for hw in fast.hardware.choices():
        lit = 2 * hw["pool_ports"]["dev"] + hw["modules"]
        assert fast.problem_at(hw).hardware_static_W == pytest.approx(PORT_W * lit, rel=1e-15)
        assert fast.hardware.static_W(hw) == pytest.approx(PORT_W * lit, rel=1e-15)


def test_the_same_mapping_on_more_hardware_costs_the_ports_static_energy(fast):
    """An all-local mapping: the period is the hardware's alone; energy per token grows by ΔW x T / m."""
    local = {"layers_per_stage": [2, 1], "weights": ["local"] * 3, "kv": ["local"] * 3, "attach": [[], []]}
    small = fast.assess({**local, "hardware": {"modules": 1, "pool_ports": {"dev": 0}}})
    big = fast.assess({**local, "hardware": {"modules": 2, "pool_ports": {"dev": 2}}})
    assert small.metrics["period_s"] == big.metrics["period_s"]
    extra_W = PORT_W * (2 * 2 + 2) - PORT_W * 1
    m = fast.model.micro_batch
    assert big.objective == small.objective  # tokens/s: the same period
    assert big.metrics["energy_per_token_J"] - small.metrics["energy_per_token_J"] == pytest.approx(
        extra_W * small.metrics["period_s"] / m, rel=1e-9)


def test_attachment_needs_the_module_and_the_ports(fast):
    base = fast.baseline()
    with pytest.raises(InputError):  # module 1 does not exist with one module: its tiers are not of the space
        fast.parse_design({**base, "hardware": {"modules": 1, "pool_ports": {"dev": 2}},
                           "weights": ["pool:1:hbm", "local", "local"], "attach": [[1], []]})
    a = fast.assess({**base, "hardware": {"modules": 2, "pool_ports": {"dev": 1}}, "attach": [[0, 1], []]})
    assert not a.feasible and any("has 1 ports" in v for v in a.violations)
    with pytest.raises(InputError, match="not a value of the decision"):
        fast.parse_design({"hardware": {"modules": 3}})


@pytest.mark.parametrize("objective,tpot_s", [("tokens_per_s", None), ("energy_per_token_J", None),
                                              ("energy_per_token_J", 0.0062)])
def test_the_joint_optimum_equals_brute_force_with_both_solvers(objective, tpot_s):
    p = tiny(objective, tpot_s)
    bf = p.brute_force()
    assert bf.complete and bf.points == p.space_size() and bf.best is not None
    for solver in ("highs", "cpsat"):
        sol = solve(p, solver=solver)
        assert sol.status == "optimal"
        assert sol.objective == pytest.approx(bf.best.objective, rel=AGREEMENT_RTOL)
        assert p.assess(sol.design).feasible


def test_the_tpot_budget_makes_the_hardware_matter():
    """Energy per token, unbudgeted: no ports (the pool path costs energy, lit ports static power);
    under a tight tpot budget the optimum needs the pool, so hardware and mapping are chosen together."""
    free = tiny("energy_per_token_J").brute_force().best.design["hardware"]
    tight = tiny("energy_per_token_J", 0.0062).brute_force().best.design["hardware"]
    assert free == {"modules": 1, "pool_ports": {"dev": 0}}
    assert tight["pool_ports"]["dev"] > 0


def test_the_rule_baseline_is_hardware_first_with_the_greedy_mapping(fast):
    """Tokens/s: the greedy mapping keeps everything local here, so every hardware design gives it the
    same period; the tie goes to the least static power: one module, no ports."""
    assert fast.baseline()["hardware"] == {"modules": 1, "pool_ports": {"dev": 0}}
    assert fast.assess(fast.baseline()).feasible


def test_bad_hardware_domains_are_input_errors():
    raw = generate_mapping(devices=2, modules=2, layers=3, name="bad")
    for where, value in ((("appliance", "modules"), [2, 2]), (("appliance", "modules"), [4, 17]),
                         (("appliance", "modules"), [])):
        bad = {**raw, "appliance": {**raw["appliance"], where[1]: value}}
        with pytest.raises(InputError):
            Mapping.from_data(bad, source="bad")
    paper = {**raw, "appliance": {**raw["appliance"], "modules": [1, 2], "assumed_device_bandwidth_GBps": 26800}}
    with pytest.raises(InputError, match="port model"):
        Mapping.from_data(paper, source="bad")
    no_app = generate_mapping(devices=2, modules=0, layers=3, name="bad")
    no_app["devices"][0]["pool_ports"] = [0, 1]
    with pytest.raises(InputError, match="needs an \\[appliance\\]"):
        Mapping.from_data(no_app, source="bad")
