"""Mapping instances (pipeline stages, tier placement, appliance attachment): hand-derived model
numbers, brute force = HiGHS = CP-SAT on tiny versions, CLI behaviour."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from codesign import catalog
from codesign.errors import InputError
from codesign.kinds.mapping.brute import brute_force_mapping, compositions
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.solve import solve_mapping
from codesign.kinds.mapping.spec import load_mapping, mapping_from_data
from codesign.model.calibration import shipped
from codesign.model.mapping import MappingDesign, build_problem, evaluate_mapping, space_size

GB = 1e9


def problem(**kw):
    return build_problem(mapping_from_data(generate_mapping(**kw)))


# --- hand-derived numbers ------------------------------------------------------------------


def test_llama405b_layer_costs_by_hand():
    # Llama-3.1-405B: hidden 16384, 128 heads x 128, 8 KV heads, FFN 53248 (gated), fp8.
    p = problem(devices=2, modules=0, layers=4, batch_per_stage=32, context_tokens=8192, weights=("local",), kv=("local",))
    attention = 16384 * 128 * 128 + 2 * 16384 * 8 * 128 + 128 * 128 * 16384  # q, k+v, o
    mlp = 3 * 16384 * 53248
    norms = 2 * 16384
    assert p.layer.w_store_B == attention + mlp + norms == 3_187_703_808
    assert p.layer.w_read_B == p.layer.w_store_B  # dense: every weight read once per period
    kv_token = 2 * 8 * 128  # bytes per token and layer at fp8
    assert p.layer.kv_store_B == 64 * 8192 * kv_token  # all 64 sequences' cache
    assert p.layer.kv_read_B == 32 * 8192 * kv_token + 32 * kv_token  # one micro-batch: read + write
    # FLOPs: 2 per MAC on the matmul weights for 32 tokens + QK^T and PV over 8193 pairs
    assert p.layer.flops == 2 * 32 * (attention + mlp) + 32 * 8193 * (2 * 2 * 128 * 128)
    # activations between kernels (model.md eq. 2.15j, k), 4 layers, 2 B per element, averaged
    # per layer: replicated 20h x 4 + 4h, sharded (4q + 2k) x 4 + 6 x 53248 x 4, q = 16384, k = 1024
    per_token = 20 * 16384 * 4 + 4 * 16384 + (4 * 16384 + 2 * 1024) * 4 + 6 * 53248 * 4
    assert per_token == 2_924_544
    assert p.layer.act_B == 2 * 32 * per_token / 4 == 46_792_704


def test_the_last_stage_holds_the_decoding_state_of_every_sequence(monkeypatch):
    """model.md eq. 4.14b in the mapping model: the last stage samples for all B = 64 sequences and
    keeps a decoding slot for each: 4 fp32 rows and 1 int32 row of Llama 3.1's 128,256-entry
    vocabulary, 64 KiB of top-K scratch and 10 x 4 B x 8,192 tokens = 2,958,336 B per slot."""
    from codesign.model import mapping

    kw = dict(devices=2, modules=0, layers=4, batch_per_stage=32, context_tokens=8192, weights=("local",), kv=("local",))
    with_state = problem(**kw)
    monkeypatch.setattr(mapping, "decoder_state_per_slot_B", lambda *a: 0)
    without = problem(**kw)
    per_slot = 4 * 128_256 * 4 + 128_256 * 4 + 65_536 + 40 * 8192
    assert per_slot == 2_958_336
    assert with_state.last_store_B - without.last_store_B == 64 * per_slot
    assert with_state.first_store_B == without.first_store_B


def test_period_of_an_all_local_design_by_hand():
    p = problem(devices=2, modules=0, layers=4, batch_per_stage=32, weights=("local",), kv=("local",))
    d = MappingDesign((3, 1), ("local",) * 4, ("local",) * 4, ((), ()))
    ev = evaluate_mapping(p, d)
    chip = catalog.load_chip("h100-sxm")
    cal = shipped().for_chip("h100-sxm")
    flops_s = chip.peak_dense_TFLOPS["fp8"] * 1e12 * cal.compute_efficiency_at("fp8")  # eq. 3.20c
    bw = chip.memory_bandwidth_GBps * GB * cal.memory_efficiency
    lay = p.layer
    head = 128256 * 16384 * 2.0  # LM head stays 16-bit (bf16) in fp8 checkpoints
    embed_rows = 32 * 16384 * 2.0
    compute0 = 3 * (lay.flops / flops_s + cal.layer_overhead_us * 1e-6)
    # activations stay in the stage's own memory: one layer's act_B per layer on the device
    memory0 = (3 * (lay.w_read_B + lay.kv_read_B + lay.act_B) + embed_rows) / bw
    compute1 = (lay.flops + 2 * 32 * 16384 * 128256) / flops_s + cal.layer_overhead_us * 1e-6
    logits = 32 * 128256 * 20.0  # the micro-batch's logits, LM head to sampling (model.md eq. 2.15l)
    memory1 = (lay.w_read_B + lay.kv_read_B + lay.act_B + head + 16384 + logits) / bw
    o = cal.stream_overlap  # the streams overlap by o (model.md eq. 5.3)
    stage0, stage1 = ((1 - o) * (c + m) + o * max(c, m) for c, m in ((compute0, memory0), (compute1, memory1)))
    assert ev.stage_s == pytest.approx([stage0, stage1], rel=1e-12)
    assert ev.period_s == pytest.approx(max(stage0, stage1), rel=1e-12)
    assert ev.tokens_per_s == pytest.approx(32 / max(stage0, stage1), rel=1e-12)
    assert ev.tpot_s == pytest.approx(2 * max(stage0, stage1), rel=1e-12)
    assert ev.feasible


def test_module_port_and_switch_are_shared():
    # two devices both attached to module 0 and both reading one layer's weights from it:
    # the port carries 2 x 3.19 GB per period at 900 GB/s
    p = problem(devices=2, modules=2, layers=2, batch_per_stage=8, weights=("local", "pool"), kv=("local",))
    d = MappingDesign((1, 1), ("pool:0:hbm", "pool:0:ddr"), ("local", "local"), ((0,), (0,)))
    ev = evaluate_mapping(p, d)
    app = catalog.load_appliance("photonic-fabric-appliance")
    assert app.port_bandwidth_GBps == 900.0  # 7.2 Tbps
    assert ev.port_load_s[0] == pytest.approx(2 * p.layer.w_read_B / 900e9, rel=1e-12)
    assert ev.port_load_s[1] == 0.0
    assert ev.switch_load_s == pytest.approx(2 * p.layer.w_read_B / 14_375e9, rel=1e-12)  # 115 Tbps
    assert ev.period_s >= ev.port_load_s[0]
    # each device's own link carries its layer: 3.19 GB / 900 GB/s
    assert min(ev.memory_s) >= p.layer.w_read_B / 900e9


def test_violations_are_reported():
    p = problem(devices=2, modules=2, layers=2, weights=("local", "pool"), kv=("local",))
    ev = evaluate_mapping(p, MappingDesign((1, 1), ("pool:1:hbm", "local"), ("local", "local"), ((0,), ())))
    assert not ev.feasible
    assert any("without attaching" in v for v in ev.violations)
    ev = evaluate_mapping(p, MappingDesign((1, 1), ("local", "local"), ("local", "local"), ((0, 1), ())))
    assert any("has 1 ports" in v for v in ev.violations)
    ev = evaluate_mapping(p, MappingDesign((2, 0), ("local", "local"), ("local", "local"), ((), ())))
    assert any("at least one layer" in v for v in ev.violations)


def test_local_capacity_violation_by_hand():
    # 40 layers of 405B fp8 weights (3.19 GB each = 127.5 GB) do not fit one H100's 80 GiB
    p = problem(devices=2, modules=0, layers=41, batch_per_stage=1, context_tokens=16, weights=("local",), kv=("local",))
    ev = evaluate_mapping(p, MappingDesign((40, 1), ("local",) * 41, ("local",) * 41, ((), ())))
    assert not ev.feasible and any("local memory" in v for v in ev.violations)


def test_space_size_counts_partitions_tiers_and_attachments():
    p = problem(devices=2, modules=2, layers=3, ports=1, weights=("local", "pool"), kv=("local",))
    # compositions of 3 into 2 = 2; weights tiers: local + 2 modules x 2 tiers = 5 per layer;
    # attachments per device: none, module 0, module 1
    assert space_size(p) == 2 * 5**3 * 1**3 * 3 * 3
    assert list(compositions(4, 2)) == [(1, 3), (2, 2), (3, 1)]


def test_paper_assumption_ignores_ports_and_is_linted():
    from codesign.kinds.mapping.commands import lints

    data = generate_mapping(devices=2, modules=2, layers=2, assumed_device_bandwidth_GBps=26_800)
    inst = mapping_from_data(data)
    p = build_problem(inst)
    ev = evaluate_mapping(p, MappingDesign((1, 1), ("pool:0:hbm", "pool:1:hbm"), ("local", "local"), ((), ())))
    assert ev.feasible
    assert ev.port_load_s == [0.0, 0.0]  # no port model under the assumption
    assert max(ev.memory_s) >= p.layer.w_read_B / 26_800e9
    codes = [x["code"] for x in lints(inst)]
    assert "pool-bandwidth-exceeds-ports" in codes  # 26,800 > 1 port x 900 GB/s


# --- exactness: brute force = HiGHS = CP-SAT -----------------------------------------------

TINY = [
    dict(devices=2, modules=2, layers=3, ports=1, host_GiB=16, batch_per_stage=32, weights=("local", "host", "pool"), kv=("local", "host", "pool")),
    dict(devices=2, modules=2, layers=3, ports=1, host_GiB=16, objective="energy_per_token_J", weights=("local", "host", "pool"), kv=("local", "pool")),
    dict(devices=4, modules=4, layers=4, ports=1, batch_per_stage=16, weights=("local", "pool"), kv=("local",)),
    dict(devices=2, modules=2, layers=3, ports=2, chips=("h200-sxm", "a100-sxm-80gb"), weights=("local", "pool"), kv=("local", "pool"), max_devices_per_module=1),
    dict(devices=3, modules=2, layers=4, ports=1, weights=("local", "pool"), kv=("local",), tpot_s=0.0112),
    dict(devices=2, modules=2, layers=3, ports=1, weights=("local", "pool"), kv=("local", "pool"), assumed_device_bandwidth_GBps=26_800),
    # one module for three devices, at most two of them attached: the sharing limit binds
    dict(devices=3, modules=1, layers=5, ports=1, batch_per_stage=32, weights=("local", "pool"), kv=("local", "pool"), max_devices_per_module=2),
]


@pytest.mark.parametrize("kw", TINY, ids=[f"tiny{i}" for i in range(len(TINY))])
def test_brute_force_equals_highs_and_cpsat(kw):
    inst = mapping_from_data(generate_mapping(**kw))
    p = build_problem(inst)
    brute = brute_force_mapping(p)
    assert brute.points == space_size(p)
    for solver in ("highs", "cpsat"):
        sol = solve_mapping(inst, solver=solver)
        if brute.objective is None:
            assert sol.status == "infeasible"
            continue
        assert sol.status == "optimal", (solver, sol.status, sol.gap)
        assert sol.objective == pytest.approx(brute.objective, rel=1e-6), solver
        # the solver's design, re-evaluated by the model, is feasible and has that objective
        d = MappingDesign(
            tuple(sol.design["layers_per_stage"]), tuple(sol.design["weights"]), tuple(sol.design["kv"]), tuple(tuple(a) for a in sol.design["attach"])
        )
        ev = evaluate_mapping(p, d)
        assert ev.feasible and ev.objective == pytest.approx(sol.objective, rel=1e-12)


def test_sharing_limit_binds_in_brute_force():
    kw = dict(TINY[6])
    limited = brute_force_mapping(problem(**kw))
    kw.pop("max_devices_per_module")
    free = brute_force_mapping(problem(**kw))
    assert limited.feasible_points < free.feasible_points
    assert sum(bool(a) for a in free.design.attach) == 3  # unlimited: every device uses the pool
    assert sum(bool(a) for a in limited.design.attach) <= 2
    assert limited.objective < free.objective


def test_tpot_budget_binds_in_brute_force():
    # the budget of TINY[4] removes designs: fewer feasible points than without it
    kw = dict(TINY[4])
    with_budget = brute_force_mapping(problem(**kw))
    kw.pop("tpot_s")
    without = brute_force_mapping(problem(**kw))
    assert 0 < with_budget.feasible_points < without.feasible_points


def test_infeasible_when_nothing_fits():
    # 405B layers with weights local only on two devices of 41 layers: no placement fits
    inst = mapping_from_data(generate_mapping(devices=2, modules=0, layers=60, batch_per_stage=1, context_tokens=16, weights=("local",), kv=("local",)))
    sol = solve_mapping(inst, solver="highs")
    assert sol.status == "infeasible" and sol.design is None


# --- files and CLI -------------------------------------------------------------------------


def test_bad_mapping_file_is_an_input_error(tmp_path):
    data = generate_mapping(devices=3, modules=2, layers=4)
    data["workload"]["batch"] = 10  # not a multiple of 3 stages
    with pytest.raises(InputError, match="multiple"):
        mapping_from_data(data, source=tmp_path / "x.toml")
    data = generate_mapping(devices=2, modules=2, layers=4)
    data["devices"][0]["chip"] = "h100-sxn"
    with pytest.raises(InputError, match="h100-sxm"):
        mapping_from_data(data)
    data = generate_mapping(devices=2, modules=2, layers=4, workload="deepseek-v3")
    with pytest.raises(InputError, match="identical decoder layers"):
        mapping_from_data(data)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codesign", *args], capture_output=True, text=True, timeout=300)


def test_cli_solve_evaluate_check(tmp_path):
    r = _cli("solve", "tiny-pf-mapping", "--json", "--save", "--cross-check", "--out-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["kind"] == "mapping" and rec["status"] == "optimal"
    assert rec["cross_check"]["agree"] is True and rec["cross_check"]["solvers"] == ["highs", "cpsat"]
    sol_file = tmp_path / "tiny-pf-mapping.json"
    assert sol_file.exists() and (tmp_path / "ledger.solu").exists()
    r = _cli("check-solution", str(sol_file))
    assert r.returncode == 0, r.stderr + r.stdout
    r = _cli("evaluate", "tiny-pf-mapping", "--design", str(sol_file), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tokens_per_s"] == pytest.approx(rec["objective"], rel=1e-12)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"layers_per_stage": [2, 2], "weights": ["local"] * 4, "kv": ["local", "locale", "local", "local"], "attach": [[], []]}))
    r = _cli("evaluate", "tiny-pf-mapping", "--design", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "local" in r.stderr


def test_named_mapping_instances_load_and_exceed_1e15():
    from codesign.kinds.mapping.spec import list_mapping_instances

    names = list_mapping_instances()
    assert "tiny-pf-mapping" in names
    big = [n for n in names if space_size(build_problem(load_mapping(n))) > 10**15]
    assert len(big) >= 2
    assert math.comb(125, 15) > 10**15  # 126 layers into 16 stages alone


def test_cli_generate_writes_a_loadable_instance(tmp_path):
    out = tmp_path / "gen.toml"
    r = _cli("generate", "mapping", "-o", str(out), "--set", "devices=3", "--set", "modules=2", "--set", "layers=6", "--set", "chips=h200-sxm,h100-sxm")
    assert r.returncode == 0, r.stderr
    inst = load_mapping(str(out))
    assert [g.chip for g in inst.spec.devices] == ["h200-sxm", "h100-sxm"]
    assert sum(g.count for g in inst.spec.devices) == 3 and inst.spec.workload.layers == 6
    r = _cli("generate", "mapping", "-o", str(out), "--set", "devics=3")
    assert r.returncode == 2 and "did you mean 'devices'" in r.stderr
    out2 = tmp_path / "placement.toml"
    r = _cli("generate", "placement", "-o", str(out2), "--set", "devices=4", "--set", "experts=8", "--set", "layers=4")
    assert r.returncode == 0, r.stderr
    r = _cli("show", str(out2), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "placement"


def _stored_solutions():
    from pathlib import Path

    return sorted((Path(__file__).resolve().parent.parent / "solutions" / "mapping").glob("*.json"))


@pytest.mark.parametrize("path", _stored_solutions(), ids=lambda p: p.stem)
def test_stored_mapping_solutions_reverify(path):
    """Every committed mapping/placement solution is reproduced by the current model (a model or
    calibration change makes them stale: re-solve with `codesign solve NAME --cross-check --save`)."""
    import importlib

    from codesign.jsonio import read_json
    from codesign.kinds.mapping.spec import KIND_COMMANDS

    data = read_json(path)
    report = importlib.import_module(KIND_COMMANDS[data["kind"]]).check_solution(data, path)
    assert report["ok"], report["message"]
    assert data["status"] == "optimal"
    assert (data.get("cross_check") or {}).get("agree") is True


def test_cli_certify_mapping_design(tmp_path):
    design = tmp_path / "mine.json"
    design.write_text(json.dumps({"layers_per_stage": [2, 2], "weights": ["local"] * 4, "kv": ["local"] * 4, "attach": [[], []]}))
    cert_file = tmp_path / "cert.json"
    r = _cli("certify", "tiny-pf-mapping", "--design", str(design), "--json", "-o", str(cert_file), "--solutions", str(tmp_path / "none"))
    assert r.returncode == 0, r.stderr
    cert = json.loads(r.stdout)
    assert cert_file.exists()
    p = build_problem(load_mapping("tiny-pf-mapping"))
    ev = evaluate_mapping(p, MappingDesign((2, 2), ("local",) * 4, ("local",) * 4, ((), ())))
    assert cert["feasible"] and cert["objective"] == pytest.approx(ev.objective, rel=1e-12)
    assert cert["bound_provenance"]["source"] == "solve"
    # tokens/s is maximised: the bound is above the design, the gap is their relative distance
    assert cert["bound"] >= cert["objective"]
    assert cert["gap"] == pytest.approx((cert["bound"] - cert["objective"]) / cert["objective"], rel=1e-12)
    assert "no feasible design beats this one" in cert["statement"]


def test_infeasible_mapping_is_explained():
    from codesign.kinds.mapping.solve import explain_infeasible

    # tpot: the least tpot is D x the least period, i.e. D x (m / best tokens/s)
    tight = mapping_from_data(generate_mapping(devices=2, modules=2, layers=3, tpot_s=1e-4, objective="energy_per_token_J"))
    loose = mapping_from_data(generate_mapping(devices=2, modules=2, layers=3))
    best = solve_mapping(loose, solver="highs")
    assert solve_mapping(tight, solver="highs").status == "infeasible"
    e = explain_infeasible(tight)
    (c,) = e["conflicts"]
    assert c["constraint"] == "budgets.tpot_s"
    assert c["least_feasible_value"] == pytest.approx(2 * 16 / best.objective, rel=1e-9)
    # capacity: 2 H100s cannot hold 405B's 126 layers with weights local only
    full = mapping_from_data(generate_mapping(devices=2, modules=0, weights=("local",), kv=("local",)))
    assert solve_mapping(full, solver="highs").status == "infeasible"
    (c,) = explain_infeasible(full)["conflicts"]
    assert c["constraint"] == "memory capacity" and "GiB" in c["message"]
