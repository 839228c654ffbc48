"""codesign.model.mapping: the pipeline-mapping model's numbers, derived by hand (layer costs,
the engine's decoding state and KV precision, a stage's time, shared ports and switch, violations, the space's size, the
paper's bandwidth assumption)."""

from __future__ import annotations

import pytest

from codesign import catalog
from codesign.errors import InputError
from codesign.kinds.mapping.brute import compositions
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.render import lints
from codesign.kinds.mapping.spec import mapping_from_data
from codesign.model.calibration import shipped
from codesign.model.mapping import MappingDesign, evaluate_mapping, space_size
from codesign.model.mapping_build import build_problem

GB = 1e9


def problem(**kw):
    return build_problem(mapping_from_data(generate_mapping(**kw)))


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


def engine_problem(engine: str | None, **kw):
    raw = generate_mapping(**kw)
    if engine is not None:
        raw["system"] = {"engine": engine}
    return build_problem(mapping_from_data(raw))


SMALL = dict(devices=2, modules=0, layers=4, batch_per_stage=32, context_tokens=8192, weights=("local",), kv=("local",))


def test_the_last_stage_holds_a_decoding_state_only_under_an_engine_that_keeps_one():
    """model.md eq. 4.14b in the mapping model: under trtllm-0.14 the last stage samples for all
    B = 64 sequences and keeps a decoding slot for each: 4 fp32 rows and 1 int32 row of Llama 3.1's
    128,256-entry vocabulary, 64 KiB of top-K scratch and 10 x 4 B x 8,192 tokens = 2,958,336 B
    per slot. No engine (the physics) keeps none: the last stage holds the 16-bit LM head
    (128,256 x 16,384 x 2 B) and the fp8 final norm (16,384 B) alone."""
    physics, trtllm = engine_problem(None, **SMALL), engine_problem("trtllm-0.14", **SMALL)
    per_slot = 4 * 128_256 * 4 + 128_256 * 4 + 65_536 + 40 * 8192
    assert per_slot == 2_958_336
    assert physics.last_store_B == 128_256 * 16_384 * 2 + 16_384 == 4_202_708_992
    assert trtllm.last_store_B - physics.last_store_B == 64 * per_slot == 189_333_504
    assert trtllm.first_store_B == physics.first_store_B
    assert trtllm.layer == physics.layer  # fp8 weights: an fp8 KV cache under both
    # the capacity freed: the same design's last stage holds 64 slots' state less
    d = MappingDesign((3, 1), ("local",) * 4, ("local",) * 4, ((), ()))
    a, b = evaluate_mapping(trtllm, d), evaluate_mapping(physics, d)
    assert a.local_used_B[1] - b.local_used_B[1] == 189_333_504
    assert a.local_used_B[0] == b.local_used_B[0] and a.period_s == b.period_s


def test_an_engine_sets_the_kv_cache_precision_the_workload_leaves_out():
    """vllm caches the KV in the model's 16-bit dtype (BF16, 2 B) for an fp8 checkpoint; the
    physics in the weights' fp8 (1 B): 64 sequences x 8,192 tokens x 2 x 8 KV heads x 128 per
    layer. vllm keeps no decoding state. A stated kv_precision wins over both."""
    physics, vllm = engine_problem(None, **SMALL), engine_problem("vllm", **SMALL)
    kv_elements = 64 * 8192 * 2 * 8 * 128
    assert physics.layer.kv_store_B == kv_elements
    assert vllm.layer.kv_store_B == 2 * kv_elements
    assert vllm.last_store_B == physics.last_store_B
    raw = generate_mapping(**SMALL)
    raw["system"] = {"engine": "vllm"}
    raw["workload"]["kv_precision"] = "fp8"
    assert build_problem(mapping_from_data(raw)).layer.kv_store_B == kv_elements


def test_an_engine_that_cannot_run_a_micro_batch_is_refused():
    """vllm runs at most 1,024 sequences per executor on an H100 (80 GiB, at least 70): a stage's
    micro-batch of 1,025 is refused; 1,024 is built."""
    engine_problem("vllm", devices=2, modules=0, layers=2, batch_per_stage=1024, weights=("local",), kv=("local",))
    with pytest.raises(InputError, match="max_batch_size = 1024 sequences per executor") as e:
        engine_problem("vllm", devices=2, modules=0, layers=2, batch_per_stage=1025, weights=("local",), kv=("local",))
    assert e.value.key == "workload.batch"


def test_an_unknown_engine_is_refused_as_the_grid_refuses_it():
    raw = generate_mapping(**SMALL)
    raw["system"] = {"engine": "trtllm-9"}
    with pytest.raises(InputError, match="unknown engine 'trtllm-9'") as e:
        mapping_from_data(raw, source="x.toml")
    assert (e.value.file, e.value.key) == ("x.toml", "system.engine")
    assert "trtllm-0.14" in e.value.expected


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
    data = generate_mapping(devices=2, modules=2, layers=2, assumed_device_bandwidth_GBps=26_800)
    inst = mapping_from_data(data)
    p = build_problem(inst)
    ev = evaluate_mapping(p, MappingDesign((1, 1), ("pool:0:hbm", "pool:1:hbm"), ("local", "local"), ((), ())))
    assert ev.feasible
    assert ev.port_load_s == [0.0, 0.0]  # no port model under the assumption
    assert max(ev.memory_s) >= p.layer.w_read_B / 26_800e9
    codes = [x.code for x in lints(inst)]
    assert "pool-bandwidth-exceeds-ports" in codes  # 26,800 > 1 port x 900 GB/s


def test_lit_ports_static_power_by_hand():
    """port_static_power_W x (device ports + module ports) joins the devices' static power: the same
    design costs that x T / m more energy per token, its period unchanged; without it nothing changes."""
    raw = generate_mapping(devices=2, modules=3, layers=4, ports=2, weights=("local", "pool"), kv=("local",))
    plain = build_problem(mapping_from_data(raw))
    raw["appliance"]["port_static_power_W"] = 5.04
    lit = build_problem(mapping_from_data(raw))
    assert plain.hardware_static_W == 0.0
    assert lit.hardware_static_W == pytest.approx(5.04 * (2 * 2 + 3 * 1), rel=1e-15)  # 1 port per module
    d = MappingDesign((2, 2), ("pool:0:ddr", "local", "pool:1:hbm", "local"), ("local",) * 4, ((0,), (1, 2)))
    a, b = evaluate_mapping(plain, d), evaluate_mapping(lit, d)
    assert a.feasible and b.feasible and a.period_s == b.period_s
    assert b.energy_per_token_J - a.energy_per_token_J == pytest.approx(5.04 * 7 * a.period_s / plain.micro_batch, rel=1e-9)
