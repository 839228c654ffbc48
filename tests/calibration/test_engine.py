"""codesign.calibration.engine: the benchmark engine's rules, with hand-derived batches (figures
in helpers.py).

    H100 72 GiB               80 x 2^30 - 8 x 2^30 = 77,309,411,328 B
    engine rule, R = 8 GiB    W + b (KV / f + s) <= u C - R: (72 GiB - W) / (KV / 0.9 + s) = 459.93
                              -> 459 sequences (468.48 without the decoding state)
    fixed concurrency         64 requests on 8 GPUs at TP 4 -> dp 2 -> 32 per replica

The engine's sequence slots: per slot (``decoder_state_per_slot_B``) 4 fp32 rows of the padded
vocabulary, 1 int32 row of the vocabulary, 64 KiB of top-K scratch (1,024 x 8 x 8 B) and 10 x 4 B
per max_seq_len token. Qwen2.5 0.5B (vocabulary 151,936) at max_seq_len 32,768: 2,430,976 +
607,744 + 65,536 + 1,310,720 = 4,414,976 B; 2,048 slots: 9,041,870,848 B = 8.42 GiB, the 2.66 +
5.76 GB that TensorRT-LLM's log prints for "runtime buffers" and "decoder" (issue #1188). Llama 3.1
70B (128,256) at 2048/2048: 2,052,096 + 513,024 + 65,536 + 163,840 = 2,794,496 B. A vocabulary of
32,000 over TP 3 is padded to 32,001. Llama 70B FP16 at TP 2 on two H100s, 2048/2048 (m0546),
reserve 2.75 GiB, f = 0.90: 2,048 slots hold 5,723,127,808 B; 0.9 x (85,899,345,920 -
2,952,790,016 - 5,723,127,808 - 70,553,706,496) / 671,088,640 = 8.9 -> 8 sequences, where without
the slots 16.6 -> 16. Its 1000/1000 sibling's engine has 256 slots: 256 x 2,710,656 = 693,927,936 B.
"""

from __future__ import annotations

import math

import pytest

from codesign.calibration.engine import (
    ENGINE_MAX_BATCH,
    Footprint,
    batch_from,
    engine_state_B,
    evaluate_row,
    fits,
    footprint,
    max_batch,
    memory_audit,
    row_instance,
    skip_reason,
)
from codesign.calibration.report import predict_row
from codesign.calibration.rows import read_rows
from codesign.model.calibration import load_calibration, shipped, shipped_path
from codesign.model.evaluate import stage_form
from codesign.model.hardware import hardware_table
from codesign.model.schedule import decoder_state_per_slot_B

from .helpers import (
    ENGINE,
    KV_SEQ_8B_FP8_2000,
    OVERVIEW,
    STATE_8B_2000,
    W_8B_FP8,
    GiB,
    csv_row,
    row,
    write_csv,
)

MEM = {"usable_memory_fraction": 1.0, "runtime_reserve_GiB": 2.75, "kv_cache_free_fraction": 0.9}


def overview_rows(tmp_path, lines: list[dict]):
    """Rows of the 0.14 overview's source (their engines come from the shipped table)."""
    path = write_csv(tmp_path / "m.csv", [
        csv_row(d["id"], num_gpus=d.get("tp", 1), value=1.0, source=OVERVIEW) | d for d in lines
    ], extra=("max_batch_size",))
    rows, bad = read_rows(path)
    assert not bad
    return rows


def test_footprint_of_llama8b_fp8_on_h100_is_hand_derived():
    fp = footprint(row())
    assert fp.weights_B == W_8B_FP8
    assert fp.kv_per_sequence_B == KV_SEQ_8B_FP8_2000
    assert fp.raw_capacity_B == 80 * GiB


def test_max_batch_llama8b_h100_tp1_engine_rule_is_459():
    """The row's engine is unknown, so each sequence brings its own decoding state (eq. 4.14b):
    W + b (KV / f + s) <= u C - R."""
    fp = footprint(row())
    assert STATE_8B_2000 == 2_710_656 and fp.state_per_sequence_B == STATE_8B_2000 and fp.engine_state_B == 0
    assert batch_from(row(), fp, ENGINE, None) == 459
    assert (72 * GiB - W_8B_FP8) / (KV_SEQ_8B_FP8_2000 / 0.9 + STATE_8B_2000) == pytest.approx(459.93, abs=0.01)
    # without the state: 0.9 (72 GiB - W) / KV = 468.48
    assert 0.9 * (72 * GiB - W_8B_FP8) / KV_SEQ_8B_FP8_2000 == pytest.approx(468.48, abs=0.01)


def test_max_batch_is_decided_by_the_models_memory_constraint():
    cal = shipped().for_chip("h100-sxm")
    usable = 80 * GiB * cal.usable_memory_fraction - cal.runtime_reserve_GiB * GiB
    expected = math.floor((usable - W_8B_FP8) / (KV_SEQ_8B_FP8_2000 / shipped().kv_cache_free_fraction + STATE_8B_2000))
    choice = max_batch(row(), cap=None)
    assert choice.batch == expected
    assert memory_audit(evaluate_row(row(), choice.batch)).ok
    assert not memory_audit(evaluate_row(row(), choice.batch + 1)).ok


def test_the_memory_constraint_is_the_engine_rule():
    """memory-capacity-local: W + S + KV / f <= u C - R (eq. 4.14a, 4.14b, 3.21), which is
    KV <= f (u C - R - S - W), S the decoding state of the batch's own sequence slots."""
    ev = evaluate_row(row(), 100)
    m = ev.workload_metrics["main"]
    cal = shipped().for_chip("h100-sxm")
    audit = memory_audit(ev)
    assert m["weights_per_device_B"] == W_8B_FP8 and m["kv_per_device_B"] == 100 * KV_SEQ_8B_FP8_2000
    assert m["decoder_state_per_device_B"] == 100 * STATE_8B_2000
    assert audit.value == pytest.approx(W_8B_FP8 + 100 * STATE_8B_2000
                                        + 100 * KV_SEQ_8B_FP8_2000 / shipped().kv_cache_free_fraction)
    assert audit.limit == pytest.approx(80 * GiB * cal.usable_memory_fraction - cal.runtime_reserve_GiB * GiB)


def test_engine_cap_limits_the_batch():
    short = row(gpu="h200-sxm", isl=128, osl=128)  # 8B FP8 with 256-token sequences: thousands fit
    assert max_batch(short, cap=None).batch > ENGINE_MAX_BATCH
    capped = max_batch(short)
    assert (capped.batch, capped.bound) == (ENGINE_MAX_BATCH, "engine")


def test_fixed_concurrency_batch_is_concurrency_over_dp():
    r = row(model="llama-3.1-70b", num_gpus=8, tp=4, concurrency=64)
    assert r.dp == 2
    assert batch_from(r, footprint(r), None, None) == 32


def test_batch_is_capped_at_the_runs_requests():
    """Mixtral FP8 on 8 H200 at 128/4096 holds thousands of sequences; the run has 1500."""
    r = row(model="mixtral-8x7b", gpu="h200-sxm", num_gpus=8, tp=8, isl=128, osl=4096, num_requests=1500)
    choice = max_batch(r)
    assert (choice.batch, choice.bound) == (1500, "requests")
    fp = footprint(r)
    assert batch_from(r, fp, None, ENGINE_MAX_BATCH) == 1500
    assert batch_from(r, fp, None, ENGINE_MAX_BATCH, requests=False) > 1500


def test_a_model_too_large_for_the_memory_is_an_infeasible_prediction_not_a_skip():
    r = row(model="llama-3.1-70b", gpu="l40s", precision="fp16")  # 141 GB of weights on 48 GB
    assert skip_reason(r) is None
    rec = predict_row(r)
    assert rec["batch"] == 0 and rec["predicted"] == 0.0 and rec["error_pct"] == -100.0
    assert "does not fit" in rec["note"]


def test_pcie_cards_tp_traffic_crosses_pcie_and_the_l40s_goes_over_its_nic():
    """The measured A100 PCIe system has no NVLink bridge: a TP2 all-reduce crosses PCIe Gen4 x16
    (31.5 GB/s, 1 us per step) on the scale-up side, and TP8 stays inside the 8-card server; the
    L40S's catalog domain of 1 sends TP8 over the scale-out NIC."""
    r = row(model="mixtral-8x7b", gpu="a100-pcie-80gb", precision="fp16", num_gpus=2, tp=2, isl=128, osl=128)
    ne = shipped().for_chip("a100-pcie-80gb").network_efficiency
    hw = hardware_table(row_instance(r, 8))
    assert hw.features["s_per_B_scale_up"][0] == pytest.approx(1 / (31.5e9 * ne))
    assert hw.features["s_per_step_scale_up"][0] == pytest.approx(1e-6)
    m = evaluate_row(r.__class__(**{**r.__dict__, "num_gpus": 8, "tp": 8}), 8).workload_metrics["main"]
    assert m["decode_step.scale_out_bw_s"] == 0.0 and m["decode_step.scale_up_bw_s"] > 0.0
    l40s = row(model="llama-3.1-70b", gpu="l40s", num_gpus=8, tp=8, isl=128, osl=128)
    m = evaluate_row(l40s, 8).workload_metrics["main"]
    assert m["decode_step.scale_out_bw_s"] > 0.0 and m["decode_step.scale_up_bw_s"] == 0.0


def test_the_rows_token_budget_reaches_the_model_through_its_instance():
    r = row(model="llama-3.1-70b", num_gpus=2, tp=2, precision="fp16", isl=2048, osl=128, engine_max_tokens=1024)
    assert row_instance(r, 256).workloads[0].max_tokens_per_iteration == 1024
    assert row_instance(row(), 256).workloads[0].max_tokens_per_iteration is None


def test_unsupported_rows_are_skipped_with_their_reason():
    assert "unsupported metric" in skip_reason(row(metric="power_W"))
    assert "not a positive number" in skip_reason(row(value=0.0))
    assert skip_reason(row(model="llama-9-1t")).startswith("unknown model 'llama-9-1t'")
    assert "does not divide num_gpus" in skip_reason(row(num_gpus=3, tp=2))
    assert "attention data parallelism over part" in skip_reason(row(num_gpus=4, tp=4, attention_dp=2))


# --- the engine's sequence slots ------------------------------------------------------------------
def test_decoding_state_per_slot_is_hand_derived():
    assert decoder_state_per_slot_B(151_936, 1, 32_768) == 4_414_976
    # the published log's "runtime buffers" + "decoder" (its GB are GiB), 2,048 slots assumed
    assert 2048 * decoder_state_per_slot_B(151_936, 1, 32_768) / GiB == pytest.approx(2.66 + 5.76, abs=0.005)
    assert decoder_state_per_slot_B(128_256, 2, 4096) == 2_794_496
    assert decoder_state_per_slot_B(32_000, 3, 0) == 4 * 32_001 * 4 + 32_000 * 4 + 65_536


def test_the_rows_engine_caps_the_batch_and_its_slots_hold_state(tmp_path):
    rows = overview_rows(tmp_path, [
        dict(id="b", model="llama-3.1-70b", tp=2, precision="fp16", isl=1000, osl=1000),
        dict(id="d", model="llama-3.1-70b", gpu="h200-sxm", tp=8, precision="fp8", isl=128, osl=128),
        dict(id="g", model="llama-3.1-8b", tp=1, precision="fp8", isl=128, osl=128),
        dict(id="h", model="llama-3.1-8b", tp=1, precision="fp8", isl=128, osl=128, source="mine"),
    ])
    by = {r.id: r for r in rows}
    # the row's own engine replaces the heuristic's 4096; without an engine the 4096 stays
    assert by["d"].engine_cap(ENGINE_MAX_BATCH) == 8192 and by["g"].engine_cap(ENGINE_MAX_BATCH) == 2048
    assert by["h"].engine_cap(ENGINE_MAX_BATCH) == 4096 and by["d"].engine_cap(None) is None
    assert engine_state_B(by["h"]) == 0.0
    assert engine_state_B(by["b"]) == 256 * 2_710_656 == 693_927_936


def test_the_slots_state_comes_out_of_the_kv_cache_by_hand(tmp_path):
    (r,) = overview_rows(tmp_path, [dict(id="m0546", model="llama-3.1-70b", tp=2, precision="fp16",
                                         isl=2048, osl=2048)])
    fp = footprint(r)
    assert (fp.weights_B, fp.kv_per_sequence_B, fp.raw_capacity_B) == (70_553_706_496, 671_088_640, 80 * GiB)
    assert fp.engine_state_B == 2048 * 2_794_496 == 5_723_127_808
    assert batch_from(r, fp, MEM, None) == 8  # 0.9 (80 - 2.75 GiB - 5.723 - 70.554 GB) / 0.671 GB = 8.95
    bare = Footprint(fp.weights_B, fp.kv_per_sequence_B, fp.raw_capacity_B, fp.usable_B, fp.kv_free_fraction)
    assert batch_from(r, bare, MEM, None) == 16
    # the model's audit with the state taken off its limit agrees with the affine rule
    choice = max_batch(r)
    assert choice.batch == batch_from(r, fp, None, None, requests=False)
    assert fits(evaluate_row(r, choice.batch), fp) and not fits(evaluate_row(r, choice.batch + 1), fp)


def test_a_known_engine_holds_the_batchs_own_slots_among_its_own(tmp_path):
    """Llama 8B FP8 on one H100 at 1000/1000, the overview's engine of 2,048 slots: 5,551,423,488 B
    of decoding state per GPU. The batch's own 469 sequences are among those slots, so the state is
    charged once (max(S, b s) = S, eq. 4.14b): 0.9 (80 - 2.75 GiB - 5.551 - 9.081 GB) / 0.131 GB =
    469.08. Charging both (S + b s) would give (80 - 2.75 GiB - 5.551 - 9.081 GB) / (0.146 + 0.0027
    GB) = 460.5."""
    (r,) = overview_rows(tmp_path, [dict(id="k", model="llama-3.1-8b", tp=1, precision="fp8", isl=1000, osl=1000)])
    fp = footprint(r)
    assert fp.engine_state_B == 2048 * 2_710_656 == 5_551_423_488 and fp.state_per_sequence_B == 2_710_656
    assert (fp.weights_B, fp.kv_per_sequence_B) == (9_080_934_400, 2000 * 65_536)
    assert batch_from(r, fp, MEM, None, requests=False) == 469
    choice = max_batch(r, cap=None)
    assert choice.batch == batch_from(r, fp, None, None, requests=False)
    assert fits(evaluate_row(r, choice.batch), fp) and not fits(evaluate_row(r, choice.batch + 1), fp)


def test_a_layout_the_state_leaves_no_room_says_so(tmp_path):
    (r,) = overview_rows(tmp_path, [dict(id="x", model="llama-3.1-70b", tp=1, precision="fp8", isl=1000, osl=1000,
                                         max_batch_size=8192)])
    choice = max_batch(r)
    assert choice.batch == 0
    assert "decoding state for 8192 slots" in choice.reason


def test_attention_dp_pp_and_fixed_concurrency_rows_by_hand(tmp_path):
    """Under attention DP every rank runs its own executor: the replica's cap is TP x max_batch_size,
    but a device holds only its own rank's slots. With PP 2 the runtime keeps max_batch_size slots
    per micro-batch: a cap of 2 x 128 and 256 slots' state. A fixed-concurrency row is capped by its
    engine too (200 requested, 96 slots)."""
    adp, pp, conc = overview_rows(tmp_path, [
        dict(id="adp", model="llama-3.1-70b", gpu="h200-sxm", tp=8, attention_dp=8, precision="fp8", isl=1000,
             osl=1000, max_batch_size=256),
        dict(id="pp", model="llama-3.1-70b", gpu="h200-sxm", num_gpus=4, tp=2, pp=2, precision="fp8", isl=1000,
             osl=1000, max_batch_size=128),
        dict(id="conc", model="llama-3.1-8b", tp=1, precision="fp8", isl=1000, osl=1000, concurrency=200,
             max_batch_size=96),
    ])
    per_slot = 2_630_656 + 40 * 2000  # Llama 3.1's vocabulary, unpadded at TP 2 and 8
    assert decoder_state_per_slot_B(128_256, 8, 2000) == decoder_state_per_slot_B(128_256, 2, 2000) == per_slot
    assert adp.engine_cap(ENGINE_MAX_BATCH) == 8 * 256 and engine_state_B(adp) == 256 * per_slot
    assert pp.engine_cap(ENGINE_MAX_BATCH) == 256 and engine_state_B(pp) == 256 * per_slot
    assert batch_from(conc, footprint(conc), None, ENGINE_MAX_BATCH) == 96


# --- the model a row is evaluated with ------------------------------------------------------------
def test_the_host_time_is_paid_per_sequence_of_a_step_under_a_calibration_that_sets_it(tmp_path):
    """A calibration file with host_us_per_sequence = 10 for the H100: Llama 8B TP1 at 64
    sequences pays 64 x 10 us = 0.64 ms more per decode step; the shipped one pays none."""
    text = shipped_path().read_text().replace("[chips.h100-sxm]\n", "[chips.h100-sxm]\nhost_us_per_sequence = 10.0\n", 1)
    mine = tmp_path / "host.toml"
    mine.write_text(text)
    r = row(concurrency=64)
    before = evaluate_row(r, 64).workload_metrics["main"]
    after = evaluate_row(r, 64, calibration=load_calibration(mine)).workload_metrics["main"]
    assert before["decode_step.host_s"] == 0.0
    assert after["decode_step.host_s"] == pytest.approx(64 * 10e-6, rel=1e-12)
    assert after["decode_step_s"] - before["decode_step_s"] == pytest.approx(64 * 10e-6, rel=1e-9)


def test_the_step_form_splits_every_stream_by_the_overlap():
    """evaluate's stage step is o max(c, m) + (1 - o)(c + m) + links + overhead (eq. 5.3), each
    stream being two products with the hardware columns o s and (1 - o) s (eq. 3.26)."""
    r = row(model="llama-3.1-70b", num_gpus=4, tp=4, isl=2048, osl=128)
    hw = hardware_table(row_instance(r, 64))
    for col in ("s_per_flop@fp8", "s_per_B_local"):
        base, _, prec = col.partition("@")
        tail = f"@{prec}" if prec else ""
        o = hw.features["stream_overlap"][0]
        assert hw.features[f"{base}_ovl{tail}"][0] == pytest.approx(o * hw.features[col][0])
        assert hw.features[f"{base}_seq{tail}"][0] == pytest.approx((1 - o) * hw.features[col][0])
    # no pooled tier: its time per byte is infinite on both columns (0 on the overlapped one if o = 0)
    assert hw.features["s_per_B_pool_seq"][0] == math.inf
    assert hw.features["s_per_B_pool_ovl"][0] == (math.inf if o > 0 else 0.0)
    form = stage_form("prefill", "fp8", "one")
    assert [p.name for g in form.maxes for p in g] == [
        "prefill.compute_overlapped", "prefill.memory_local_overlapped", "prefill.memory_pool_overlapped"]
    m = evaluate_row(r, 64).workload_metrics["main"]
    # the compute: the FLOPs other than the attention's, plus the attention, the larger of its FLOPs
    # and its exponentials (eq. 2.15m; the H100 has an exponential rate, so the step prices them)
    attention = max(m["prefill_step.attention_s"] + m["prefill_step.attention_overlapped_s"],
                    m["prefill_step.exponentials_s"] + m["prefill_step.exponentials_overlapped_s"])
    c = m["prefill_step.compute_s"] + m["prefill_step.compute_overlapped_s"] + attention
    mem = m["prefill_step.memory_local_s"] + m["prefill_step.memory_local_overlapped_s"]
    rest = sum(m[f"prefill_step.{k}_s"] for k in ("scale_up_bw", "scale_up_bw_in_switch", "scale_up_latency", "scale_out_bw",
                                                   "scale_out_latency", "overhead", "collective_latency"))
    o = shipped().for_chip("h100-sxm").stream_overlap
    assert m["prefill_step_s"] == pytest.approx(o * max(c, mem) + (1 - o) * (c + mem) + rest, rel=1e-12)


def test_every_ring_step_of_a_tp_collective_pays_the_step_latency():
    """Two all-reduces per layer, each 2(n-1) ring steps, and one logits all-gather of n-1 steps at
    TP > 1 (eq. 4.10a), every step charged the collective step latency (eq. 3.13d). Llama 70B
    (80 layers): TP4 has 160 x 6 + 3 = 963 steps per stage step, TP8 160 x 14 + 7 = 2,247, TP1
    none."""
    lat = shipped().for_chip("h100-sxm").collective_step_latency_us * 1e-6
    assert lat > 0
    m4 = evaluate_row(row(model="llama-3.1-70b", num_gpus=4, tp=4), 64).workload_metrics["main"]
    m8 = evaluate_row(row(model="llama-3.1-70b", num_gpus=8, tp=8), 64).workload_metrics["main"]
    m1 = evaluate_row(row(model="llama-3.1-70b", num_gpus=1, tp=1), 4).workload_metrics["main"]
    for phase in ("prefill", "decode"):
        assert m4[f"{phase}_step.collective_steps"] == 963.0
        assert m8[f"{phase}_step.collective_steps"] == 2247.0
        assert m4[f"{phase}_step.collective_latency_s"] == pytest.approx(963 * lat, rel=1e-12)
        assert m1[f"{phase}_step.collective_latency_s"] == 0.0
    # TP16 over two NVLink domains of 8 (eq. 3.17): an all-reduce is 2 x 7 steps inside and 2 x 1
    # across, the logits all-gather 7 + 1: 160 x 16 + 8 = 2,568, of which 160 x 2 + 1 = 321 on
    # scale-out (the link latency counts the same steps: 2,247 x 0.5 us and 321 x 1 us)
    m16 = evaluate_row(row(model="llama-3.1-70b", num_gpus=16, tp=16), 64).workload_metrics["main"]
    assert m16["decode_step.collective_steps"] == 2568.0
    assert m16["decode_step.scale_up_latency_s"] == pytest.approx(2247 * 500e-9, rel=1e-12)
    assert m16["decode_step.scale_out_latency_s"] == pytest.approx(321 * 1e-6, rel=1e-12)


def test_tp_gathers_the_16_bit_logits_of_every_new_token():
    """The vocabulary-parallel LM head's logits are all-gathered in 16 bit (eq. 4.9a). Llama 70B
    (hidden 8192, vocab 128256, 80 layers), TP8 on one board, decode batch 100: all-reduce message
    100 x 8192 x 2 = 1,638,400 B, 160 of them at 2 x 7/8 each = 458,752,000 B; logits 100 x 128256
    x 2 = 25,651,200 B gathered at 7/8 = 22,444,800 B. Steps: 160 x 14 + 7 = 2247. Prefill (ISL
    1000) all-reduces 1000x the decode message but gathers the logits of the last prompt token only:
    the same 22,444,800 B. That is the ring of the A100 SXM's NVLink 3 (300 GB/s); the H100's
    NVSwitch (450 GB/s) reduces the all-reduces of 8 >= 5 ranks in the network (eq. 3.17a), at
    0.82 / 0.61 x 1,638,400 B = 2,202,439 B each: 352,390,295 B, and the logits all-gather stays a
    ring."""
    logits = 7 / 8 * 100 * 128256 * 2
    bytes_up = {"decode": 160 * 2 * 7 / 8 * 100 * 8192 * 2 + logits,
                "prefill": 160 * 2 * 7 / 8 * 100 * 1000 * 8192 * 2 + logits}
    assert bytes_up["decode"] == 458_752_000 + 22_444_800
    in_switch = {"decode": 160 * 0.82 / 0.61 * 100 * 8192 * 2 + logits,
                 "prefill": 160 * 0.82 / 0.61 * 100 * 1000 * 8192 * 2 + logits}
    assert in_switch["decode"] == pytest.approx(352_390_295.1 + 22_444_800, abs=0.1)
    for gpu, link_Bps, ring, switch in (("a100-sxm-80gb", 300e9, bytes_up, None), ("h100-sxm", 450e9, None, in_switch)):
        cal = shipped().for_chip(gpu)
        r = row(model="llama-3.1-70b", gpu=gpu, num_gpus=8, tp=8, precision="fp16")
        m = evaluate_row(r, 100).workload_metrics["main"]
        for phase in ("prefill", "decode"):
            for key, expected in (("scale_up_bw", ring), ("scale_up_bw_in_switch", switch)):
                want = 0.0 if expected is None else expected[phase] / (link_Bps * cal.network_efficiency)
                assert m[f"{phase}_step.{key}_s"] == pytest.approx(want, rel=1e-9)
            assert m[f"{phase}_step.scale_up_latency_s"] == pytest.approx(2247 * 0.5e-6, rel=1e-9)
            assert m[f"{phase}_step.scale_out_bw_s"] == 0.0
    m1 = evaluate_row(row(model="llama-3.1-70b", num_gpus=1, tp=1), 4).workload_metrics["main"]
    assert m1["decode_step.scale_up_bw_s"] == 0.0 and m1["decode_step.scale_up_latency_s"] == 0.0
    assert m1["decode_step.scale_up_bw_in_switch_s"] == 0.0


@pytest.mark.parametrize("rid", ["a\nb", "run 1/h100", "../x", "ü" * 200])
def test_a_row_id_of_any_characters_is_evaluated(tmp_path, rid):
    # the row's instance is named after its id, and an instance name is a file name: a newline in
    # an id was a pydantic traceback once instance names were checked (tools/fuzz_cli.py)
    (r,) = read_rows(write_csv(tmp_path / "m.csv", [csv_row(rid)]))[0]
    assert r.id == rid and row_instance(r, 8).name.startswith("validate")
    assert evaluate_row(r, 8).feasible
