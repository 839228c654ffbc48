"""The logits' memory traffic (model.md eq. 2.15l): every step moves each
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

from codesign.calibration.engine import row_instance
from codesign.calibration.rows import Row
from codesign.model import workload
from codesign.model.schedule import schedule_table
from codesign.model.step import step_costs
from codesign.model.workload import load_workload


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


def _logits_bytes(tp: int, pp: int) -> float:
    """A decode step's local bytes of Llama 8B FP16 at 64 sequences, 1000/1000, less its weight,
    KV-cache and activation bytes (eq. 2.15h-k: the whole-tensor part on every rank, the rest split
    over TP, the stage's share of the layers): what is left is the logits'."""
    r = Row("l", "llama-3.1-8b", "h100-sxm", tp * pp, tp, pp, 1, 1, "fp16", 1000, 1000, 64, "output_tokens_per_s", 1.0)
    f = schedule_table(row_instance(r, 64), "main").features
    c = step_costs(load_workload("llama-3.1-8b"), batch=64 / pp, new_tokens=1, context=1500,
                   weight_bytes_per_param=2, kv_bytes_per_element=2)
    frac = 16 / 32 if pp == 2 else 1.0
    act = (float(c.bytes_act_replicated) + float(c.bytes_act_sharded) / tp) * frac
    return float(f["decode.bytes_local"][0] - f["decode.bytes_weights_local"][0] - f["decode.bytes_kv_local"][0]) - act


def test_every_tp_rank_moves_all_logits():
    assert _logits_bytes(2, 1) == pytest.approx(164_167_680, rel=1e-9)


def test_the_logits_sit_on_the_last_stage_whole():
    """TP 1, PP 2, 64 sequences of Llama 8B: the last stage samples a micro-batch of 32 sequences,
    32 x 128,256 x 20 B = 82,083,840 B per step, not scaled by the stage's share of the layers."""
    assert _logits_bytes(1, 2) == pytest.approx(82_083_840, rel=1e-9)
