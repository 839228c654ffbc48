"""The logits' memory traffic (model.md eq. 2.15l, VALIDATION.md §5.13): every step moves each
sequence's V logits through DRAM on the way from the LM head to the sampled token.

Hand-derived figures (TensorRT-LLM's path, B per vocabulary entry: LM head writes 16 bit 2, the
cast to float32 reads 2 and writes 4, the penalty layer copies 4 + 4, sampling reads 4 = 20):

    Llama 3.1 8B, V = 128,256     one sequence 20 x 128,256 = 2,565,120 B per step
    batch 1,000                   2,565,120,000 B
    TP 2, 64 sequences            whole on both ranks after the gather: 64 x 2,565,120 =
                                  164,167,680 B per rank, decode and prefill alike
    Mixtral 8x7B, V = 32,000      640,000 B per sequence
"""

from __future__ import annotations

import pytest

from codesign import validate as V
from codesign.model import workload
from codesign.model.schedule import schedule_table
from codesign.model.workload import load_workload, step_costs


def test_logits_bytes_per_sequence_by_hand():
    assert workload.LOGITS_BYTES_PER_ENTRY == 2 + (2 + 4) + (4 + 4) + 4 == 20
    w = load_workload("llama-3.1-8b")
    c = step_costs(w, batch=1000, new_tokens=1, context=500, weight_bytes_per_param=2, kv_bytes_per_element=2)
    assert float(c.bytes_logits) == 2_565_120_000
    # prefill: only the last prompt token of each sequence is sampled, so the same per sequence
    p = step_costs(w, batch=1000, new_tokens=2048, context=0, weight_bytes_per_param=2, kv_bytes_per_element=2)
    assert float(p.bytes_logits) == 2_565_120_000
    m = step_costs(load_workload("mixtral-8x7b"), batch=1, new_tokens=1, context=0, weight_bytes_per_param=2,
                   kv_bytes_per_element=2)
    assert float(m.bytes_logits) == 640_000


def _local_bytes(variant: V.Variant) -> dict[str, float]:
    r = V.Row("l", "llama-3.1-8b", "h100-sxm", 2, 2, 1, 1, 1, "fp16", 1000, 1000, 64, "output_tokens_per_s", 1.0)
    with V.model_switches(variant):
        t = schedule_table(V.row_instance(r, 64), "main")
    return {ph: float(t.features[f"{ph}.bytes_local"][0]) for ph in ("prefill", "decode")}


def test_every_tp_rank_moves_all_logits_and_the_ablation_removes_them():
    on = _local_bytes(V.MODEL)
    off = _local_bytes(V.Variant("x", no_logits_traffic=True))
    for ph in ("prefill", "decode"):
        assert on[ph] - off[ph] == pytest.approx(164_167_680, rel=1e-12), ph
    # the switch is restored after the ablation
    assert workload.LOGITS_TRAFFIC is True
    assert _local_bytes(V.MODEL) == on


def test_the_fix_chain_adds_the_logits_traffic_before_the_sockets():
    """Fix 13 comes before fix 14 (the PCIe server's sockets), fix 16 (the engine's sequence
    slots), fix 17 (the stream overlap held at 0) and fix 19 (the engine's token budget), the last
    of the chain (fix 18, withdrawn with it, is a proposal): the stage before it ("+request-cap")
    undoes all five, its own stage ("+logits-memory") the other four, and its ablation alone is a
    proposal of its own."""
    assert V.FIX_ORDER[-5:] == (("+logits-memory", "logits-memory"), ("+sockets", "sockets"),
                                ("+engine-slots", "engines"), ("+held-overlap", "held-overlap"),
                                ("model", "token-budget"))
    stages = {v.name: v for v in V.PROPOSALS}
    engines = {"no_engine_state": True, "no_engine_cap": True}
    fitted = {"fit_overlap": True, "no_token_budget": True}
    assert stages["+request-cap"] == V.Variant("+request-cap", no_logits_traffic=True, one_socket=True, **engines,
                                               **fitted)
    assert stages["+logits-memory"] == V.Variant("+logits-memory", one_socket=True, **engines, **fitted)
    assert stages["+sockets"] == V.Variant("+sockets", **engines, **fitted)
    assert stages["+engine-slots"] == V.Variant("+engine-slots", **fitted)
    assert stages["+held-overlap"] == V.Variant("+held-overlap", no_token_budget=True)
    assert stages["model-with-8-bit"] == V.Variant("model-with-8-bit", fit_8bit=True)
    assert not V.MODEL.fit_8bit
    assert stages["model-without-token-budget"] == V.Variant("model-without-token-budget", no_token_budget=True)
    assert stages["model-without-engine-slots"] == V.Variant("model-without-engine-slots", **engines)
    assert stages["model-without-logits-memory"] == V.Variant("model-without-logits-memory", no_logits_traffic=True)
    assert not V.MODEL.no_logits_traffic and not V.MODEL.one_socket


def test_the_logits_sit_on_the_last_stage_whole():
    """TP 1, PP 2, 64 sequences of Llama 8B: the last stage samples a micro-batch of 32 sequences,
    32 x 128,256 x 20 B = 82,083,840 B per step, not scaled by the stage's share of the layers."""
    r = V.Row("l", "llama-3.1-8b", "h100-sxm", 2, 1, 2, 1, 1, "fp16", 1000, 1000, 64, "output_tokens_per_s", 1.0)
    got = {}
    for v in (V.MODEL, V.Variant("x", no_logits_traffic=True)):
        with V.model_switches(v):
            got[v.name] = float(schedule_table(V.row_instance(r, 64), "main").features["decode.bytes_local"][0])
    assert got["model"] - got["x"] == pytest.approx(82_083_840, rel=1e-12)
