"""The formulas of the validation experiments in benchmarks/ (VALIDATION.md §5.4, §5.10, §5.11),
checked by hand, and their patches of ``codesign.validate`` restored on exit."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import pytest

from codesign import validate as V
from codesign.model.hardware import calibration_for

REPO = Path(__file__).resolve().parent.parent


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


step_forms = _load("step_forms")
pcie_topology = _load("pcie_topology")
hopper_alternatives = _load("hopper_alternatives")
heldout_floor = _load("heldout_floor")

#: compute 1.0 s at ce = 0.7, weights + KV 1.0 s and activations 0.5 s at me = 0.8 (no cap),
#: pooled 0.2 s, overlap 0.5
TERMS = {"compute": 0.7, "memory_wkv": 0.8, "memory_act": 0.4, "memory_pool": 0.2, "memory_peak_GBps": 1000.0}
CAL = {"compute_efficiency": 0.7, "memory_efficiency": 0.8, "stream_overlap": 0.5, V.CAP_FIELD: None}


def row(rid: str, gpu: str, tp: int) -> V.Row:
    return V.Row(rid, "llama-3.1-70b", gpu, tp, tp, 1, 1, 1, "fp16", 1000, 1000, 8, "output_tokens_per_s", 1.0)


@pytest.mark.parametrize(
    ("form", "is_prefill", "expected"),
    [
        # 0.5 max(1, 1, 0.2) + 0.5 (1 + 1 + 0.2) + 0.5
        ("act-serial", 0.0, 2.1),
        # prefill: max(1, 1.5, 0.2); decode: 0.5 max(1, 1.5, 0.2) + 0.5 (1 + 1.5 + 0.2)
        ("prefill-roofline", 1.0, 1.5),
        ("prefill-roofline", 0.0, 2.1),
        # max(0.5 max(1, 1, 0.2) + 0.5 (1 + 1 + 0.2), 0.5)
        ("act-overlap", 0.0, 1.6),
    ],
)
def test_step_forms_compose_the_streams_as_documented(form, is_prefill, expected):
    assert float(step_forms._streams(form, {**TERMS, "is_prefill": is_prefill}, CAL)) == pytest.approx(expected)


def test_act_serial_without_overlap_is_the_model_and_the_patch_is_undone():
    """At o = 0 every stream adds in both forms, so the patched step must equal the model's on a
    real row; outside the context the validator is the model again."""
    r = row("x", "h100-sxm", 4)
    cal = {**calibration_for(r.gpu).model_dump(), "stream_overlap": 0.0}
    model = V.step_time(V.row_terms(r, 8).decode, cal)
    before = (V.row_terms, V.step_time, V.STEP_TERMS)
    with step_forms.patched("act-serial"):
        t = V.row_terms(r, 8).decode
        assert t["memory_wkv"] + t["memory_act"] == pytest.approx(t["memory_local"])
        assert t["memory_act"] > 0
        assert V.step_time(t, cal) == pytest.approx(model, rel=1e-12)
    assert (V.row_terms, V.step_time, V.STEP_TERMS) == before


def test_pcie_topology_changes_only_the_a100_pcie_rows_and_is_undone():
    before = V._system_of
    with pcie_topology.topology({"scale_up_domain": 4, "scale_out": "pcie-gen4-x16"}):
        assert V._system_of(row("p", "a100-pcie-80gb", 8), V.MODEL) == {
            "devices": 8, "scale_up_domain": 4, "scale_out": "pcie-gen4-x16"}
        assert V._system_of(row("s", "a100-sxm-80gb", 8), V.MODEL) == before(row("s", "a100-sxm-80gb", 8), V.MODEL)
    assert V._system_of is before


def test_the_ring_alternative_undoes_the_in_switch_all_reduce_at_tp_8_only():
    """Llama 70B decode at batch 8 on H100: 160 all-reduces of M = 8 x 8192 x 2 = 131,072 B and the
    logits all-gather, 7/8 x 8 x 128256 x 2 = 1,795,584 B. The model reduces the all-reduces of
    TP 8 in the NVSwitch at 0.82/0.61 M each (eq. 3.17a); the ``ring`` alternative sends the
    ring's 2 x 7/8 M. At TP 4 both are the ring. The module setting is restored after each
    evaluation (``validate.model_switches``)."""
    from codesign.model import network

    M, logits = 8 * 8192 * 2, 7 / 8 * 8 * 128256 * 2
    for tp, ratio in ((8, (160 * 1.75 * M + logits) / (160 * 0.82 / 0.61 * M + logits)), (4, 1.0)):
        r = row(f"t{tp}", "h100-sxm", tp)
        model = V.row_terms(r, 8).decode["net_bw"]
        ring = V.row_terms(r, 8, hopper_alternatives.ALTERNATIVES["ring"].variant).decode["net_bw"]
        assert model > 0 and ring == pytest.approx(model * ratio, rel=1e-12)
    assert network.IN_SWITCH_MIN_RANKS == 5


term_probes = _load("term_probes")


def test_term_probes_scale_their_term_once_on_their_rows_and_are_undone():
    """benchmarks/term_probes.py (VALIDATION.md §6.5): each probe scales one calibration-free term,
    once per cached row, on its rows only; the validator is restored on exit."""
    llama, mixtral = row("p1", "h100-sxm", 8), V.Row("p2", "mixtral-8x7b", "h100-sxm", 8, 8, 1, 1, 1, "fp16",
                                                     1000, 1000, 8, "output_tokens_per_s", 1.0)
    original = V.row_terms
    base = V.TermCache(V.MODEL)
    ref = {r.id: base.at(r, 8) for r in (llama, mixtral)}
    expected = {  # probe -> row -> (phase, term, factor)
        "moe-compute-1.3": {"p2": [("prefill", "compute", 1.3), ("decode", "compute", 1.3)]},
        "moe-compute-1.15": {"p2": [("prefill", "compute", 1.15), ("decode", "compute", 1.15)]},
        "prefill-activations-0.5": {"p1": [("prefill", "memory_local", 0.5)], "p2": [("prefill", "memory_local", 0.5)]},
        "prefill-links-0.5": {"p1": [("prefill", "net_bw", 0.5)], "p2": [("prefill", "net_bw", 0.5)]},
    }
    for name, changes in expected.items():
        with term_probes.probing(term_probes.PROBES[name]):
            cache = V.TermCache(V.MODEL)
            for r in (llama, mixtral):
                t = cache.at(r, 8)
                assert cache.at(r, 8) is t  # cached: the change is applied once
                scaled = {(ph, k): f for ph, k, f in changes.get(r.id, [])}
                for ph in ("prefill", "decode"):
                    for k, v in getattr(ref[r.id], ph).items():
                        assert getattr(t, ph)[k] == pytest.approx(v * scaled.get((ph, k), 1.0), rel=1e-12), (name, r.id, ph, k)
    assert V.row_terms is original
    assert V.TermCache(V.MODEL).at(llama, 8).prefill == ref["p1"].prefill


def test_trtllm_bench_engine_limits_by_hand():
    """trtllm-bench's tuning heuristic for Llama 70B FP16 at TP 2 on A100 80GB, 1000/1000 (by hand):
    engine 70,553,706,496 x 2 B = 131.42 GiB of 160 GiB; KV per token 2 x 80 x 8 x 128 x 2 B =
    327,680 B = 3.0518e-4 GiB; requests (160 - 131.42) x 0.95 / 3.0518e-4 / 2000 = 44.5 -> max batch
    64 (the floor), tokens per iteration 44.5 x 2 = 89 -> 2,048 (the floor). Mixtral FP8 at TP 8 on
    H200 (141 GiB), 128/4096: (1128 - 43.495) x 0.95 / (2 x 32 x 8 x 128 x 1 / 2^30) / 4224 = 3,996.2
    requests -> 4,096 (multiple of 256), tokens 3,996.2 x (1 + 128/4096) = 4,121 -> 4,608."""
    r = V.Row("e", "llama-3.1-70b", "a100-sxm-80gb", 2, 2, 1, 1, 1, "fp16", 1000, 1000, None, "output_tokens_per_s", 1.0)
    requests, max_bs, max_tokens = term_probes.engine_limits(r)
    assert requests == pytest.approx((160 - 70_553_706_496 * 2 / 2**30) * 0.95 / (327_680 / 2**30) / 2000)
    assert round(requests, 1) == 44.5 and (max_bs, max_tokens) == (64, 2048)
    m = V.Row("e", "mixtral-8x7b", "h200-sxm", 8, 8, 1, 1, 1, "fp8", 128, 4096, None, "output_tokens_per_s", 1.0)
    requests, max_bs, max_tokens = term_probes.engine_limits(m)
    assert requests == pytest.approx((1128 - 46_702_792_704 / 2**30) * 0.95 / (65_536 / 2**30) / 4224)
    assert round(requests, 1) == 3996.2 and (max_bs, max_tokens) == (4096, 4608)


@pytest.mark.parametrize("batch", [16, 40])
def test_implied_batch_inverts_the_prediction(batch):
    """heldout_floor.implied_batch (§6.6): a row whose measurement is the model's own prediction at
    batch b implies b (Llama 70B FP16, 2 H100, 1000/1000, an offline row), and one between the
    predictions at b and b + 1 lies between them; the bisection is on the model's own step times."""
    r = V.Row("x", "llama-3.1-70b", "h100-sxm", 2, 2, 1, 1, 1, "fp16", 1000, 1000, None, "output_tokens_per_s", 1.0)
    cal = calibration_for(r.gpu).model_dump()
    at = {b: V.recompose(V.row_terms(r, b), cal) for b in (batch, batch + 1)}
    exact = dataclasses.replace(r, value=at[batch])
    assert heldout_floor.implied_batch(exact, cal) == pytest.approx(batch, abs=1e-9)
    mid = dataclasses.replace(r, value=(at[batch] + at[batch + 1]) / 2)
    assert batch < heldout_floor.implied_batch(mid, cal) < batch + 1


def test_in_switch_two_steps_probe_by_hand():
    """term_probes' ``in-switch-2-steps`` (§6.5): Llama 70B at TP 8 on the H100 (NVSwitch reduces):
    80 layers x 2 all-reduces x 14 ring steps + 7 for the logits gather = 2,247 steps per stage step
    become 160 x 2 + 7 = 327; TP 4 (below NVLS's 5 ranks) and the A100 SXM (NVLink 3 reduces in a
    ring) keep theirs."""
    cases = {("h100-sxm", 8): (2247, 327), ("h100-sxm", 4): (160 * 6 + 3, 160 * 6 + 3), ("a100-sxm-80gb", 8): (2247, 2247)}
    for (gpu, tp), (before, after) in cases.items():
        r = row("q", gpu, tp)
        assert V.row_terms(r, 8).decode["collective_steps"] == before
        with term_probes.probing(term_probes.PROBES["in-switch-2-steps"]):
            t = V.row_terms(r, 8)
        assert t.decode["collective_steps"] == after and t.prefill["collective_steps"] == after, (gpu, tp)


def test_fp8_compute_probe_scales_only_fp8_rows():
    """term_probes' ``fp8-compute-1.15`` (§6.5): an FP8 row's compute stream 1.15x in both phases,
    a 16-bit row's untouched."""
    fp8 = V.Row("f8", "llama-3.1-70b", "h100-sxm", 2, 2, 1, 1, 1, "fp8", 1000, 1000, 8, "output_tokens_per_s", 1.0)
    fp16 = row("f16", "h100-sxm", 2)
    ref = {r.id: V.row_terms(r, 8) for r in (fp8, fp16)}
    with term_probes.probing(term_probes.PROBES["fp8-compute-1.15"]):
        got = {r.id: V.row_terms(r, 8) for r in (fp8, fp16)}
    for ph in ("prefill", "decode"):
        assert getattr(got["f8"], ph)["compute"] == pytest.approx(1.15 * getattr(ref["f8"], ph)["compute"], rel=1e-12)
        assert getattr(got["f16"], ph) == getattr(ref["f16"], ph)


def test_the_never_fitted_check_of_a_probe_is_the_validators_prediction():
    """term_probes.never_fitted_mape re-composes the never-fitted rows with each family's fitted
    values; given the shipped calibration's values it must be ``codesign validate``'s MAPE of
    that file (the model itself), to 1e-9."""
    res = {}
    for fam, chips in V.chip_families().items():
        if fam in ("hopper", "ampere", "ampere-pcie", "ada"):
            shipped = calibration_for(chips[0]).model_dump()
            res[fam] = {"chips": list(chips), "params": {k: v for k, v in shipped.items()
                                                          if k in V.CHIP_PARAMS and v is not None}}
    got, groups = term_probes.never_fitted_mape(res)
    report = V.run_validation(V.NEVER_FITTED)
    assert report.skipped == [] and len(report.rows) == 54
    assert got == pytest.approx(report.mape_pct, rel=1e-9)
    assert groups == pytest.approx({g: x["mape_pct"] for g, x in report.groups.items()}, rel=1e-9)
    assert term_probes.probe("moe-compute-1.25") is not None


def test_reserve_probes_move_the_batch_of_their_rows_by_hand():
    """term_probes' reserve forms (VALIDATION.md §6.7) on Llama 70B FP16 at TP 2 on two H100s,
    1000/1000, at hopper's fitted memory fields (u = 1, R = 7.75 GiB, f = 0.90), by hand: weights
    70,553,706,496 B per GPU, KV 2,000 tokens x 163,840 B = 327,680,000 B per sequence, memory
    80 GiB = 85,899,345,920 B. R = 7.75 GiB: 0.9 (85.899 - 8.322 - 70.554) GB / 0.32768 GB = 19.3
    -> 19. R = 4.25 GiB (3.5 less: ``reserve-16bit-3.5``, ``reserve-tp2-3.5``) and R = 1 + 6.75 / 2
    = 4.375 GiB (``reserve-over-tp``): 29.6 and 29.2 -> 29. The FP8 row at TP 1 keeps 7.75 GiB under
    the first two and 1 + 6.75 / 1 under the third; an A100 row keeps its own under the hopper-only
    ones (the memory fields passed are the same for every row here)."""
    r16 = V.Row("r16", "llama-3.1-70b", "h100-sxm", 2, 2, 1, 1, 1, "fp16", 1000, 1000, None, "output_tokens_per_s", 1.0)
    r8 = V.Row("r8", "llama-3.1-70b", "h100-sxm", 1, 1, 1, 1, 1, "fp8", 1000, 1000, None, "output_tokens_per_s", 1.0)
    a100 = V.Row("ra", "llama-3.1-70b", "a100-sxm-80gb", 2, 2, 1, 1, 1, "fp16", 1000, 1000, None, "output_tokens_per_s", 1.0)
    cache = V.TermCache(V.MODEL)
    mem = {"usable_memory_fraction": 1.0, "runtime_reserve_GiB": 7.75, "kv_cache_free_fraction": 0.9}
    fp = cache.footprint(r16)
    assert (fp.weights_B, fp.kv_per_sequence_B, fp.raw_capacity_B) == (70_553_706_496, 327_680_000, 80 * 2**30)
    base = {r.id: V.batch_from(r, cache.footprint(r), mem, None) for r in (r16, r8, a100)}
    assert base["r16"] == 19
    seen: dict[str, list[float]] = {}
    original = V.batch_from

    def spy(row, fp, mem, cap, **kw):
        seen.setdefault(row.id, []).append(mem["runtime_reserve_GiB"])
        return original(row, fp, mem, cap, **kw)

    V.batch_from = spy
    try:
        for name, reserves in {"reserve-16bit-3.5": {"r16": 4.25, "r8": 7.75, "ra": 7.75},
                               "reserve-tp2-3.5": {"r16": 4.25, "r8": 7.75, "ra": 7.75},
                               "reserve-over-tp": {"r16": 4.375, "r8": 7.75, "ra": 4.375},
                               "reserve-over-tp-hopper": {"r16": 4.375, "r8": 7.75, "ra": 7.75},
                               "reserve-pcie-as-sxm": {"r16": 7.75, "r8": 7.75, "ra": 7.75}}.items():
            seen.clear()
            with term_probes.probing(term_probes.probe(name)):
                got = {r.id: V.batch_from(r, cache.footprint(r), mem, None) for r in (r16, r8, a100)}
            assert {k: v[0] for k, v in seen.items()} == reserves, name
            assert got["r16"] == (19 if reserves["r16"] == 7.75 else 29) and got["r8"] == base["r8"], name
            # the A100 80GB has the same 80 GiB and the same weights per GPU: 19, or 29 at 4.375 GiB
            assert got["ra"] == (19 if reserves["ra"] == 7.75 else 29) and base["ra"] == 19, name
            assert V.batch_from is spy  # restored to what it was
    finally:
        V.batch_from = original
    pcie = V.Row("rp", "llama-3.1-70b", "a100-pcie-80gb", 2, 2, 1, 1, 1, "fp16", 1000, 1000, None, "output_tokens_per_s", 1.0)
    sxm_GiB = term_probes._a100_sxm_reserve_GiB()  # the shipped A100 SXM reserve (2.5 GiB at fix 16)
    with term_probes.probing(term_probes.probe("reserve-pcie-as-sxm")):
        # 0.9 (85.899 GB - R - 70.554 GB) / 0.32768 GB: at R = 2.5 GiB 34.8 -> 34 (35 at 2.25 GiB)
        expected = math.floor(0.9 * (80 * 2**30 - sxm_GiB * 2**30 - 70_553_706_496) / 327_680_000)
        assert V.batch_from(pcie, cache.footprint(pcie), {**mem, "runtime_reserve_GiB": 6.75}, None) == expected


def test_kv_read_probe_scales_the_decode_kv_bytes_by_hand():
    """``kv-read-1.2``: Llama 70B FP16 at TP 8 on the H100, 1000/1000, 8 sequences: the decode step
    reads 8 x 1,500 tokens x 327,680 B and writes 8 x 327,680 B of KV cache, over 8 KV shards:
    491,847,680 B per GPU; its local-memory stream grows by 0.2 x that / 3,350 GB/s. Nothing else
    changes."""
    r = row("k", "h100-sxm", 8)
    ref = V.row_terms(r, 8)
    with term_probes.probing(term_probes.probe("kv-read-1.2")):
        t = V.row_terms(r, 8)
    kv = (8 * 1500 * 327_680 + 8 * 327_680) / 8
    assert kv == 491_847_680
    assert t.decode["memory_local"] - ref.decode["memory_local"] == pytest.approx(0.2 * kv / 3350e9, rel=1e-12, abs=0)
    assert t.prefill == ref.prefill
    assert {k: v for k, v in t.decode.items() if k != "memory_local"} == {k: v for k, v in ref.decode.items() if k != "memory_local"}
    # three stages of TP 4 (12 GPUs): a stage step carries 8/3 sequences over the slowest stage's
    # ceil(80 / 3) = 27 of the 80 layers, each GPU 1/4 of the KV heads:
    # 27/80 x 8/3 x 1,501 x 327,680 B / 4 = 110,665,728 B per GPU
    r3 = V.Row("k3", "llama-3.1-70b", "h100-sxm", 12, 4, 3, 1, 1, "fp16", 1000, 1000, 8, "output_tokens_per_s", 1.0)
    ref3 = V.row_terms(r3, 8)
    assert ref3.evaluated["decode_step.bytes_kv_local"] == pytest.approx(110_665_728, rel=1e-12, abs=0)
    with term_probes.probing(term_probes.probe("kv-read-1.2")):
        t3 = V.row_terms(r3, 8)
    assert t3.decode["memory_local"] - ref3.decode["memory_local"] == pytest.approx(0.2 * 110_665_728 / 3350e9, rel=1e-12, abs=0)


def test_gemm_roofline_hides_the_weights_under_the_compute_and_is_undone():
    """``gemm-roofline``: a step of compute 1.0 s and local memory 1.5 s (weights 0.6 s of it) at
    o = 0 takes 1.5 + 1.0 - min(1.0, 0.6) = 1.9 s (the model's 2.5 s less the weights); at o = 0.5,
    0.5 x 1.5 + 0.5 x (2.5 - 0.6) = 1.7 s. A row's weights term, by hand for Llama 70B FP16 at TP 8
    decoding 8 sequences: 70,553,706,496 parameters less the 128,256 x 8,192 embedding table but its
    8 gathered rows, x 2 B, over 8 GPUs = 17,375,774,720 B at the H100's 3,350 GB/s; prefill (1,000
    tokens x 8 gather 8,000 rows) 17,375,840,256 B. Restored on exit."""
    terms = {"compute": 0.7, "memory_local": 1.2, "memory_pool": 0.0, "net_bw": 0.0, "net_latency": 0.0, "layers": 0.0,
             "collective_steps": 0.0, "sequences": 0.0, "memory_peak_GBps": 1000.0, "eight_bit": 0.0, "weights": 0.48}
    cal = {"compute_efficiency": 0.7, "memory_efficiency": 0.8, "network_efficiency": 1.0, "layer_overhead_us": 0.0,
           "collective_step_latency_us": 0.0, V.CAP_FIELD: None}
    original = (V.step_time, V.STEP_TERMS, V.row_terms)
    with term_probes.probing(term_probes.probe("gemm-roofline")):
        assert "weights" in V.STEP_TERMS
        assert float(V.step_time(terms, {**cal, "stream_overlap": 0.0})) == pytest.approx(1.9, rel=1e-12)
        assert float(V.step_time(terms, {**cal, "stream_overlap": 0.5})) == pytest.approx(1.7, rel=1e-12)
        t = V.row_terms(row("g", "h100-sxm", 8), 8)
    assert (V.step_time, V.STEP_TERMS, V.row_terms) == original
    decode_B = (70_553_706_496 - 128_256 * 8192 + 8 * 8192) * 2 // 8
    assert decode_B == 17_375_774_720
    assert t.decode["weights"] == pytest.approx(decode_B / 3350e9, rel=1e-12, abs=0)
    assert t.prefill["weights"] == pytest.approx((decode_B + 7992 * 8192 * 2 // 8) / 3350e9, rel=1e-12, abs=0)
    assert 0 < t.decode["weights"] < t.decode["memory_local"]


def test_replicated_activation_probes_remove_the_whole_tensor_traffic_by_hand():
    """``replicated-activations-0``: Llama 70B FP16 at TP 8 moves 20 h per layer and 4 h per step
    whole on every rank: (20 x 80 + 4) x 8,192 = 13,139,968 elements, 26,279,936 B per token. At 8
    sequences the decode step carries 210,239,488 B of it per GPU, the prefill (1,000 tokens each)
    210,239,488,000 B; the probe takes them off the local-memory stream at the H100's 3,350 GB/s;
    the prefill-only probe leaves the decode step alone. Restored on exit."""
    r = row("a", "h100-sxm", 8)
    ref = V.row_terms(r, 8)
    per_token = (20 * 80 + 4) * 8192 * 2
    assert per_token == 26_279_936
    assert ref.evaluated["decode_step.bytes_act_replicated_local"] == pytest.approx(8 * per_token, rel=1e-12, abs=0)
    assert ref.evaluated["prefill_step.bytes_act_replicated_local"] == pytest.approx(8_000 * per_token, rel=1e-12, abs=0)
    original = V.row_terms
    with term_probes.probing(term_probes.probe("replicated-activations-0")):
        t = V.row_terms(r, 8)
    with term_probes.probing(term_probes.probe("prefill-replicated-activations-0.5")):
        half = V.row_terms(r, 8)
    assert V.row_terms is original
    assert ref.decode["memory_local"] - t.decode["memory_local"] == pytest.approx(210_239_488 / 3350e9, rel=1e-9)
    assert ref.prefill["memory_local"] - t.prefill["memory_local"] == pytest.approx(210_239_488_000 / 3350e9, rel=1e-9)
    assert ref.prefill["memory_local"] - half.prefill["memory_local"] == pytest.approx(0.5 * 210_239_488_000 / 3350e9,
                                                                                       rel=1e-9)
    assert half.decode == ref.decode


tp_scaling = _load("tp_scaling")
fit_objectives = _load("fit_objectives")


def test_tp_scaling_growth_of_the_cost_per_gpu_by_hand():
    """4 GPUs at 1,000 tokens/s cost 4 ms of GPU time per output token; 8 at 1,600, 5 ms: +25 %.
    A scenario needs two TP degrees a factor 2 apart; PP, multi-node and fixed-concurrency rows are
    left out; ISL 2,048 / OSL 128 is prefill-heavy, 128 / 2,048 is not."""
    assert tp_scaling.gpu_seconds_per_token(1000.0, 4) == 0.004
    assert tp_scaling.growths({4: 0.004, 8: 0.005}) == pytest.approx({"4->8": 0.25}, rel=1e-12)
    assert tp_scaling.growths({2: 1.0, 8: 2.0}) == {}

    def rep(rid, tp, measured, predicted, *, isl=2048, osl=128, pp=1, gpus=None, conc=None):
        return {"id": rid, "model": "llama-3.1-70b", "gpu": "h100-sxm", "precision": "fp8", "isl": isl, "osl": osl,
                "tp": tp, "pp": pp, "num_gpus": gpus or tp * pp, "metric": "output_tokens_per_s", "concurrency": conc,
                "measured": measured, "predicted": predicted, "batch": 100}

    got = tp_scaling.scenarios([rep("a", 4, 1000.0, 1100.0), rep("b", 8, 1600.0, 1600.0),
                                rep("c", 2, 900.0, 900.0, pp=2), rep("d", 2, 500.0, 500.0, conc=8),
                                rep("e", 4, 800.0, 800.0, isl=128, osl=2048)])
    key = ("llama-3.1-70b", "h100-sxm", "fp8", 2048, 128)
    assert list(got) == [key]  # 128/2048 has one TP degree; the PP and concurrency rows are not counted
    s = got[key]
    assert s["prefill_heavy"] and s["family"] == "hopper"
    assert s["growth_measured"] == pytest.approx({"4->8": 0.25}, rel=1e-12)
    # predicted: 4 / 1,100 -> 8 / 1,600 s per token: 5.5 / 5 - 1 = +37.5 %
    assert s["growth_predicted"] == pytest.approx({"4->8": 0.375}, rel=1e-12)
    med = tp_scaling.medians(got)
    assert med["llama-3.1-70b|hopper|4->8"]["n"] == 1
    # 128/2048 at two TP degrees is a scenario, not a prefill-heavy one; an attention-DP row, a row
    # predicted 0 (does not fit) and a row with data parallelism are not counted
    more = tp_scaling.scenarios([rep("e", 4, 800.0, 800.0, isl=128, osl=2048), rep("f", 8, 1200.0, 1000.0, isl=128, osl=2048),
                                 rep("g", 2, 300.0, 300.0), rep("h", 4, 1000.0, 1000.0, isl=500, osl=2000),
                                 rep("i", 8, 1000.0, 0.0, isl=500, osl=2000), rep("j", 4, 900.0, 900.0, isl=5000, osl=500),
                                 rep("k", 4, 900.0, 900.0, isl=5000, osl=500, gpus=8)],
                                attention_dp_ids=frozenset({"g"}))
    assert list(more) == [("llama-3.1-70b", "h100-sxm", "fp8", 128, 2048)]
    assert not more[("llama-3.1-70b", "h100-sxm", "fp8", 128, 2048)]["prefill_heavy"]
    assert tp_scaling.medians(more) == {}


def test_prefill_overhead_of_a_row_is_the_models_where_the_prediction_is_exact():
    """Where predicted = measured the measured overhead equals the modelled one; where the model is
    twice too fast, the measured prefill is 2 x (prefill + decode) - decode."""
    r = row("o", "h100-sxm", 8)
    t = V.row_terms(r, 8)
    cal = calibration_for("h100-sxm").model_dump()
    pre = float(V.step_time(t.prefill, cal))
    dec = 999 * float(V.step_time(t.decode, cal))
    comp = float(t.prefill["compute"] / cal["compute_efficiency"])
    model_us, measured_us = tp_scaling.prefill_overhead_us(r, {"batch": 8, "predicted": 5.0, "measured": 5.0})
    assert model_us == pytest.approx(1e6 * (pre - comp) / 8000, rel=1e-12)
    assert measured_us == pytest.approx(model_us, rel=1e-9)
    _, fast = tp_scaling.prefill_overhead_us(r, {"batch": 8, "predicted": 10.0, "measured": 5.0})
    assert fast == pytest.approx(1e6 * (2 * (pre + dec) - dec - comp) / 8000, rel=1e-9)


def test_fit_objectives_by_hand_and_the_fit_restored():
    """Errors +10 % and +100 %: MAPE 55, capped at 25 (10 + 25) / 2 = 17.5, log |ln 1.1| + |ln 2|
    over 2 = 39.42 points. ``held-engine-fields`` holds the overlap and the per-layer overhead at
    0; the patched fit is undone on exit; an unknown name or a cap of 0 is refused."""
    import numpy as np

    p, m = np.array([1.1, 2.0]), np.array([1.0, 1.0])
    assert fit_objectives.objective("mape")(p, m) == pytest.approx(55.0, rel=1e-12)
    assert fit_objectives.objective("capped-25")(p, m) == pytest.approx(17.5, rel=1e-12)
    assert fit_objectives.objective("log")(p, m) == pytest.approx(50 * (0.09531017980432493 + 0.6931471805599453),
                                                                   rel=1e-12)
    original = V.fit_stack
    with fit_objectives.fitting_with("held-engine-fields") as variant:
        assert variant.fixed_values == {"stream_overlap": 0.0, "layer_overhead_us": 0.0}
        assert V.fit_stack is not original
    with fit_objectives.fitting_with("mape") as variant:
        assert variant is V.MODEL and V.fit_stack is original
    assert V.fit_stack is original
    for bad in ("median", "capped-0"):
        with pytest.raises(ValueError):
            fit_objectives.objective(bad)


def test_a_fit_under_another_objective_minimises_it_and_keeps_the_stacks_terms():
    """A stack whose first row is predicted at 2 x the compute efficiency and whose second is 200 %
    off whatever the calibration: the capped objective's minimum is at efficiency 0.5, (0 + 25) / 2
    = 12.5 points, which the patched fit returns (the stack's own MAPE there is 100); the wrapper
    hands the fit the stack's terms (``fits``) and the held-out figure stays the stack's MAPE."""
    import numpy as np

    class Stack:
        rows = (row("s1", "h100-sxm", 1), row("s2", "h100-sxm", 1))
        measured = np.array([1.0, 1.0])
        fits = np.array([True, True])

        def predict(self, cal, how=V.MODEL):
            return np.array([2.0 * cal["compute_efficiency"], 3.0])

        def mape(self, cal, how=V.MODEL):
            return float(np.mean(np.abs(self.predict(cal, how) / self.measured - 1.0)) * 100.0)

    base = calibration_for("h100-sxm").model_dump()
    stack = Stack()
    with fit_objectives.fitting_with("capped-25") as variant:
        cal, value = V.fit_stack(stack, base, variant)
        assert fit_objectives._Objective(stack, fit_objectives.objective("capped-25")).fits is stack.fits
    assert value == pytest.approx(12.5, abs=1e-6)
    assert cal["compute_efficiency"] == pytest.approx(0.5, abs=1e-4)
    assert stack.mape(cal) == pytest.approx(100.0, abs=1e-4)


def test_replicated_activations_in_l2_by_hand():
    """Half the H100's 50 MiB L2 is 26,214,400 B: exactly 1,600 tokens of Llama 70B's 8,192-wide
    16-bit hidden state. A decode step of 1,600 sequences keeps its whole-tensor activations in L2
    (they leave the local-memory stream), one of 1,601 does not; a prefill of 8 x 1,000 tokens
    (131,072,000 B per tensor) does not either. A row of two pipeline stages is refused."""
    r = row("l2", "h100-sxm", 8)
    probe = term_probes.probe("replicated-activations-in-l2")
    assert 1600 * 8192 * 2 == 26_214_400 == 50 * 2**20 // 2
    for batch, kept in ((1600, False), (1601, True)):
        ref = V.row_terms(r, batch)
        with term_probes.probing(probe):
            t = V.row_terms(r, batch)
        rep = ref.evaluated["decode_step.bytes_act_replicated_local"]
        assert rep == pytest.approx(batch * 26_279_936, rel=1e-12)
        moved = ref.decode["memory_local"] - t.decode["memory_local"]
        assert moved == (0.0 if kept else pytest.approx(rep / 3350e9, rel=1e-9))
        assert t.prefill == ref.prefill
    pp2 = V.Row("l2p", "llama-3.1-70b", "h100-sxm", 8, 4, 2, 1, 1, "fp16", 1000, 1000, 8, "output_tokens_per_s", 1.0)
    with term_probes.probing(probe), pytest.raises(ValueError, match="PP 1"):
        V.row_terms(pp2, 8)


def test_engine_table_limits_and_the_token_probes_swap_the_rows_budget():
    """The engine table (VALIDATION.md §6.9): Llama 70B at TP 2 has (256, 1,024) in general and
    (2,048, 1,024) for a 4,096-token sequence (2048/2048); TP 8 (8,192, 16,384); Mixtral has no TP 8
    entry, and no row of two stages has one. The token probes charge the model's own extra
    iterations (eq. 4.19) with the row's budget swapped: the table's 1,024 for Llama 70B at TP 2
    (100 sequences at 2048/128: ceil(217,600 / 1,024) - 128 = 85 extra iterations), none for Mixtral
    at TP 8, where the shipped row assumes 8,192; restored on exit."""
    def r(tp, isl, osl, model="llama-3.1-70b", pp=1, tokens=None):
        return V.Row("e", model, "h100-sxm", tp * pp, tp, pp, 1, 1, "fp16", isl, osl, None, "output_tokens_per_s", 1.0,
                     engine_max_tokens=tokens)

    assert term_probes.engine_table_limits(r(2, 1000, 1000)) == (256, 1024)
    assert term_probes.engine_table_limits(r(2, 2048, 2048)) == (2048, 1024)
    assert term_probes.engine_table_limits(r(8, 128, 128)) == (8192, 16384)
    assert term_probes.engine_table_limits(r(8, 128, 128, "mixtral-8x7b")) is None
    assert term_probes.engine_table_limits(r(4, 128, 128, pp=2)) is None

    def extra(row, batch):
        return V.row_terms(row, batch).evaluated.get("prefill_step.extra_iterations", 0.0)

    llama, mixtral = r(2, 2048, 128), r(8, 2048, 128, "mixtral-8x7b", tokens=8192)
    assert extra(llama, 100) == 0.0  # no budget on the row itself
    assert extra(mixtral, 1000) == math.ceil(1000 * 2176 / 8192) - 128 == 138
    with term_probes.probing(term_probes.probe("engine-table-tokens")):
        assert extra(llama, 100) == 85
        assert extra(mixtral, 1000) == 0.0
    assert extra(llama, 100) == 0.0 and extra(mixtral, 1000) == 138

def test_engine_table_tokens_charge_each_extra_iteration_a_steps_fixed_cost_by_hand():
    """``engine-table-tokens`` on Llama 70B FP16 at TP 4 on H100s, 2048/128, 100 sequences (1,024
    tokens per iteration: ceil(217,600 / 1,024) - 128 = 85 extra iterations, by the model's eq.
    4.19). Each pays the decode step's weights, (70,553,706,496 - 128,256 x 8,192 + 100 x 8,192) x
    2 B / 4 = 34,751,926,272 B per GPU at 3,350 GB/s, its 2 x 80 x 2 (4 - 1) + 3 = 963 ring steps
    (two all-reduces per layer, the logits all-gather) and its 80 layers, added to the prefill step;
    the decode step is unchanged."""
    r = V.Row("t", "llama-3.1-70b", "h100-sxm", 4, 4, 1, 1, 1, "fp16", 2048, 128, None, "output_tokens_per_s", 1.0)
    ref = V.row_terms(r, 100)
    with term_probes.probing(term_probes.probe("engine-table-tokens")):
        t = V.row_terms(r, 100)
    weights_B = ref.evaluated["decode_step.bytes_weights_local"]
    assert weights_B == pytest.approx(34_751_926_272, rel=1e-12)
    assert ref.decode["collective_steps"] == 963 and ref.decode["layers"] == 80
    assert t.evaluated["prefill_step.extra_iterations"] == 85
    assert t.prefill["memory_local"] - ref.prefill["memory_local"] == pytest.approx(85 * 34_751_926_272 / 3350e9,
                                                                                    rel=1e-9)
    assert t.prefill["collective_steps"] - ref.prefill["collective_steps"] == 85 * 963
    assert t.prefill["layers"] - ref.prefill["layers"] == 85 * 80
    assert t.prefill["net_latency"] - ref.prefill["net_latency"] == pytest.approx(85 * ref.decode["net_latency"],
                                                                                  rel=1e-9)
    assert t.prefill["compute"] == ref.prefill["compute"] and t.decode == ref.decode


def test_engine_heuristic_tokens_charge_only_beyond_the_heuristics_budget():
    """``engine-heuristic-tokens``: Llama 70B FP8 at TP 8 on H100s, 2048/128, gets 28,672 tokens per
    iteration from trtllm-bench's heuristic: 1,400 sequences need ceil(1,400 x 2,176 / 28,672) = 107
    iterations, fewer than 128 (nothing charged); 2,000 need ceil(151.79) = 152, 24 more."""
    r = V.Row("h", "llama-3.1-70b", "h100-sxm", 8, 8, 1, 1, 1, "fp8", 2048, 128, None, "output_tokens_per_s", 1.0)
    assert term_probes.engine_limits(r)[2] == 28_672
    for batch, extra in ((1400, 0), (2000, 24)):
        ref = V.row_terms(r, batch)
        with term_probes.probing(term_probes.probe("engine-heuristic-tokens")):
            t = V.row_terms(r, batch)
        assert t.prefill["layers"] - ref.prefill["layers"] == extra * 80

def test_engine_table_batch_caps_the_batch_and_is_undone():
    """``engine-table-batch``: where the memory rule would admit 5,000 sequences, the engine of
    Llama 70B at TP 2 takes 256 (2,048 at 2048/2048), Mixtral at TP 8 (no entry) keeps them."""
    rows = {
        "a": V.Row("a", "llama-3.1-70b", "h200-sxm", 2, 2, 1, 1, 1, "fp8", 128, 128, None, "output_tokens_per_s", 1.0),
        "b": V.Row("b", "llama-3.1-70b", "h200-sxm", 2, 2, 1, 1, 1, "fp8", 2048, 2048, None, "output_tokens_per_s", 1.0),
        "c": V.Row("c", "mixtral-8x7b", "h200-sxm", 8, 8, 1, 1, 1, "fp8", 128, 128, None, "output_tokens_per_s", 1.0),
    }
    original = V.batch_from
    V.batch_from = lambda row, fp, mem, cap, **kw: 5000
    try:
        with term_probes.probing(term_probes.probe("engine-table-batch")):
            got = {k: V.batch_from(row, None, None, None) for k, row in rows.items()}
        assert V.batch_from(rows["a"], None, None, None) == 5000  # restored
    finally:
        V.batch_from = original
    assert got == {"a": 256, "b": 2048, "c": 5000}


def test_rows_weighted_mape_by_hand():
    """Two groups: 10 held-out rows at 5 % and 30 at 9 %: (50 + 270) / 40 = 8 %; fit rows 20 at 4 %
    and 20 at 6 %: 5 %."""
    fitted = {"a": {"n_held_out": 10, "held_out_mape_pct": 5.0, "n_fit": 20, "fit_mape_pct": 4.0},
              "b": {"n_held_out": 30, "held_out_mape_pct": 9.0, "n_fit": 20, "fit_mape_pct": 6.0}}
    assert V.rows_weighted_mape(fitted) == pytest.approx(8.0, rel=1e-12)
    assert V.rows_weighted_mape(fitted, "fit") == pytest.approx(5.0, rel=1e-12)
