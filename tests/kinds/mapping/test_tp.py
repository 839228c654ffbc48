"""Tensor parallelism inside a pipeline stage (formulations/mapping.md eq. 9.2a) and the engine's
host time per sequence (eq. 9.2b): the stage's figures by hand from one device's, and the MIP's
optimum of a tiny tp = 2 instance equal to brute force with HiGHS and with CP-SAT."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codesign import catalog
from codesign.errors import InputError
from codesign.kinds.mapping.generate import generate_joint, generate_mapping
from codesign.kinds.mapping.problem import Mapping
from codesign.kinds.mapping.spec import mapping_from_data
from codesign.model.calibration import shipped
from codesign.model.mapping import MappingDesign, evaluate_mapping
from codesign.model.mapping_build import build_problem
from codesign.proof.driver import solve

#: Llama-3.1-405B: hidden 16384, 8 KV heads; micro-batch m = 8 sequences
M, HIDDEN = 8, 16384
SMALL = dict(devices=2, modules=0, layers=4, batch_per_stage=M, context_tokens=8192, weights=("local",), kv=("local",))


def problem(engine: str | None = None, **kw):
    raw = generate_mapping(**kw)
    if engine is not None:
        raw["system"] = {"engine": engine}
    return build_problem(mapping_from_data(raw))


def test_a_stage_of_two_devices_halves_each_devices_share_and_doubles_its_room():
    one, two = problem(**SMALL), problem(tp=2, **SMALL)
    d1, d2 = one.devices[0], two.devices[0]
    assert two.layer == one.layer  # the stage's totals (one device's at tp = 1)
    # Llama-3.1-405B layer at fp8: 3,187,703,808 B of weights (tests/model/test_mapping.py); each of
    # two devices reads half, 1,593,851,904 B, at its own memory's pace
    assert two.layer.w_read_B / 2 == 1_593_851_904
    assert two.layer.w_read_B * d2.s_per_B_local == pytest.approx(1_593_851_904 * d1.s_per_B_local, rel=1e-15)
    assert d2.s_per_flop == pytest.approx(d1.s_per_flop / 2, rel=1e-15)
    assert d2.local_capacity_B == 2 * d1.local_capacity_B
    assert d2.static_W == 2 * d1.static_W and d2.J_per_flop == d1.J_per_flop
    assert two.devices_tdp_W == 4 * 700.0  # 2 stages x 2 H100s x 700 W
    # activations: the part around the all-reduces (replicated: 20h per layer and token plus 4h per
    # step spread over 4 layers, 2 B) whole on each device, the rest split (tests/model/test_mapping.py)
    replicated = 2 * M * (20 * HIDDEN * 4 + 4 * HIDDEN) / 4
    assert d2.act_B == pytest.approx(one.layer.act_B + replicated, rel=1e-15)


def test_two_all_reduces_per_layer_by_hand():
    """An all-reduce of the micro-batch's hidden states, M = 8 x 16384 x 2 B = 262,144 B, over 2
    H100s: a ring moves 2 (t-1)/t M = 262,144 B per device in 2 steps; one-shot reads the other's M
    in 1 step, so the physics' fastest is one-shot; on NVLink 4 (450 GB/s per direction at the
    calibration's network efficiency, 500 ns per step plus the calibration's collective step)."""
    two = problem(tp=2, **SMALL)
    cal = shipped().for_chip("h100-sxm")
    ring_B = 2 * (2 - 1) / 2 * M * HIDDEN * 2
    assert ring_B == 262_144
    one_ar = ring_B / (450e9 * cal.network_efficiency) + 1 * (500e-9 + cal.collective_step_latency_us * 1e-6)
    d = two.devices[0]
    assert d.s_per_layer_comm == pytest.approx(2 * one_ar, rel=1e-12)
    nvlink = catalog.load_interconnect("nvlink4")
    assert d.J_per_layer_comm == pytest.approx(2 * 2 * ring_B * nvlink.energy_pJ_per_bit * 8e-12, rel=1e-12)
    assert problem(**SMALL).devices[0].s_per_layer_comm == 0.0
    # a stage's period: each layer adds the two all-reduces, exposed
    design = MappingDesign((2, 2), ("local",) * 4, ("local",) * 4, ((), ()))
    ev = evaluate_mapping(two, design)
    plain = evaluate_mapping(replace(two, devices=[replace(x, s_per_layer_comm=0.0, s_last_comm=0.0) for x in two.devices]),
                             design)
    assert ev.stage_s[0] - plain.stage_s[0] == pytest.approx(2 * 2 * one_ar, rel=1e-9)


def test_the_engines_host_time_is_charged_per_sequence_of_each_stage_step():
    """trtllm-1.x: 20 µs per sequence of a step (its profile); each stage's step runs m = 8: 8 x 20 = 160 µs."""
    p = problem("trtllm-1.x", **SMALL)
    assert [x.s_host for x in p.devices] == [pytest.approx(8 * 20e-6, rel=1e-12)] * 2
    design = MappingDesign((2, 2), ("local",) * 4, ("local",) * 4, ((), ()))
    ev = evaluate_mapping(p, design)
    free = evaluate_mapping(replace(p, devices=[replace(x, s_host=0.0) for x in p.devices]), design)
    assert ev.period_s - free.period_s == pytest.approx(160e-6, rel=1e-9)
    assert all(x.s_host == 0.0 for x in problem(**SMALL).devices)  # no engine: no host time


def test_a_tp_that_splits_no_kv_head_evenly_is_refused():
    with pytest.raises(InputError, match="divide the 8 KV heads"):
        mapping_from_data(generate_mapping(tp=3, **SMALL))


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_tiny_tp2_optimum_equals_brute_force(solver, objective):
    """3 layers over 2 stages of 2 H100s, one module: the pool's port scales with the stage's devices
    (energy: HiGHS with the stage envelopes, CP-SAT without)."""
    raw = generate_mapping(devices=2, modules=1, layers=3, ports=1, tp=2, batch_per_stage=M, weights=("local", "pool"),
                           kv=("local", "pool"), objective=objective, name="tiny-tp2")
    p = Mapping.from_data(raw, source="tiny-tp2")
    bf = p.brute_force()
    assert bf.complete and bf.best is not None
    sol = solve(p, solver=solver, time_limit=60)
    assert sol.status == "optimal"
    assert sol.objective == pytest.approx(bf.best.objective, rel=1e-6)


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_tiny_joint_tp2_optimum_equals_brute_force(solver):
    """A chip per group over 2 stages of 2 devices: the static power and the TDP envelope count 4."""
    data = generate_joint(devices=4, tp=2, groups=2, chips=("h100-sxm", "b200"), layers=3, modules=1,
                          tiers=("local", "pool"), batch_per_stage=4, power_W_per_device=850.0)
    p = Mapping.from_data(data, source="generated")
    assert p.inst.spec.budgets.power_W == 4 * 850.0
    # 2 B200s (1,000 W) and 2 H100s (700 W) fit 3,400 W; 4 B200s do not
    over = [hw for hw in p.hardware.choices() if p.problem_at(hw).devices_tdp_W > 3400.0]
    assert [hw["chip"] for hw in over] == [{"g0": "b200", "g1": "b200"}]
    bf = p.brute_force()
    assert bf.complete and bf.best is not None and bf.best.design["hardware"]["chip"] != {"g0": "b200", "g1": "b200"}
    sol = solve(p, solver=solver, time_limit=60)
    assert sol.status == "optimal"
    assert sol.objective == pytest.approx(bf.best.objective, rel=1e-6)
