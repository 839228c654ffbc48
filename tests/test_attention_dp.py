"""Attention data parallelism (model.md §4.8): the attention side of every layer runs on each rank's
own sequences with whole weights; the MLPs and experts stay split over the TP group.

Hand-derived figures (Qwen3-235B-A22B: 94 layers, hidden 4096, 64 query and 4 KV heads of 128,
vocabulary 151,936, untied; FP8 weights and KV cache; 8 H200 at TP 8; 64 sequences of 1000/1000):

    KV per token              94 x 2 x 4 x 128 x 1 B = 96,256 B; a sequence at 2000 tokens 192,512,000 B
    TP 8                      4 KV heads over 8 ranks: each head on 2 ranks, 1/4 of the cache per rank:
                              64 x 192,512,000 / 4 = 3,080,192,000 B
    attention DP              each rank its own 8 sequences: 64 x 192,512,000 / 8 = 1,540,096,000 B
    whole on every rank       attention 94 x (4096 x 8192 + 2 x 4096 x 512 + 8192 x 4096 + 2 x 128)
                              = 6,702,521,856; norms 94 x 2 x 4096 + 4096 = 774,144; routers
                              94 x 4096 x 128 = 49,283,072 (1 B each) -> 6,752,579,072 B; embedding
                              and LM head 2 x 151,936 x 4096 x 2 B = 2,489,319,424 B; the extra over
                              TP 8: (6,752,579,072 + 2,489,319,424) x 7/8 = 8,086,661,184 B
    decode collectives, TP 8  message 64 x 4096 x 2 B = 524,288 B; all-reduce 2 x 7/8 of it =
                              917,504 B, 14 ring steps; two per layer: 188 x 917,504 =
                              172,490,752 B; logits all-gather 7/8 x 64 x 151,936 x 2 B =
                              17,016,832 B, 7 steps -> 189,507,584 B, 188 x 14 + 7 = 2,639 steps
    attention DP              one all-gather + one reduce-scatter per layer = one all-reduce's bytes
                              and steps, no logits gather: 94 x 917,504 = 86,245,376 B, 1,316 steps
"""

from __future__ import annotations

import pytest

from codesign.calibration.engine import evaluate_row, max_batch, row_instance, skip_reason
from codesign.calibration.rows import Row, read_rows
from codesign.errors import InputError
from codesign.kinds.grid.spec import load_instance
from codesign.model.schedule import schedule_table, structural_reason
from codesign.model.workload import load_workload
from codesign.paths import instances_dir


def qwen_row(adp: int, batch: int = 64, tp: int = 8) -> Row:
    return Row("q", "qwen3-235b-a22b", "h200-sxm", 8, tp, 1, tp, adp, "fp8", 1000, 1000, batch,
                 "output_tokens_per_s", 1.0)


def features(adp: int) -> tuple[dict, dict]:
    r = qwen_row(adp)
    m = evaluate_row(r, 64).workload_metrics["main"]
    t = schedule_table(row_instance(r, 64), "main")
    return m, {k: float(v[0]) for k, v in t.features.items()}


def test_attention_dp_partitions_the_kv_cache_and_replicates_the_attention_weights():
    m_tp, _ = features(1)
    m_dp, _ = features(8)
    assert m_tp["kv_per_device_B"] == 3_080_192_000
    assert m_dp["kv_per_device_B"] == 1_540_096_000
    assert m_dp["weights_per_device_B"] - m_tp["weights_per_device_B"] == 8_086_661_184


def test_attention_dp_halves_the_collectives_and_gathers_no_logits():
    _, f_tp = features(1)
    _, f_dp = features(8)
    assert f_tp["decode.bytes_scale_up"] == 189_507_584
    assert f_tp["decode.collective_steps"] == 2_639
    assert f_dp["decode.bytes_scale_up"] == 86_245_376
    assert f_dp["decode.collective_steps"] == 1_316


def test_attention_dp_keeps_the_flops_and_trades_weight_reads_for_kv_reads():
    """FLOPs per rank are the same split (own sequences x whole attention = all sequences x 1/TP).
    A decode step's local bytes change by three terms (hand-derived):
      weights read whole on every rank: (6,752,579,072 B body + 2 B x (151,936 + 64 gathered rows)
        x 4096 = 1,245,184,000 B ends) x 7/8 = 6,998,042,688 B more;
      KV cache: 64 x (1500 x 96,256 + 96,256) B = 9,246,736,384 B read and written, /4 under TP,
        /8 under attention DP: 1,155,842,048 B fewer;
      attention-side activations (9 h per layer and token, 4 h per step) on the rank's own 1/8:
        2 B x 64 x (9 x 4096 x 94 + 4 x 4096) x 7/8 = 389,939,200 B fewer;
      logits (eq. 2.15l) of the rank's own 1/8 of the sequences: 20 B x 151,936 x 64 x 7/8 =
        170,168,320 B fewer.
    Net at 64 sequences: attention DP streams 5,282,093,120 B more per step."""
    _, f_tp = features(1)
    _, f_dp = features(8)
    assert f_dp["decode.flops"] == pytest.approx(f_tp["decode.flops"], rel=1e-12)
    more = f_dp["decode.bytes_local"] - f_tp["decode.bytes_local"]
    assert more == pytest.approx(6_998_042_688 - 1_155_842_048 - 389_939_200 - 170_168_320, rel=1e-12)
    assert more == pytest.approx(5_282_093_120, rel=1e-12)


def test_structural_rules_of_attention_dp():
    w = load_workload("qwen3-235b-a22b")
    base = {"tp": 8, "pp": 1, "ep": 8, "batch": 64, "weights_tier": "local", "kv_tier": "local"}
    assert structural_reason(w, None, 8, False, {**base, "attention_dp": True}, 8) is None
    assert "tp > 1" in structural_reason(w, None, 8, False, {**base, "tp": 1, "ep": 1, "attention_dp": True}, 8)
    assert "multiple of tp x pp" in structural_reason(w, None, 8, False, {**base, "batch": 60, "attention_dp": True}, 8)


def test_validation_maps_attention_dp_over_the_whole_group_and_skips_a_partial_one():
    assert skip_reason(qwen_row(8)) is None
    assert qwen_row(8).batch_step == 8 and qwen_row(1).batch_step == 1
    why = skip_reason(qwen_row(2))
    assert why is not None and "part of the TP group" in why
    # the batch of an offline row is a multiple of TP x PP under attention DP
    r = Row("q", "qwen3-235b-a22b", "h200-sxm", 8, 8, 1, 8, 8, "fp8", 1000, 1000, None, "output_tokens_per_s", 1.0,
              num_requests=3000)
    assert max_batch(r).batch % 8 == 0


def test_attention_dp_is_an_optional_decision_with_a_boolean_domain(tmp_path):
    text = (instances_dir() / "dgx-llama70b-chip-choice.toml").read_text()
    assert "attention_dp" not in {d.key for d in load_instance("dgx-llama70b-chip-choice").decisions}
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("tp = [1, 2, 4, 8]\n", "tp = [1, 2, 4, 8]\nattention_dp = [0, 1]\n"))
    with pytest.raises(InputError, match="expected true or false"):
        load_instance(bad)


def test_the_named_instance_brute_force_equals_both_solvers_and_attention_dp_wins(solvers_match_brute_force):
    """dgx-qwen3-235b-attention-dp (1,344 designs): brute force over every design equals what HiGHS
    and CP-SAT prove optimal; its optimum runs attention DP, and the same space without the
    choice (attention tensor-parallel only) is strictly worse."""
    import tomllib

    from codesign.kinds.grid.space import brute_force
    from codesign.kinds.grid.spec import instance_from_data, load_instance
    from codesign.paths import instances_dir

    bf = solvers_match_brute_force(load_instance("dgx-qwen3-235b-attention-dp"))
    assert bf.design["attention_dp"] is True
    raw = tomllib.loads((instances_dir() / "dgx-qwen3-235b-attention-dp.toml").read_text())
    raw["workloads"][0]["decisions"]["attention_dp"] = [False]
    raw["baseline"]["attention_dp"] = False
    tp_only = brute_force(instance_from_data(raw))
    assert tp_only.objective < bf.objective


def _features(model: str, tp: int, pp: int, adp: bool, batch: int) -> tuple[dict, dict]:
    r = Row("x", model, "h200-sxm", 8, tp, pp, tp, tp if adp else 1, "fp8", 1000, 1000, batch,
              "output_tokens_per_s", 1.0)
    m = evaluate_row(r, batch).workload_metrics["main"]
    t = schedule_table(row_instance(r, batch), "main")
    return m, {k: float(v[0]) for k, v in t.features.items()}


def test_attention_dp_on_mla_partitions_the_latent_cache_and_keeps_dense_layers_data_parallel():
    """DeepSeek-V3 (61 layers: 3 dense, 58 MoE; MLA latent 512 + 64 rope per token and layer, FP8):
    KV per token 61 x 576 x 1 B = 35,136 B, 64 sequences at 2000 tokens 4,497,408,000 B, whole on
    every TP rank (the latent is shared by the heads) and 1/8 of it under attention DP:
    562,176,000 B. Decode ring steps: TP 8 2 x 61 x 14 + 7 = 1,715; attention DP only around the 58
    MoE blocks (the dense layers are data-parallel end to end, TensorRT-LLM's `_compute_mlp_tp_size`:
    "If using attention DP, the MLP also uses DP instead of TP"): 58 x 14 = 812. The host handles
    64 / 8 = 8 sequences per rank."""
    from codesign.model.workload import load_workload, param_counts

    m_tp, f_tp = _features("deepseek-v3", 8, 1, False, 64)
    m_dp, f_dp = _features("deepseek-v3", 8, 1, True, 64)
    assert m_tp["kv_per_device_B"] == 4_497_408_000
    assert m_dp["kv_per_device_B"] == 562_176_000
    assert (f_tp["decode.collective_steps"], f_dp["decode.collective_steps"]) == (1_715, 812)
    assert (f_tp["decode.sequences"], f_dp["decode.sequences"]) == (64, 8)
    pc = param_counts(load_workload("deepseek-v3"))
    whole = (pc.attention + pc.norms + pc.router + pc.dense_mlp + pc.shared_experts) * 1 + (pc.embedding + pc.lm_head) * 2
    assert m_dp["weights_per_device_B"] - m_tp["weights_per_device_B"] == pytest.approx(whole * 7 / 8, rel=1e-12)


def test_attention_dp_with_pipeline_stages_sends_each_ranks_own_share():
    """Qwen3-235B at TP 4, PP 2 (47 layers per stage), 64 sequences: micro-batch 32, message
    32 x 4096 x 2 B = 262,144 B. TP: 94 all-reduces of 2 x 3/4 of it (393,216 B, 6 steps) + the
    logits all-gather 3/4 x 32 x 151,936 x 2 B = 7,292,928 B (3 steps) + the stage send 262,144 B
    = 44,517,376 B, 567 ring steps. Attention DP: 47 MoE blocks x 393,216 B + each rank's own
    quarter of the send, 65,536 B = 18,546,688 B, 282 ring steps."""
    _, f_tp = _features("qwen3-235b-a22b", 4, 2, False, 64)
    _, f_dp = _features("qwen3-235b-a22b", 4, 2, True, 64)
    assert (f_tp["decode.bytes_scale_up"], f_tp["decode.collective_steps"]) == (44_517_376, 567)
    assert (f_dp["decode.bytes_scale_up"], f_dp["decode.collective_steps"]) == (18_546_688, 282)


def test_attention_dp_splits_sequences_not_heads_and_rejects_uneven_concurrency():
    w = load_workload("qwen3-235b-a22b")
    base = {"tp": 3, "pp": 1, "ep": 1, "batch": 63, "weights_tier": "local", "kv_tier": "local"}
    assert "attention heads" in structural_reason(w, None, 3, False, base, None)
    assert structural_reason(w, None, 3, False, {**base, "attention_dp": True}, None) is None
    r = Row("c", "qwen3-235b-a22b", "h200-sxm", 8, 8, 1, 8, 8, "fp8", 1000, 1000, 1, "output_tokens_per_s", 1.0)
    assert "does not split evenly" in skip_reason(r)
    assert skip_reason(Row(**{**r.__dict__, "concurrency": 64})) is None


def test_the_engine_batch_cap_applies_to_each_attention_dp_rank():
    """Each attention-DP rank runs its own executor with its own max_batch_size: a replica of 8
    ranks may hold 8 x 4096 sequences; without attention DP the replica holds 4096."""
    assert qwen_row(8).engine_cap(4096) == 8 * 4096
    assert qwen_row(1).engine_cap(4096) == 4096
    assert qwen_row(8).engine_cap(None) is None


def test_attention_dp_may_be_given_as_a_flag(tmp_path):
    """attention_dp = true reads as attention DP over the whole TP group (the degree = tp), false as 1."""
    import csv

    header = ["id", "model", "gpu", "num_gpus", "tp", "pp", "ep", "attention_dp", "precision", "isl", "osl",
              "concurrency", "metric", "value", "unit", "source"]
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for rid, flag in (("a", "true"), ("b", "False"), ("c", "maybe")):
            w.writerow([rid, "qwen3-235b-a22b", "h200-sxm", 8, 8, 1, 8, flag, "fp8", 1000, 1000, "",
                        "output_tokens_per_s", 1.0, "1/s", "x"])
    rows, bad = read_rows(path)
    assert {r.id: r.attention_dp for r in rows} == {"a": 8, "b": 1}
    assert bad == [{"id": "c", "reason": "malformed row: column attention_dp: 'maybe' is not an integer"}]
