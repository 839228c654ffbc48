"""Validation against measurements: the prediction path on a handful of rows, with hand-derived
expectations.

Hand-derived figures used below:

    Llama 3.1 8B parameters   32 x (attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040
                                    + MLP 3 x 4096 x 14,336 = 176,160,768 + norms 2 x 4096)
                              + embedding + LM head 2 x 128,256 x 4096 + final norm 4096
                              = 6,979,584,000 + 1,050,673,152 + 4096 = 8,030,261,248
    FP8 weights               body + final norm at 1 B, embedding + LM head at 2 B (16 bit):
                              6,979,588,096 + 2 x 1,050,673,152 = 9,080,934,400 B
    FP8 KV per token          32 layers x 2 (K, V) x 8 KV heads x 128 x 1 B = 65,536 B
                              (FP16: 131,072 B; an FP4 checkpoint's cache is FP8 under trtllm-bench)
    one 1000/1000 sequence    2000 x 65,536 = 131,072,000 B
    H100 72 GiB               80 x 2^30 - 8 x 2^30 = 77,309,411,328 B (= 80 GiB x 0.90)
    engine rule, R = 8 GiB    KV <= 0.9 x (77,309,411,328 - 9,080,934,400) = 61,405,629,235.2 B
                              -> floor(468.48) = 468 sequences
    old rule, u = 0.90        W + KV <= 77,309,411,328 -> floor(520.54) = 520 (528 with the
                              embedding and LM head at 1 B: 1,050,673,152 B = 8.0 sequences)
    LM-head read per decode   128,256 x 4096 x 2 B = 1,050,673,152 B (+ 1 embedding row x 4096 x 2 B)
    fixed concurrency         64 requests on 8 GPUs at TP 4 -> dp 2 -> 32 per replica
    toy MAPE                  errors +10 % and -20 % -> (10 + 20) / 2 = 15 %
    tokens/s from steps       batch 4, dp 2, osl 3, t_prefill 1 s, t_decode 0.5 s:
                              4 x 2 x 3 / (1 + 2 x 0.5) = 12 /s; e2e = 1 + 2 x 0.5 = 2 s
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from codesign import validate as V
from codesign.model.hardware import calibration_for, shipped_calibration_path

HEADER = ["id", "model", "gpu", "num_gpus", "tp", "pp", "ep", "attention_dp", "precision", "isl", "osl",
          "concurrency", "metric", "value", "unit", "source"]

GiB = 2**30
W_8B_FP8 = 9_080_934_400  # embedding and LM head in 16 bit
EMBED_HEAD_8B = 1_050_673_152
KV_SEQ_8B_FP8_2000 = 2000 * 65_536
# the runtime's decoding state of one sequence slot (eq. 4.14b): 4 fp32 rows and 1 int32 row of the
# 128,256-entry vocabulary, 64 KiB of top-K scratch, 10 x 4 B x 2,000 tokens
STATE_8B_2000 = 4 * 128_256 * 4 + 128_256 * 4 + 65_536 + 40 * 2000
ENGINE = {"usable_memory_fraction": 1.0, "runtime_reserve_GiB": 8.0, "kv_cache_free_fraction": 0.9}
TOTAL_FRACTION = {"usable_memory_fraction": 0.9, "runtime_reserve_GiB": 0.0, "kv_cache_free_fraction": 1.0}


def row(**kw) -> V.Row:
    base = dict(id="r1", model="llama-3.1-8b", gpu="h100-sxm", num_gpus=1, tp=1, pp=1, ep=1, attention_dp=1,
                precision="fp8", isl=1000, osl=1000, concurrency=None, metric="output_tokens_per_s", value=14108.0)
    base.update(kw)
    return V.Row(**base)


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in HEADER})
    return path


def csv_row(rid: str, **kw) -> dict:
    d = dict(id=rid, model="llama-3.1-8b", gpu="h100-sxm", num_gpus=1, tp=1, pp=1, ep=1, attention_dp=1,
             precision="fp8", isl=1000, osl=1000, concurrency="", metric="output_tokens_per_s", value=14108.0,
             unit="1/s", source="test")
    d.update(kw)
    return d


# --- batch ------------------------------------------------------------------------------------
def test_footprint_of_llama8b_fp8_on_h100_is_hand_derived():
    fp = V.footprint(row())
    assert fp.weights_B == W_8B_FP8
    assert fp.kv_per_sequence_B == KV_SEQ_8B_FP8_2000
    assert fp.raw_capacity_B == 80 * GiB


def test_max_batch_llama8b_h100_tp1_engine_rule_is_459_and_old_rule_509():
    """The row's engine is unknown, so each sequence brings its own decoding state (eq. 4.14b):
    W + b (KV / f + s) <= u C - R."""
    fp = V.footprint(row())
    assert STATE_8B_2000 == 2_710_656 and fp.state_per_sequence_B == STATE_8B_2000 and fp.engine_state_B == 0
    assert V.batch_from(row(), fp, ENGINE, None) == 459
    assert (72 * GiB - W_8B_FP8) / (KV_SEQ_8B_FP8_2000 / 0.9 + STATE_8B_2000) == pytest.approx(459.93, abs=0.01)
    # without the state: 0.9 (72 GiB - W) / KV = 468.48
    assert 0.9 * (72 * GiB - W_8B_FP8) / KV_SEQ_8B_FP8_2000 == pytest.approx(468.48, abs=0.01)
    assert V.batch_from(row(), fp, TOTAL_FRACTION, None) == 509
    assert (72 * GiB - W_8B_FP8) / (KV_SEQ_8B_FP8_2000 + STATE_8B_2000) == pytest.approx(509.99, abs=0.01)
    # the old model (embedding and LM head at 1 B) admitted 8 sequences more
    assert (72 * GiB - W_8B_FP8 + EMBED_HEAD_8B) / (KV_SEQ_8B_FP8_2000 + STATE_8B_2000) == pytest.approx(517.85, abs=0.01)
    old = V.footprint(row(), V.Variant(embeddings_at_weight_precision=True))
    assert old.weights_B == W_8B_FP8 - EMBED_HEAD_8B
    assert V.batch_from(row(), old, TOTAL_FRACTION, None) == 517
    assert V.footprint(row()).weights_B == W_8B_FP8  # the switch is undone on exit


def test_max_batch_is_decided_by_the_models_memory_constraint():
    from codesign.model.hardware import kv_cache_free_fraction

    cal = calibration_for("h100-sxm")
    usable = 80 * GiB * cal.usable_memory_fraction - cal.runtime_reserve_GiB * GiB
    expected = math.floor((usable - W_8B_FP8) / (KV_SEQ_8B_FP8_2000 / kv_cache_free_fraction() + STATE_8B_2000))
    choice = V.max_batch(row(), cap=None)
    assert choice.batch == expected
    assert V._memory_audit(V.evaluate_row(row(), choice.batch)).ok
    assert not V._memory_audit(V.evaluate_row(row(), choice.batch + 1)).ok


def test_engine_cap_limits_the_batch():
    short = row(gpu="h200-sxm", isl=128, osl=128)  # 8B FP8 with 256-token sequences: thousands fit
    assert V.max_batch(short, cap=None).batch > V.ENGINE_MAX_BATCH
    capped = V.max_batch(short)
    assert (capped.batch, capped.bound) == (V.ENGINE_MAX_BATCH, "engine")


def test_fixed_concurrency_batch_is_concurrency_over_dp():
    r = row(model="llama-3.1-70b", num_gpus=8, tp=4, concurrency=64)
    assert r.dp == 2
    assert V.batch_from(r, V.footprint(r), None, None) == 32


def test_a_model_too_large_for_the_memory_is_an_infeasible_prediction_not_a_skip():
    r = row(model="llama-3.1-70b", gpu="l40s", precision="fp16")  # 141 GB of weights on 48 GB
    assert V.skip_reason(r) is None
    rec = V.predict_row(r)
    assert rec["batch"] == 0 and rec["predicted"] == 0.0 and rec["error_pct"] == -100.0
    assert "does not fit" in rec["note"]


# --- the prediction is the model's --------------------------------------------------------------
def test_recompose_at_the_file_calibration_reproduces_evaluate():
    for r in (row(), row(model="mixtral-8x7b", num_gpus=4, tp=4, isl=2048, osl=128),
              row(model="llama-3.1-70b", gpu="a100-sxm-80gb", precision="fp16", num_gpus=8, tp=8)):
        b = V.max_batch(r).batch
        terms = V.row_terms(r, b)
        cal = calibration_for(r.gpu).model_dump()
        assert V.recompose(terms, cal) == pytest.approx(terms.evaluated["tokens_per_s"], rel=1e-9)
        # and the record's prediction is evaluate's tokens_per_s
        assert V.predict_row(r)["predicted"] == pytest.approx(terms.evaluated["tokens_per_s"], rel=1e-12)


def test_metric_from_steps_by_hand():
    args = dict(batch=4, dp=2, pp=1, osl=3, devices=8)
    assert V.metric_from_steps("output_tokens_per_s", 1.0, 0.5, **args) == pytest.approx(12.0)
    assert V.metric_from_steps("output_tokens_per_s_per_gpu", 1.0, 0.5, **args) == pytest.approx(1.5)
    assert V.metric_from_steps("ttft_s", 1.0, 0.5, **args) == pytest.approx(1.0)
    assert V.metric_from_steps("itl_s", 1.0, 0.5, **args) == pytest.approx(0.5)
    assert V.metric_from_steps("e2e_latency_s", 1.0, 0.5, **args) == pytest.approx(2.0)


def test_stream_overlap_interpolates_between_the_max_and_the_sum():
    t = {"compute": 1.0, "memory_local": 2.0, "memory_pool": 0.0, "net_bw": 0.0, "net_latency": 0.0, "layers": 0.0,
         "collective_steps": 0.0}
    cal = {"compute_efficiency": 0.5, "memory_efficiency": 1.0, "network_efficiency": 1.0, "layer_overhead_us": 0.0,
           "collective_step_latency_us": 0.0}
    assert V.step_time(t, cal | {"stream_overlap": 1.0}) == pytest.approx(2.0)  # max(2, 2)
    assert V.step_time(t, cal | {"stream_overlap": 0.0}) == pytest.approx(4.0)  # 2 + 2
    assert V.step_time(t, cal | {"stream_overlap": 0.5}) == pytest.approx(3.0)



def test_the_stream_overlap_is_held_at_0_unless_a_variant_fits_or_sets_it():
    """Fix 17 (VALIDATION.md §5.17): every variant holds o = 0 (a field it sets itself wins) unless
    it asks to fit it. On a stand-in objective whose minimum is at o = 0.3 and compute efficiency
    0.6, the model's fit leaves o at exactly 0 and finds the efficiency; asked (``fit_overlap``),
    it finds both."""
    assert V.MODEL.fixed_values == {"stream_overlap": 0.0}
    assert V.Variant(fixed=(("network_efficiency", 0.5),)).fixed_values == {"stream_overlap": 0.0,
                                                                           "network_efficiency": 0.5}
    assert V.Variant(fixed=(("stream_overlap", 1.0),)).fixed_values == {"stream_overlap": 1.0}
    assert V.Variant(fit_overlap=True).fixed_values == {}

    class Stand:  # MAPE-like: 100 x the distance to (o, ce) = (0.3, 0.6), the other fields free and flat
        rows: tuple = ()

        def mape(self, cal, how):
            return 100 * (abs(cal["stream_overlap"] - 0.3) + abs(cal["compute_efficiency"] - 0.6))

    base = calibration_for("h100-sxm").model_dump()
    held, _ = V.fit_stack(Stand(), {**base, **V.MODEL.fixed_values}, V.MODEL)
    assert held["stream_overlap"] == 0.0
    assert held["compute_efficiency"] == pytest.approx(0.6, abs=1e-3)
    how = V.Variant(fit_overlap=True)
    fitted, _ = V.fit_stack(Stand(), {**base, **how.fixed_values}, how)
    assert fitted["stream_overlap"] == pytest.approx(0.3, abs=1e-3)


def test_the_shipped_calibration_holds_the_overlap_at_0_for_every_measured_family():
    for chip in ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "a100-pcie-80gb", "l40s", "b200"):
        assert calibration_for(chip).stream_overlap == 0.0, chip

def test_the_host_time_is_paid_per_sequence_of_a_step(tmp_path, monkeypatch):
    """eq. 5.3's host term: 100 sequences x 10 us = 1 ms on top of the rest of the step, in the
    re-composition and in evaluate itself (a calibration file with host_us_per_sequence = 10 for
    the H100: Llama 8B TP1 at 64 sequences pays 64 x 10 us = 0.64 ms per decode step)."""
    from codesign.model import hardware

    t = {"compute": 1.0, "memory_local": 2.0, "memory_pool": 0.0, "net_bw": 0.0, "net_latency": 0.0, "layers": 0.0,
         "collective_steps": 0.0, "sequences": 100.0}
    cal = {"compute_efficiency": 0.5, "memory_efficiency": 1.0, "network_efficiency": 1.0, "layer_overhead_us": 0.0,
           "collective_step_latency_us": 0.0, "stream_overlap": 1.0}
    assert V.step_time(t, cal | {"host_us_per_sequence": 10.0}) == pytest.approx(2.0 + 100 * 10e-6)
    assert V.step_time(t, cal) == pytest.approx(2.0)  # absent: 0
    text = shipped_calibration_path().read_text().replace("[chips.h100-sxm]\n", "[chips.h100-sxm]\nhost_us_per_sequence = 10.0\n", 1)
    mine = tmp_path / "host.toml"
    mine.write_text(text)
    r = row(concurrency=64)
    before = V.evaluate_row(r, 64).workload_metrics["main"]
    monkeypatch.setenv(hardware.CALIBRATION_ENV, str(mine))
    try:
        after = V.evaluate_row(r, 64).workload_metrics["main"]
    finally:
        monkeypatch.delenv(hardware.CALIBRATION_ENV)
        hardware.forget_calibration()
    assert before["decode_step.host_s"] == 0.0
    assert after["decode_step.host_s"] == pytest.approx(64 * 10e-6, rel=1e-12)
    assert after["decode_step_s"] - before["decode_step_s"] == pytest.approx(64 * 10e-6, rel=1e-9)


def test_the_step_form_splits_every_stream_by_the_overlap():
    """evaluate's stage step is o max(c, m) + (1 - o)(c + m) + links + overhead (eq. 5.3), each
    stream being two products with the hardware columns o s and (1 - o) s (eq. 3.26)."""
    from codesign.model.evaluate import stage_form
    from codesign.model.hardware import hardware_table

    r = row(model="llama-3.1-70b", num_gpus=4, tp=4, isl=2048, osl=128)
    inst = V.row_instance(r, 64)
    hw = hardware_table(inst)
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
    m = V.evaluate_row(r, 64).workload_metrics["main"]
    c = m["prefill_step.compute_s"] + m["prefill_step.compute_overlapped_s"]
    mem = m["prefill_step.memory_local_s"] + m["prefill_step.memory_local_overlapped_s"]
    rest = sum(m[f"prefill_step.{k}_s"] for k in ("scale_up_bw", "scale_up_bw_in_switch", "scale_up_latency", "scale_out_bw",
                                                   "scale_out_latency", "overhead", "collective_latency"))
    o = calibration_for("h100-sxm").stream_overlap
    assert m["prefill_step_s"] == pytest.approx(o * max(c, mem) + (1 - o) * (c + mem) + rest, rel=1e-12)


def test_every_ring_step_of_a_tp_collective_pays_the_step_latency():
    """Two all-reduces per layer, each 2(n-1) ring steps, and one logits all-gather of n-1 steps at
    TP > 1 (eq. 4.10a), every step charged the collective step latency (eq. 3.13d). Llama 70B
    (80 layers): TP4 has 160 x 6 + 3 = 963 steps per stage step, TP8 160 x 14 + 7 = 2,247, TP1
    none; the per-call ablation counts 161 calls whatever the TP. step_time adds steps x latency
    (963 x 5 us = 4.815 ms)."""
    from codesign.model.hardware import calibration_for

    lat = calibration_for("h100-sxm").collective_step_latency_us * 1e-6
    assert lat > 0
    r4 = row(model="llama-3.1-70b", num_gpus=4, tp=4, isl=1000, osl=1000)
    m4 = V.evaluate_row(r4, 64).workload_metrics["main"]
    m8 = V.evaluate_row(row(model="llama-3.1-70b", num_gpus=8, tp=8, isl=1000, osl=1000), 64).workload_metrics["main"]
    m1 = V.evaluate_row(row(model="llama-3.1-70b", num_gpus=1, tp=1, isl=1000, osl=1000), 4).workload_metrics["main"]
    for phase in ("prefill", "decode"):
        assert m4[f"{phase}_step.collective_steps"] == 963.0
        assert m8[f"{phase}_step.collective_steps"] == 2247.0
        assert m4[f"{phase}_step.collective_latency_s"] == pytest.approx(963 * lat, rel=1e-12)
        assert m1[f"{phase}_step.collective_latency_s"] == 0.0
    # TP16 over two NVLink domains of 8 (eq. 3.17): an all-reduce is 2 x 7 steps inside and 2 x 1
    # across, the logits all-gather 7 + 1: 160 x 16 + 8 = 2,568, of which 160 x 2 + 1 = 321 on
    # scale-out (the link latency counts the same steps: 2,247 x 0.5 us and 321 x 1 us)
    r16 = row(model="llama-3.1-70b", num_gpus=16, tp=16, isl=1000, osl=1000)
    m16 = V.evaluate_row(r16, 64).workload_metrics["main"]
    assert m16["decode_step.collective_steps"] == 2568.0
    assert m16["decode_step.scale_up_latency_s"] == pytest.approx(2247 * 500e-9, rel=1e-12)
    assert m16["decode_step.scale_out_latency_s"] == pytest.approx(321 * 1e-6, rel=1e-12)
    assert V.row_terms(r4, 64).decode["collective_steps"] == 963.0
    assert V.row_terms(r4, 64, V.Variant("x", collective_per_call=True)).decode["collective_steps"] == 161.0
    t = {"compute": 0.0, "memory_local": 0.0, "memory_pool": 0.0, "net_bw": 0.0, "net_latency": 0.0, "layers": 0.0,
         "collective_steps": 963.0}
    cal = {"compute_efficiency": 1.0, "memory_efficiency": 1.0, "network_efficiency": 1.0, "layer_overhead_us": 0.0,
           "stream_overlap": 0.0, "collective_step_latency_us": 5.0}
    assert V.step_time(t, cal) == pytest.approx(4.815e-3, rel=1e-12)


def test_tp_gathers_the_16_bit_logits_of_every_new_token():
    """The vocabulary-parallel LM head's logits are all-gathered in 16 bit (eq. 4.9a). Llama 70B
    (hidden 8192, vocab 128256, 80 layers), TP8 on one H100 board (450 GB/s per direction), decode
    batch 100: all-reduce message 100 x 8192 x 2 = 1,638,400 B, 160 of them at 2 x 7/8 each =
    458,752,000 B; logits 100 x 128256 x 2 = 25,651,200 B gathered at 7/8 = 22,444,800 B.
    Steps: 160 x 14 + 7 = 2247. Prefill (ISL 1000) all-reduces 1000x the decode message but gathers
    the logits of the last prompt token only: the same 22,444,800 B. That is the ring of the A100
    SXM's NVLink 3 (300 GB/s); the H100's NVSwitch reduces the all-reduces of 8 >= 5 ranks in the
    network (eq. 3.17a), at 0.82 / 0.61 x 1,638,400 B = 2,202,439 B each: 352,390,295 B, and the
    logits all-gather stays a ring."""
    from codesign.model.hardware import calibration_for

    logits = 7 / 8 * 100 * 128256 * 2
    bytes_up = {"decode": 160 * 2 * 7 / 8 * 100 * 8192 * 2 + logits,
                "prefill": 160 * 2 * 7 / 8 * 100 * 1000 * 8192 * 2 + logits}
    assert bytes_up["decode"] == 458_752_000 + 22_444_800
    in_switch = {"decode": 160 * 0.82 / 0.61 * 100 * 8192 * 2 + logits,
                 "prefill": 160 * 0.82 / 0.61 * 100 * 1000 * 8192 * 2 + logits}
    assert in_switch["decode"] == pytest.approx(352_390_295.1 + 22_444_800, abs=0.1)
    for gpu, link_Bps, ring, switch in (("a100-sxm-80gb", 300e9, bytes_up, None), ("h100-sxm", 450e9, None, in_switch)):
        cal = calibration_for(gpu)
        r = row(model="llama-3.1-70b", gpu=gpu, num_gpus=8, tp=8, isl=1000, osl=1000, precision="fp16")
        m = V.evaluate_row(r, 100).workload_metrics["main"]
        for phase in ("prefill", "decode"):
            for key, expected in (("scale_up_bw", ring), ("scale_up_bw_in_switch", switch)):
                want = 0.0 if expected is None else expected[phase] / (link_Bps * cal.network_efficiency)
                assert m[f"{phase}_step.{key}_s"] == pytest.approx(want, rel=1e-9)
            assert m[f"{phase}_step.scale_up_latency_s"] == pytest.approx(2247 * 0.5e-6, rel=1e-9)
            assert m[f"{phase}_step.scale_out_bw_s"] == 0.0
    m1 = V.evaluate_row(row(model="llama-3.1-70b", num_gpus=1, tp=1, isl=1000, osl=1000), 4).workload_metrics["main"]
    assert m1["decode_step.scale_up_bw_s"] == 0.0 and m1["decode_step.scale_up_latency_s"] == 0.0
    assert m1["decode_step.scale_up_bw_in_switch_s"] == 0.0


def test_fp8_checkpoints_read_the_lm_head_in_16_bit_every_decode_step():
    """Per decode step the LM head is read whole at 2 B/param (plus one 16-bit embedding row per
    sequence), whatever the weights' precision."""
    from codesign.model.workload import load_workload, step_costs

    w = load_workload("llama-3.1-8b")
    c = step_costs(w, batch=1, new_tokens=1, context=0, weight_bytes_per_param=1.0, kv_bytes_per_element=1.0,
                   embedding_bytes_per_param=2.0)
    assert c.bytes_w_embed_head == pytest.approx(EMBED_HEAD_8B + 4096 * 2)
    plain = step_costs(w, batch=1, new_tokens=1, context=0, weight_bytes_per_param=1.0, kv_bytes_per_element=1.0)
    assert plain.bytes_w_embed_head == pytest.approx(EMBED_HEAD_8B / 2 + 4096)  # default: the weights' bytes


def test_the_memory_constraint_is_the_engine_rule():
    """memory-capacity-local: W + S + KV / f <= u C - R (eq. 4.14a, 4.14b, 3.21), which is
    KV <= f (u C - R - S - W), S the decoding state of the batch's own sequence slots."""
    from codesign.model.hardware import kv_cache_free_fraction

    ev = V.evaluate_row(row(), 100)
    m = ev.workload_metrics["main"]
    cal = calibration_for("h100-sxm")
    audit = V._memory_audit(ev)
    assert m["weights_per_device_B"] == W_8B_FP8 and m["kv_per_device_B"] == 100 * KV_SEQ_8B_FP8_2000
    assert m["decoder_state_per_device_B"] == 100 * STATE_8B_2000
    assert audit.value == pytest.approx(W_8B_FP8 + 100 * STATE_8B_2000 + 100 * KV_SEQ_8B_FP8_2000 / kv_cache_free_fraction())
    assert audit.limit == pytest.approx(80 * GiB * cal.usable_memory_fraction - cal.runtime_reserve_GiB * GiB)


def test_the_engine_fraction_is_one_setting_for_every_chip():
    from codesign.model.hardware import CalibrationFile
    from codesign.schema import load_toml

    data = load_toml(shipped_calibration_path())
    data["chips"]["l40s"] = {**data["chips"].get("l40s", {}), "kv_cache_free_fraction": 0.95}
    with pytest.raises(ValueError, match="engine setting"):
        CalibrationFile.model_validate(data)


def test_pcie_cards_tp_traffic_crosses_pcie_and_the_ablation_restores_the_old_links():
    """The measured A100 PCIe system has no NVLink bridge: a TP2 all-reduce crosses PCIe Gen4 x16
    (31.5 GB/s, 1 us per step) on the scale-up side; the ablation pairs the cards by nvlink3. L40S
    TP8 goes over the NIC (catalog domain 1) unless the proposal puts it on PCIe."""
    from codesign.model.hardware import hardware_table

    r = row(model="mixtral-8x7b", gpu="a100-pcie-80gb", precision="fp16", num_gpus=2, tp=2, isl=128, osl=128)
    ne = calibration_for("a100-pcie-80gb").network_efficiency
    hw = hardware_table(V.row_instance(r, 8))
    assert hw.features["s_per_B_scale_up"][0] == pytest.approx(1 / (31.5e9 * ne))
    assert hw.features["s_per_step_scale_up"][0] == pytest.approx(1e-6)
    bridged = V.Variant(pcie_as_before=True)
    hw2 = hardware_table(V.row_instance(r, 8, bridged))
    assert hw2.features["s_per_B_scale_up"][0] == pytest.approx(1 / (300e9 * ne))
    assert V.row_instance(r, 8, bridged).system.scale_up_domain == 2
    # TP8 stays inside the 8-card PCIe server: no scale-out bytes
    m = V.evaluate_row(r.__class__(**{**r.__dict__, "num_gpus": 8, "tp": 8}), 8).workload_metrics["main"]
    assert m["decode_step.scale_out_bw_s"] == 0.0 and m["decode_step.scale_up_bw_s"] > 0.0
    # the L40S proposal: TP8 on PCIe inside the server instead of over the NIC (catalog domain 1)
    l40s = row(model="llama-3.1-70b", gpu="l40s", num_gpus=8, tp=8, isl=128, osl=128)
    m = V.evaluate_row(l40s, 8).workload_metrics["main"]
    assert m["decode_step.scale_out_bw_s"] > 0.0 and m["decode_step.scale_up_bw_s"] == 0.0
    m = V.evaluate_row(l40s, 8, V.Variant(l40s_tp_over_pcie=True)).workload_metrics["main"]
    assert m["decode_step.scale_out_bw_s"] == 0.0 and m["decode_step.scale_up_bw_s"] > 0.0


OVERVIEW = "arthurrasmusson/TensorRT-LLM@e00d4e6564921307dd264b61fe1d46f116095e0e:docs/source/performance/perf-overview.md"


def test_request_count_comes_from_the_csv_column_or_the_rows_benchmark(tmp_path):
    """The overview ran 1500 requests at 128/4096 and 30000 at 128/128 ("Preparing a Dataset");
    a num_requests column wins; an unknown source has no count."""
    base = dict(id="a", model="mixtral-8x7b", gpu="h200-sxm", num_gpus=8, tp=8, pp=1, ep=1, attention_dp=1,
                precision="fp8", isl=128, osl=4096, concurrency="", metric="output_tokens_per_s", value=1.0,
                unit="1/s", source=OVERVIEW)
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*HEADER, "num_requests"])
        w.writeheader()
        w.writerow(base)
        w.writerow({**base, "id": "b", "osl": 128})
        w.writerow({**base, "id": "c", "source": OVERVIEW + " (table rows 'LLaMA v3 70B')"})
        w.writerow({**base, "id": "d", "source": "someone else's benchmark"})
        w.writerow({**base, "id": "e", "source": "someone else's benchmark", "num_requests": "200"})
        w.writerow({**base, "id": "f", "num_requests": "0"})
    rows, bad = V.read_rows(path)
    assert {r.id: r.num_requests for r in rows} == {"a": 1500, "b": 30000, "c": 1500, "d": None, "e": 200}
    assert [b["id"] for b in bad] == ["f"]


@pytest.mark.parametrize("text", [
    'benchmark = 3',
    '[[benchmarks]]\nsource = "x"\nnum_requests = { "1/1" = 2 }',
    '[[benchmark]]\nsource = "x"\nnum_requests = { "1/1" = true }',
    '[[benchmark]]\nsource = "x"\nnum_requests = { "1-1" = 2 }',
    '[[benchmark]]\nnum_requests = { "1/1" = 2 }',
])
def test_a_malformed_request_table_is_an_input_error(tmp_path, text):
    path = tmp_path / "requests.toml"
    path.write_text(text)
    with pytest.raises(V.InputError) as exc:
        V.read_benchmark_requests(path)
    assert exc.value.file == str(path)


def test_the_longest_source_prefix_that_lists_the_lengths_wins(tmp_path):
    path = tmp_path / "requests.toml"
    path.write_text('[[benchmark]]\nsource = "repo@c:"\nnum_requests = { "1/1" = 10 }\n'
                    '[[benchmark]]\nsource = "repo@c:doc.md"\nnum_requests = { "2/2" = 20 }\n')
    known = V.read_benchmark_requests(path)
    assert [p for p, _ in known] == ["repo@c:doc.md", "repo@c:"]
    assert V._requests_of("repo@c:doc.md", 2, 2, known) == 20
    assert V._requests_of("repo@c:doc.md", 1, 1, known) == 10  # the specific entry lacks 1/1
    assert V._requests_of("other", 1, 1, known) is None


def test_request_limit_is_requests_per_replica_in_multiples_of_pp():
    # 1500 requests on 8 GPUs at TP 2, PP 2: dp 2 -> 750 per replica, a multiple of PP already;
    # 1001 requests: 501 per replica -> 502 (next multiple of PP 2)
    assert row(num_gpus=8, tp=2, pp=2, num_requests=1500).request_limit == 750
    assert row(num_gpus=8, tp=2, pp=2, num_requests=1001).request_limit == 502
    assert row(num_requests=None).request_limit is None
    assert row(num_requests=1500, concurrency=64).request_limit is None


def test_batch_is_capped_at_the_runs_requests():
    """Mixtral FP8 on 8 H200 at 128/4096 holds thousands of sequences; the run has 1500."""
    r = row(model="mixtral-8x7b", gpu="h200-sxm", num_gpus=8, tp=8, isl=128, osl=4096, num_requests=1500)
    assert V.max_batch(r, variant=V.Variant(no_request_cap=True)).batch > 1500
    choice = V.max_batch(r)
    assert (choice.batch, choice.bound) == (1500, "requests")
    fp = V.footprint(r)
    assert V.batch_from(r, fp, None, V.ENGINE_MAX_BATCH) == 1500
    assert V.batch_from(r, fp, None, V.ENGINE_MAX_BATCH, requests=False) > 1500
    stack = V.RowStack.build([r], V.TermCache(V.MODEL), None, V.ENGINE_MAX_BATCH)
    assert stack.batch[0] == 1500
    waves = V.RowStack.build([r], V.TermCache(V.Variant(request_waves=True)), None, V.ENGINE_MAX_BATCH)
    assert waves.batch[0] == 1500 and waves.waves[0] == 1 and waves.tail[0] == 0


def test_request_waves_leave_a_partial_last_wave():
    """Llama 70B FP8 on one H100 at 1000/1000 holds ~13 sequences: 40 requests are 3 full waves
    and a last one of 40 - 3 x 13 = 1 (with the model's batch b: 40 // b waves, 40 % b left)."""
    r = row(model="llama-3.1-70b", num_requests=40)
    waves = V.RowStack.build([r], V.TermCache(V.Variant(request_waves=True)), None, V.ENGINE_MAX_BATCH)
    b = int(waves.batch[0])
    assert b == V.max_batch(row(model="llama-3.1-70b")).batch  # the memory batch, below 40 requests
    assert 1 <= b < 40
    assert waves.waves[0] == 40 // b and waves.tail[0] == 40 - (40 // b) * b
    assert 0 < waves.tail[0] < b and waves.waves[0] * b + waves.tail[0] == 40


def test_mixed_iteration_carries_one_osl_th_of_the_prefill():
    pre = {"compute": 10.0, "memory_local": 7.0, "memory_pool": 0.0, "net_bw": 5.0, "net_latency": 1.0, "layers": 32.0}
    dec = {"compute": 1.0, "memory_local": 2.0, "memory_pool": 0.0, "net_bw": 0.5, "net_latency": 0.1, "layers": 32.0}
    it = V.mixed_terms(pre, dec, 5)
    assert it == pytest.approx({"compute": 3.0, "memory_local": 2.0, "memory_pool": 0.0, "net_bw": 1.5, "net_latency": 0.3, "layers": 32.0})


# --- the report -------------------------------------------------------------------------------
def test_unknown_model_chip_metric_and_attention_dp_are_skipped_with_reasons(tmp_path):
    path = write_csv(tmp_path / "m.csv", [
        csv_row("ok"),
        csv_row("model", model="llama-9-1t"),
        csv_row("chip", gpu="h900"),
        csv_row("metric", metric="power_W"),
        csv_row("adp", attention_dp=2, num_gpus=4, tp=4),  # over part of the TP group
        csv_row("bad", value="n/a"),
    ])
    rep = V.run_validation(path, split_file=None)
    d = rep.as_dict()
    assert d["n_rows"] == 1 and d["n_skipped"] == 5
    reasons = {s["id"]: s["reason"] for s in d["skipped"]}
    assert reasons["model"].startswith("unknown model 'llama-9-1t'")
    assert reasons["chip"].startswith("unknown chip 'h900'")
    assert reasons["metric"].startswith("unsupported metric 'power_W'")
    assert "attention data parallelism" in reasons["adp"]
    assert reasons["bad"].startswith("malformed row")
    for key in ("mape_pct", "n_rows", "n_skipped", "groups", "rows", "skipped"):
        assert key in d
    assert list(d["groups"]) == ["llama-3.1-8b|h100-sxm"]


def test_mape_of_a_two_row_toy_report():
    rows = [
        {"id": "a", "model": "m", "gpu": "g", "family": "f", "measured": 100.0, "predicted": 110.0, "error_pct": 10.0, "split": "fit"},
        {"id": "b", "model": "m", "gpu": "g", "family": "f", "measured": 100.0, "predicted": 80.0, "error_pct": -20.0, "split": "held-out"},
    ]
    rep = V.ValidationReport(csv="toy.csv", by=("model", "gpu"), rows=rows, skipped=[])
    assert rep.mape_pct == pytest.approx(15.0)
    assert rep.subset_mape("held-out") == pytest.approx(20.0)
    g = rep.groups["m|g"]
    assert g["n"] == 2 and g["mape_pct"] == pytest.approx(15.0) and g["bias_pct"] == pytest.approx(-5.0)
    assert rep.worst(1)[0]["id"] == "b"


def test_targets_judge_the_held_out_rows_overall_and_per_group():
    """Held-out errors 4 and 6 % in group m|g and 20 % in m|h: held-out MAPE 10 % > 7 %; m|g
    (5 %) meets 12 %, m|h (20 %) does not. The 50 % fit row counts for neither."""
    def row(i, gpu, err, split):
        return {"id": i, "model": "m", "gpu": gpu, "family": "f", "precision": "fp8", "tp": 1, "isl": 1,
                "osl": 1, "concurrency": None, "num_requests": None, "batch": 1, "batch_bound": "memory",
                "measured": 100.0, "predicted": 100.0 + err, "error_pct": err, "split": split}

    rows = [row("a", "g", 4.0, "held-out"), row("b", "g", -6.0, "held-out"), row("c", "h", 20.0, "held-out"),
            row("d", "h", 50.0, "fit")]
    t = V.ValidationReport(csv="toy.csv", by=("model", "gpu"), rows=rows, skipped=[]).targets()
    assert t["held_out_mape_pct"] == pytest.approx(10.0) and not t["held_out_met"]
    assert t["groups_judged"] == 2 and list(t["groups_over"]) == ["m|h"] and not t["groups_met"]
    assert t["groups_over"]["m|h"] == pytest.approx(20.0)
    # every row of a group: m|h is (20 + 50) / 2 = 35 %, m|g 5 %
    assert t["groups_all_rows_judged"] == 2 and t["groups_all_rows_over"] == {"m|h": pytest.approx(35.0)}
    assert not t["groups_all_rows_met"] and t["worst_group_all_rows"] == ["m|h", pytest.approx(35.0)]
    text = V.format_report(V.ValidationReport(csv="toy.csv", by=("model", "gpu"), rows=rows, skipped=[]))
    assert "held-out MAPE <= 7 %: 10.00 % (not met)" in text
    assert "every group's MAPE <= 12 %: 1 of 2 (not met: over m|h 35.00 %; worst m|h 35.00 %)" in text
    assert "on its held-out rows alone: 1 of 2 (not met: over m|h 20.00 %)" in text
    # the two readings part: a fit row at 20 % leaves m|h's every-row MAPE at 20 % but its held-out one at 9 %
    parted = [row("a", "g", 4.0, "held-out"), row("c", "h", 9.0, "held-out"), row("d", "h", 31.0, "fit")]
    t = V.ValidationReport(csv="toy.csv", by=("model", "gpu"), rows=parted, skipped=[]).targets()
    assert t["groups_met"] and not t["groups_all_rows_met"] and t["groups_all_rows_over"] == {"m|h": pytest.approx(20.0)}
    parted[2]["error_pct"] = 11.0  # every row 10 %, held-out 9 %: both met
    t = V.ValidationReport(csv="toy.csv", by=("model", "gpu"), rows=parted, skipped=[]).targets()
    assert t["groups_met"] and t["groups_all_rows_met"] and t["worst_group_all_rows"] == ["m|h", pytest.approx(10.0)]
    assert "batch set by: memory 4, no request count 4" in text
    rows = [row("a", "g", 4.0, "held-out"), row("b", "g", -6.0, "held-out")]
    t = V.ValidationReport(csv="toy.csv", by=("model", "gpu"), rows=rows, skipped=[]).targets()
    assert t["held_out_met"] and t["groups_met"] and t["groups_over"] == {}
    for r in rows:
        r["split"] = None
    assert V.ValidationReport(csv="toy.csv", by=("model", "gpu"), rows=rows, skipped=[]).targets() is None


def test_a_file_outside_the_split_says_so_instead_of_nan():
    """Rows of another measurements file (e.g. validation/repeat-llama3-70b.csv) have no split
    label: the report says none was fitted rather than printing a NaN held-out MAPE."""
    rows = [{"id": "x", "model": "m", "gpu": "g", "family": "f", "precision": "fp8", "tp": 1, "isl": 1, "osl": 1,
             "concurrency": None, "num_requests": 1500, "batch": 1, "batch_bound": "requests", "measured": 100.0,
             "predicted": 90.0, "error_pct": -10.0, "split": None}]
    text = V.format_report(V.ValidationReport(csv="other.csv", by=("model", "gpu"), rows=rows, skipped=[],
                                              split_file="split.json"))
    assert "no row is in the split file" in text and "nan" not in text.lower()
    assert "batch set by: requests 1" in text and "no request count" not in text
    text = V.format_report(V.ValidationReport(csv="other.csv", by=("model", "gpu"), rows=rows, skipped=[]))
    assert "no split file: rows are not labelled fit / held-out" in text and "nan" not in text.lower()
    rows[0]["split"] = "held-out"
    text = V.format_report(V.ValidationReport(csv="other.csv", by=("model", "gpu"), rows=rows, skipped=[]))
    assert "held-out 10.00 %" in text


def test_plot_writes_a_png(tmp_path):
    rows = [
        {"id": "a", "family": "hopper", "metric": "output_tokens_per_s", "measured": 100.0, "predicted": 110.0, "error_pct": 10.0, "split": "fit"},
        {"id": "b", "family": "ada", "metric": "output_tokens_per_s", "measured": 1000.0, "predicted": 800.0, "error_pct": -20.0, "split": "held-out"},
    ]
    rep = V.ValidationReport(csv="toy.csv", by=("model",), rows=rows, skipped=[])
    out = V.plot(rep, tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert V.plot_title(rep) == "toy.csv: MAPE 15.0 % (held-out 20.0 %), 2 rows"
    for r in rows:
        r["split"] = "unlisted"
    assert V.plot_title(rep) == "toy.csv: MAPE 15.0 % (no row fitted), 2 rows"


# --- split and fit ------------------------------------------------------------------------------
def test_split_is_deterministic_and_covers_every_row(tmp_path):
    path = write_csv(tmp_path / "m.csv", [csv_row(f"m{i:04d}") for i in range(40)])
    a = V.make_split(path)
    b = V.make_split(path, tmp_path / "split.json")
    assert a == b and a["n_fit"] + a["n_held_out"] == 40 and 0 < a["n_fit"] < 40
    labels = V.read_split(tmp_path / "split.json")
    assert all(labels[i] == V.split_of(i) for i in labels)


def test_fit_calibration_recovers_the_memory_efficiency_and_writes_nothing(tmp_path):
    """Rows whose 'measurements' are the model's own predictions at a known calibration: the fit
    returns parameters that reproduce them, and no file is touched unless asked."""
    cal_file = shipped_calibration_path()
    before = cal_file.read_bytes()
    rows = []
    for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (1000, 1000), (2048, 2048), (128, 4096), (20000, 2000)]):
        r = row(id=f"s{i}", gpu="l40s", isl=isl, osl=osl)
        rows.append(csv_row(r.id, gpu="l40s", isl=isl, osl=osl, value=V.predict_row(r)["predicted"]))
    path = write_csv(tmp_path / "m.csv", rows)
    V.make_split(path, tmp_path / "split.json")
    labels = V.read_split(tmp_path / "split.json")
    # put every row into the fit set (the tiny file would otherwise leave the fit nearly empty)
    (tmp_path / "all.json").write_text(json.dumps({"fit": sorted(labels), "held_out": []}))
    res = V.fit_calibration(path, tmp_path / "all.json", fit_memory=False)
    assert list(res) == ["ada"]
    assert res["ada"]["fit_mape_pct"] < 1.0  # decode-heavy rows: memory-bound, fitted exactly
    lo, hi = V.FIT_BOUNDS["layer_overhead_us"]
    assert lo <= res["ada"]["params"]["layer_overhead_us"] <= hi
    assert V.CAP_FIELD not in res["ada"]["params"]  # one chip, one memory: no cap to tell apart from e
    assert cal_file.read_bytes() == before


def test_the_die_caps_the_bandwidth_a_faster_memory_can_deliver():
    """eq. 3.21a: achieved = min(e x peak, cap). e = 0.8, cap = 3,000 GB/s: H100 (3,350 GB/s)
    2,680 GB/s, H200 (4,800 GB/s) 3,000 GB/s instead of 3,840; without a cap 3,840."""
    from codesign.model.hardware import Calibration, achieved_memory_Bps

    base = calibration_for("l40s").model_dump() | {"memory_efficiency": 0.8}
    capped = Calibration.model_validate(base | {"memory_bandwidth_cap_GBps": 3000.0})
    assert achieved_memory_Bps(3350e9, capped) == pytest.approx(2680e9)
    assert achieved_memory_Bps(4800e9, capped) == pytest.approx(3000e9)
    assert achieved_memory_Bps(4800e9, Calibration.model_validate(base | {"memory_bandwidth_cap_GBps": None})) == \
        pytest.approx(3840e9)
    # the validator's step form: 1 s of local memory at peak -> 1 / min(0.8, 3000 / peak) s
    t = {"compute": 0.0, "memory_local": 1.0, "memory_pool": 0.0, "net_bw": 0.0, "net_latency": 0.0, "layers": 0.0,
         "collective_steps": 0.0}
    cal = {"compute_efficiency": 1.0, "memory_efficiency": 0.8, "network_efficiency": 1.0, "layer_overhead_us": 0.0,
           "collective_step_latency_us": 0.0, "stream_overlap": 0.0, V.CAP_FIELD: 3000.0}
    assert V.step_time(t | {"memory_peak_GBps": 4800.0}, cal) == pytest.approx(1.6)
    assert V.step_time(t | {"memory_peak_GBps": 3350.0}, cal) == pytest.approx(1.25)


def test_the_fitted_cap_binds_on_the_h200_and_the_model_uses_it():
    """The shipped hopper calibration: one set of values for H100 and H200, whose cap lies between
    e x 3,350 and e x 4,800 GB/s; the hardware table's local-memory time per byte is 1 / cap on the
    H200 and 1 / (e x 3,350 GB/s) on the H100, and row_terms divides exactly that out."""
    from codesign.model.hardware import achieved_memory_Bps

    h100, h200 = calibration_for("h100-sxm"), calibration_for("h200-sxm")
    assert h100 == h200
    cap = h200.memory_bandwidth_cap_GBps
    assert cap is not None and h200.memory_efficiency * 3350 < cap < h200.memory_efficiency * 4800
    assert achieved_memory_Bps(4800e9, h200) == pytest.approx(cap * 1e9)
    assert achieved_memory_Bps(3350e9, h100) == pytest.approx(h100.memory_efficiency * 3350e9)
    for gpu in ("h100-sxm", "h200-sxm"):
        r = row(gpu=gpu)
        terms = V.row_terms(r, 100)
        assert terms.decode["memory_peak_GBps"] == {"h100-sxm": 3350, "h200-sxm": 4800}[gpu]
        # re-composed at the file calibration (the cap applied to the H200 only) = evaluate's own
        assert V.recompose(terms, calibration_for(gpu).model_dump()) == pytest.approx(terms.evaluated["tokens_per_s"],
                                                                                      rel=1e-9)


def test_write_calibration_updates_only_the_fitted_chips(tmp_path):
    from codesign.model.hardware import CalibrationFile
    from codesign.schema import load_toml

    target = tmp_path / "calibration.toml"
    target.write_text(shipped_calibration_path().read_text())
    params = {"compute_efficiency": 0.5, "memory_efficiency": 0.6, "network_efficiency": 0.4,
              "layer_overhead_us": 3.0, "stream_overlap": 0.0, "usable_memory_fraction": 1.0,
              "runtime_reserve_GiB": 4.5}
    fitted = {"ada": {"chips": ["l40s"], "params": params, "n_fit": 1, "fit_mape_pct": 1.0,
                      "n_held_out": 1, "held_out_mape_pct": 2.0}}
    V.write_calibration(fitted, target)
    cal = CalibrationFile.model_validate(load_toml(target))
    assert cal.chips["l40s"] == params
    before = CalibrationFile.model_validate(load_toml(shipped_calibration_path()))
    assert cal.default == before.default
    assert {k: v for k, v in cal.chips.items() if k != "l40s"} == {k: v for k, v in before.chips.items() if k != "l40s"}
    assert "# kernel launches" in target.read_text()  # comments of [default] are kept


def test_gpus_without_measurements_get_the_pooled_calibration_not_the_3d_default(tmp_path):
    """The pooled fit goes to the catalog GPUs without measurements (B200, GB200, MI300X, RTX PRO
    6000), with its own comment; [default], which the 3D families use, is untouched."""
    from codesign.model.hardware import CalibrationFile
    from codesign.schema import load_toml

    target = tmp_path / "calibration.toml"
    target.write_text(shipped_calibration_path().read_text())
    params = {"compute_efficiency": 0.61, "memory_efficiency": 0.71, "network_efficiency": 0.51,
              "layer_overhead_us": 7.0, "stream_overlap": 0.0, "usable_memory_fraction": 1.0,
              "runtime_reserve_GiB": 5.0}
    fitted = {V.POOLED: {"chips": ["b200", "gb200", "mi300x", "rtx-pro-6000"], "params": params, "n_fit": 190, "fit_mape_pct": 10.0,
                         "n_held_out": 177, "held_out_mape_pct": 11.0}}
    V.write_calibration(fitted, target)
    cal = CalibrationFile.model_validate(load_toml(target))
    for chip in ("b200", "gb200", "mi300x", "rtx-pro-6000"):
        assert cal.chips[chip] == params
    assert "# no measurements: all measured families pooled: fit MAPE 10.0 % on 190 rows" in target.read_text()
    # and as [pooled], for chips of such families added later (hardware.calibration_for); one table
    # however often the file is re-written
    assert cal.pooled == params
    V.write_calibration(fitted, target)
    assert [line.strip() for line in target.read_text().splitlines()].count("[pooled]") == 1
    assert CalibrationFile.model_validate(load_toml(target)).pooled == params
    assert cal.default == CalibrationFile.model_validate(load_toml(shipped_calibration_path())).default
    assert "deepstack-3d" not in cal.chips


def test_the_a100_pcie_card_is_its_own_calibration_family():
    """The 300 W PCIe card on PCIe and the 400 W SXM module on NVLink 3 are fitted apart
    (VALIDATION.md §5.4); the ablation puts them back in one family; H100 and H200 stay one."""
    assert V.family_of("a100-pcie-80gb") == "ampere-pcie"
    assert V.family_of("a100-sxm-80gb") == "ampere"
    assert V.family_of("h100-sxm") == V.family_of("h200-sxm") == "hopper"
    one = V.Variant("x", ampere_one_family=True)
    assert one.group_of("a100-pcie-80gb") == one.group_of("a100-sxm-80gb") == "ampere"
    assert one.group_of("l40s") == "ada"
    before = next(v for v in V.PROPOSALS if v.name == "before")
    assert dict(before.fixed) == {"stream_overlap": 1.0, "collective_step_latency_us": 0.0}
    assert before.ampere_one_family and before.pcie_as_before


def test_the_logits_and_activation_ablations_remove_exactly_their_terms():
    """model-without-logits-gather drops the 22,444,800 B logits all-gather of Llama 70B TP8 at
    batch 100 (eq. 4.9a) and its 7 ring steps; model-without-activation-traffic drops the
    activations: 2 B x 100 x (13,139,968 + 16,547,840 / 8) = 3,041,689,600 B per decode step
    (eq. 2.15h), read at 3.35 TB/s times the memory efficiency."""
    from codesign.model.hardware import calibration_for

    cal = calibration_for("h100-sxm")
    r = row(model="llama-3.1-70b", num_gpus=8, tp=8, isl=1000, osl=1000)
    m = V.evaluate_row(r, 100).workload_metrics["main"]
    no_lg = V.Variant("x", no_logits_gather=True)
    m_lg = V.evaluate_row(r, 100, no_lg).workload_metrics["main"]
    diff = m["decode_step.scale_up_bw_in_switch_s"] - m_lg["decode_step.scale_up_bw_in_switch_s"]
    assert diff == pytest.approx(22_444_800 / (450e9 * cal.network_efficiency), rel=1e-9)
    assert V.row_terms(r, 100).decode["collective_steps"] == 2247.0
    assert V.row_terms(r, 100, no_lg).decode["collective_steps"] == 2240.0
    m_act = V.evaluate_row(r, 100, V.Variant("y", no_activation_traffic=True)).workload_metrics["main"]
    act_B = 2 * 100 * (13_139_968 + 16_547_840 / 8)
    assert act_B == 3_041_689_600
    def local(mm):  # the stream's serial and overlapped parts (eq. 5.3)
        return mm["decode_step.memory_local_s"] + mm["decode_step.memory_local_overlapped_s"]

    diff = local(m) - local(m_act)
    assert diff == pytest.approx(act_B / (3350e9 * cal.memory_efficiency), rel=1e-9)
    # the switches are restored on exit
    assert V.evaluate_row(r, 100).workload_metrics["main"]["decode_step.memory_local_s"] == m["decode_step.memory_local_s"]


def test_the_nim_latency_check_is_predicted_row_by_row():
    """validation/nim-llama3.3-70b-h100.csv (VALIDATION.md §5.9): four fixed-concurrency latency
    rows of another serving stack, each predicted at batch 1 (concurrency 1, DP 1) as the metric
    it names, none skipped, none in the split."""
    rep = V.run_validation(V.REPO_ROOT / "validation" / "nim-llama3.3-70b-h100.csv", split_file=V.DEFAULT_SPLIT)
    assert rep.skipped == [] and len(rep.rows) == 4
    assert {r["metric"] for r in rep.rows} == {"itl_s", "ttft_s"}
    assert all(r["batch"] == 1 and r["split"] == "unlisted" for r in rep.rows)
    # TTFT of 5000 prompt tokens is far longer than one decode step, as measured (406.8 vs 18.6 ms)
    by_id = {r["id"]: r["predicted"] for r in rep.rows}
    assert by_id["n0002"] > 10 * by_id["n0001"]


def test_the_fit_finds_the_cap_of_one_die_on_two_memories(tmp_path):
    """Rows whose 'measurements' are the model's predictions at the shipped hopper calibration
    (decode-heavy Llama 8B on one H100 and one H200: memory-bound). With the other fields held at
    their shipped values, the fit (from its own deterministic starts) recovers the shipped memory
    efficiency and cap, hence the H200 / H100 ratio of achieved bandwidths (1.178 at the shipped
    calibration; 4,800 / 3,350 = 1.433 without a cap). With every field free it still gets a cap
    that binds on the H200 and not on the H100 (the absolute bandwidths then trade ~1 % against the
    per-layer overhead at a fit error below 1 %); with the cap ablated the fit has none and fits
    worse."""
    from codesign.model.hardware import Calibration, achieved_memory_Bps

    rows = []
    for gpu in ("h100-sxm", "h200-sxm"):
        for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (128, 4096), (2048, 2048)]):
            r = row(id=f"{gpu}-{i}", gpu=gpu, isl=isl, osl=osl)
            rows.append(csv_row(r.id, gpu=gpu, isl=isl, osl=osl, value=V.predict_row(r)["predicted"]))
    path = write_csv(tmp_path / "m.csv", rows)
    (tmp_path / "all.json").write_text(json.dumps({"fit": [r["id"] for r in rows], "held_out": []}))
    shipped = calibration_for("h200-sxm")
    held = tuple((k, getattr(shipped, k)) for k in ("compute_efficiency", "network_efficiency", "layer_overhead_us",
                                                     "stream_overlap", "collective_step_latency_us", V.EIGHT_BIT_FIELD))
    res = V.fit_calibration(path, tmp_path / "all.json", fit_memory=False, pooled=False, variant=V.Variant("held", fixed=held))
    params = res["hopper"]["params"]
    assert params["memory_efficiency"] == pytest.approx(shipped.memory_efficiency, rel=1e-3)
    assert params[V.CAP_FIELD] == pytest.approx(shipped.memory_bandwidth_cap_GBps, rel=1e-3)
    fitted = Calibration.model_validate(shipped.model_dump() | params)
    ratio = achieved_memory_Bps(4800e9, fitted) / achieved_memory_Bps(3350e9, fitted)
    assert ratio == pytest.approx(achieved_memory_Bps(4800e9, shipped) / achieved_memory_Bps(3350e9, shipped), rel=1e-3)
    res = V.fit_calibration(path, tmp_path / "all.json", fit_memory=False, pooled=False)
    assert res["hopper"]["fit_mape_pct"] < 1.0
    free = Calibration.model_validate(shipped.model_dump() | res["hopper"]["params"])
    assert free.memory_efficiency * 3350 < free.memory_bandwidth_cap_GBps < free.memory_efficiency * 4800
    ablated = V.fit_calibration(path, tmp_path / "all.json", fit_memory=False, pooled=False,
                                variant=V.Variant("x", no_bandwidth_cap=True))
    assert V.CAP_FIELD not in ablated["hopper"]["params"]
    assert ablated["hopper"]["fit_mape_pct"] > res["hopper"]["fit_mape_pct"]


def test_the_kv_cache_precision_is_the_engines_rule_unless_the_csv_says(tmp_path):
    """trtllm-bench serves FP8 and NVFP4 checkpoints with an FP8 KV cache (65,536 B per token of
    Llama 8B), 16-bit checkpoints with a 16-bit one (131,072 B); a kv_precision column wins."""
    assert V.footprint(row(precision="fp4")).kv_per_sequence_B == KV_SEQ_8B_FP8_2000
    assert V.footprint(row(precision="fp16")).kv_per_sequence_B == 2 * KV_SEQ_8B_FP8_2000
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*HEADER, "kv_precision"])
        w.writeheader()
        w.writerow(csv_row("a", precision="fp4"))
        w.writerow(csv_row("b", precision="fp8", kv_precision="fp16"))
        w.writerow(csv_row("c", precision="fp8", kv_precision="fp7"))
        w.writerow(csv_row("d", tp="two"))
    rows, bad = V.read_rows(path)
    by = {r.id: r for r in rows}
    assert {i: r.kv_precision for i, r in by.items()} == {"a": "fp8", "b": "fp16", "c": "fp7"}
    assert V.footprint(by["b"]).kv_per_sequence_B == 2 * KV_SEQ_8B_FP8_2000
    assert "kv_precision 'fp7'" in V.skip_reason(by["c"])
    assert bad == [{"id": "d", "reason": "malformed row: column tp: 'two' is not an integer"}]


def test_the_never_fitted_check_files_map_to_the_catalog():
    """Every row of the check files VALIDATION.md reports (§5.8, §5.9, §6.2) maps to a catalog
    workload and chip and a supported metric: none is skipped, none is in the split."""
    repo = Path(__file__).resolve().parent.parent
    labels = V.read_split(repo / "validation" / "split.json")
    for name, n in (("other-models.csv", 54), ("nim-llama3.3-70b-h100.csv", 4), ("repeat-llama3-70b.csv", 147)):
        rows, bad = V.read_rows(repo / "validation" / name)
        assert not bad and len(rows) == n, name
        assert all(V.skip_reason(r) is None for r in rows), name
        assert not any(r.id in labels for r in rows), name
    models = {r.model for r in V.read_rows(repo / "validation" / "other-models.csv")[0]}
    assert models == {"llama-3.1-405b", "mixtral-8x22b"}
    # the v1.0 overview (§6.3): 328 rows, none skipped; the 132 MoE rows on more than one GPU per
    # replica ran with attention DP over the whole TP group (the overview's MoE command), which the
    # model describes since §4.8
    rows, bad = V.read_rows(repo / "validation" / "trtllm-1.0-overview.csv")
    assert not bad and len(rows) == 328
    assert not any(r.id in labels for r in rows)
    assert all(V.skip_reason(r) is None for r in rows)
    assert sum(r.attention_dp_on for r in rows) == 132


def test_a_users_calibration_file_is_written_apart_and_used_by_the_cli(tmp_path, monkeypatch):
    """`calibrate --out` writes a calibration beside the shipped one (whose bytes stay) with the
    fitted family's values and every other chip's as in use; `codesign --calibration FILE` makes
    every command read it; a missing file is bad input (exit 2)."""
    from typer.testing import CliRunner

    from codesign.cli import app
    from codesign.model import hardware
    from codesign.model.hardware import CalibrationFile
    from codesign.schema import load_toml

    monkeypatch.delenv(hardware.CALIBRATION_ENV, raising=False)
    shipped = shipped_calibration_path().read_bytes()
    rows = []
    for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (1000, 1000), (2048, 2048), (128, 4096), (20000, 2000)]):
        r = row(id=f"s{i}", gpu="l40s", isl=isl, osl=osl)
        rows.append(csv_row(r.id, gpu="l40s", isl=isl, osl=osl, value=0.8 * V.predict_row(r)["predicted"]))
    path = write_csv(tmp_path / "m.csv", rows)
    (tmp_path / "all.json").write_text(json.dumps({"fit": [r["id"] for r in rows], "held_out": []}))
    mine = tmp_path / "mine.toml"
    res = V.fit_calibration(path, tmp_path / "all.json", fit_memory=False, write=mine)
    assert shipped_calibration_path().read_bytes() == shipped
    written = CalibrationFile.model_validate(load_toml(mine))
    assert written.chips["l40s"]["memory_efficiency"] == res["ada"]["params"]["memory_efficiency"]
    assert written.chips["h100-sxm"] == CalibrationFile.model_validate(load_toml(shipped_calibration_path())).chips["h100-sxm"]

    runner = CliRunner()
    try:
        got = runner.invoke(app, ["--calibration", str(mine), "validate", str(path), "--json"])
        assert got.exit_code == 0, got.output
        report = json.loads(got.stdout)
        assert report["calibration"]["l40s"]["memory_efficiency"] == res["ada"]["params"]["memory_efficiency"]
        assert report["mape_pct"] < 1.0  # the 20 % slower 'measurements' are what the fit saw
    finally:
        monkeypatch.delenv(hardware.CALIBRATION_ENV, raising=False)
        hardware.forget_calibration()
    missing = runner.invoke(app, ["--calibration", str(tmp_path / "nope.toml"), "validate", str(path)])
    assert missing.exit_code == 2 and "calibration file not found" in missing.output
    both = runner.invoke(app, ["calibrate", str(path), "--write", "--out", str(mine)])
    assert both.exit_code == 2 and "exclusive" in both.output


def test_calibrate_out_fits_only_the_families_measured_and_keeps_every_other_chip(tmp_path):
    """The CLI path: `calibrate CSV --out FILE` on rows of two families (L40S, H100) writes the
    split beside FILE, fits those two families and no pooled calibration: the A100s, B200 and
    the rest keep the calibration in use; a file with nothing to fit is bad input (exit 2, no file)."""
    from typer.testing import CliRunner

    from codesign.cli import app
    from codesign.model.hardware import CalibrationFile
    from codesign.schema import load_toml

    rows = []
    for i, (gpu, isl, osl) in enumerate([("l40s", 128, 2048), ("l40s", 1000, 1000), ("l40s", 2048, 2048),
                                         ("h100-sxm", 128, 2048), ("h100-sxm", 1000, 1000), ("h100-sxm", 2048, 2048)]):
        r = row(id=f"s{i}", gpu=gpu, isl=isl, osl=osl)
        rows.append(csv_row(f"s{i}", gpu=gpu, isl=isl, osl=osl, value=0.9 * V.predict_row(r)["predicted"]))
    path = write_csv(tmp_path / "m.csv", rows)
    mine = tmp_path / "mine.toml"
    got = CliRunner().invoke(app, ["calibrate", str(path), "--out", str(mine), "--fit-host", "--json"])
    assert got.exit_code == 0, got.output
    fitted = json.loads(got.stdout)
    assert set(fitted) <= {"ada", "hopper"} and fitted  # no "pooled"
    assert (tmp_path / "mine.split.json").exists()
    shipped = CalibrationFile.model_validate(load_toml(shipped_calibration_path()))
    written = CalibrationFile.model_validate(load_toml(mine))
    for chip in ("a100-sxm-80gb", "a100-pcie-80gb", "b200", "gb200", "mi300x", "rtx-pro-6000"):
        assert written.chips[chip] == shipped.chips[chip], chip
    assert written.pooled == shipped.pooled  # no pooled fit here: the file's own [pooled] is kept
    for res in fitted.values():
        for chip in res["chips"]:
            assert written.chips[chip]["memory_efficiency"] == res["params"]["memory_efficiency"]
            # --fit-host: the host time is fitted and written where the fit puts it above 0
            assert written.chips[chip].get(V.HOST_FIELD) == res["params"].get(V.HOST_FIELD)
    # validated under that calibration without --split: the calibration records this file's sha256
    # and the id-hash split, so the rows are labelled as the fit saw them
    got = CliRunner().invoke(app, ["--calibration", str(mine), "validate", str(path), "--json"])
    assert got.exit_code == 0, got.output
    labelled = {r["id"]: r["split"] for r in json.loads(got.stdout)["rows"]}
    assert labelled == {r["id"]: V.split_of(r["id"]) for r in rows}
    missing = CliRunner().invoke(app, ["validate", str(path), "--split", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "split file not found" in missing.output
    nothing = write_csv(tmp_path / "bad.csv", [csv_row("z", model="llama-9-1t")])
    empty = tmp_path / "empty.toml"
    got = CliRunner().invoke(app, ["calibrate", str(nothing), "--out", str(empty)])
    assert got.exit_code == 2 and "no row can be fitted" in got.output
    assert not empty.exists() and not (tmp_path / "empty.split.json").exists()


def test_a_calibration_fitted_on_a_split_of_ones_own_does_not_claim_the_hash_rule(tmp_path, monkeypatch):
    """`validate` relabels rows by the id-hash rule only when the calibration says it was fitted
    by it: a split that labels rows otherwise (here the inverse of the rule) is recorded as the
    user's own, and the rows are not relabelled."""
    from codesign.model import hardware
    from codesign.schema import load_toml

    rows = []
    for i, (isl, osl) in enumerate([(128, 2048), (500, 2000), (1000, 1000), (2048, 2048), (128, 4096), (20000, 2000)]):
        r = row(id=f"s{i}", gpu="l40s", isl=isl, osl=osl)
        rows.append(csv_row(r.id, gpu="l40s", isl=isl, osl=osl, value=V.predict_row(r)["predicted"]))
    path = write_csv(tmp_path / "m.csv", rows)
    ids = [r["id"] for r in rows]
    inverse = tmp_path / "inverse.json"
    inverse.write_text(json.dumps({"fit": [i for i in ids if V.split_of(i) == "held-out"],
                                   "held_out": [i for i in ids if V.split_of(i) == "fit"]}))
    hashed = tmp_path / "hashed.json"
    V.make_split(path, hashed)
    assert V._is_hash_split(hashed) and not V._is_hash_split(inverse)
    mine = tmp_path / "mine.toml"
    V.fit_calibration(path, inverse, fit_memory=False, write=mine, pooled=False)
    source = load_toml(mine)["source"]
    assert V.SPLIT_METHOD not in source and "a split of the user's own" in source
    assert "every chip not fitted keeps" in source
    assert load_toml(mine)["fitted_on"] == {"csv": "m.csv", "csv_sha256": V.file_sha256(path),
                                            "split": "inverse.json", "split_rule": "own"}
    monkeypatch.setenv(hardware.CALIBRATION_ENV, str(mine))
    try:
        assert not V._fitted_on_by_hash(path)
        # fitted again into the same file by the rule: one [fitted_on] table, which now claims it
        V.fit_calibration(path, hashed, fit_memory=False, write=mine, pooled=False)
        assert mine.read_text().count("[fitted_on]") == 1
        assert load_toml(mine)["fitted_on"]["split_rule"] == "id-hash"
        assert V._fitted_on_by_hash(path)
        # the table decides: "own" in it is not overridden by a source line that names the rule
        text = mine.read_text()
        mine.write_text(text.replace('split_rule = "id-hash"', 'split_rule = "own"'))
        hardware.forget_calibration()
        assert V.SPLIT_METHOD in load_toml(mine)["source"] and not V._fitted_on_by_hash(path)
        # a file written before the table existed (no [fitted_on]) is read by its source line
        mine.write_text(text[:text.index("# what the [chips.*]")] + text[text.index("\n[chips.") + 1:])
        hardware.forget_calibration()
        assert "fitted_on" not in load_toml(mine) and V._fitted_on_by_hash(path)
    finally:
        monkeypatch.delenv(hardware.CALIBRATION_ENV)
        hardware.forget_calibration()


def test_grouping_takes_the_record_fields_and_names_a_wrong_one(tmp_path):
    """``--by attention_dp`` groups (it raised a KeyError before: the record lacked the field);
    a field no record has is bad input naming the option and the fields it takes."""
    path = write_csv(tmp_path / "m.csv", [csv_row("a"), csv_row("b", isl=128, osl=128)])
    report = V.run_validation(path, ("attention_dp", "source"), split_file=None)
    assert list(report.groups) == ["1|test"]
    with pytest.raises(V.InputError) as err:
        V.run_validation(path, ("value",), split_file=None)
    assert err.value.key == "--by" and "attention_dp" in err.value.expected
