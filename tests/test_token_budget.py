"""The serving engine's token budget per iteration (model.md eq. 4.19): the
iterations it adds to a round, what each of them costs, the rows' budgets from the engine table,
and brute force = HiGHS = CP-SAT with a budget in the instance.

A round of n sequences runs OSL iterations statically (its prefill step and OSL - 1 decode steps);
with at most T tokens per iteration (chunked context) it needs ceil(n (ISL + OSL) / T). Llama 70B
at TP 2 with trtllm-bench's table budget of 1,024 tokens, 256 sequences at 2048/128: ceil(256 x
2,176 / 1,024) = 544 iterations, 416 beyond the round's 128. Each pays the decode step's weight
reads, layer overheads and TP ring steps again: at TP 2, 2 x 80 all-reduces of 2 (n - 1) = 2 ring
steps and the logits all-gather's n - 1 = 1, 321 steps.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from codesign.calibration.engine import row_instance
from codesign.calibration.rows import read_benchmark_engines, read_rows
from codesign.kinds.grid.spec import Instance, InstanceFile
from codesign.model.schedule import extra_iterations, schedule_table

OVERVIEW = "arthurrasmusson/TensorRT-LLM@e00d4e6564921307dd264b61fe1d46f116095e0e:docs/source/performance/perf-overview.md"


def _instance(workload: str, precision: str, isl: int, osl: int, decisions: dict, budget: int | None,
              chip: str = "h100-sxm", devices: int = 8) -> Instance:
    spec = {"name": "main", "workload": workload, "precision": precision, "phase": "both",
            "input_tokens": isl, "output_tokens": osl, "decisions": decisions}
    if budget is not None:
        spec["max_tokens_per_iteration"] = budget
    # NCCL's ring all-reduce, whose steps the expected figures count
    raw = {"name": "token-budget", "description": "t",
           "system": {"devices": devices, "scale_up_domain": 8, "allreduce": "nccl"},
           "hardware": {"family": "catalog", "chip": chip}, "workloads": [spec]}
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw)


def test_extra_iterations_by_hand():
    assert extra_iterations(256 * 2176, 128, 1024) == 416
    # a round whose tokens fit OSL iterations runs no more: 256 x 2,176 / 1,024 = 544 < 2,048
    assert extra_iterations(256 * 2176, 2048, 1024) == 0
    # one token over a whole number of iterations costs a whole iteration
    assert extra_iterations(1024 * 3 + 1, 1, 1024) == 3
    assert extra_iterations(10**9, 1, None) == 0


def test_each_extra_iteration_pays_the_decode_steps_weights_layers_and_ring_steps():
    decisions = {"tp": [2], "pp": [1], "batch": [256]}
    f = schedule_table(_instance("llama-3.1-70b", "fp16", 2048, 128, decisions, 1024), "main").features
    g = schedule_table(_instance("llama-3.1-70b", "fp16", 2048, 128, decisions, None), "main").features
    assert f["prefill.extra_iterations"][0] == 416
    assert g["decode.collective_steps"][0] == 2 * 80 * 2 + 1 == 321
    assert g["decode.layers"][0] == 80
    w = g["decode.bytes_weights_local"][0]
    assert f["prefill.bytes_local"][0] - g["prefill.bytes_local"][0] == pytest.approx(416 * w, rel=1e-12)
    assert f["prefill.collective_steps"][0] - g["prefill.collective_steps"][0] == 416 * 321
    assert f["prefill.steps_scale_up"][0] - g["prefill.steps_scale_up"][0] == 416 * g["decode.steps_scale_up"][0]
    assert f["prefill.layers"][0] - g["prefill.layers"][0] == 416 * 80
    # the round's FLOPs, link bytes and the decode step are the same: only per-iteration costs repeat
    for col in ("prefill.flops", "prefill.bytes_scale_up", "decode.bytes_local", "decode.collective_steps"):
        assert f[col][0] == g[col][0], col


def test_a_budget_the_round_never_reaches_changes_nothing():
    decisions = {"tp": [2], "pp": [1], "batch": [256]}
    f = schedule_table(_instance("llama-3.1-70b", "fp16", 128, 2048, decisions, 1024), "main").features
    g = schedule_table(_instance("llama-3.1-70b", "fp16", 128, 2048, decisions, None), "main").features
    assert f["prefill.extra_iterations"][0] == 0
    for col in ("prefill.bytes_local", "prefill.collective_steps", "prefill.layers"):
        assert f[col][0] == g[col][0], col


def test_attention_dp_ranks_count_their_own_sequences_against_their_own_budget():
    """Qwen3-235B FP8 at TP 8, 256 sequences, 20000/100, 2,048 tokens: tensor-parallel attention
    runs all 256 on one executor, ceil(256 x 20,100 / 2,048) - 100 = 2,413 extra iterations;
    attention DP gives each rank's executor 32, ceil(32 x 20,100 / 2,048) - 100 = 215."""
    inst = _instance("qwen3-235b-a22b", "fp8", 20000, 100,
                     {"tp": [8], "pp": [1], "ep": [8], "batch": [256], "attention_dp": [False, True]}, 2048)
    t = schedule_table(inst, "main")
    by_adp = {bool(a): float(x) for a, x in zip(t.decisions["attention_dp"], t.features["prefill.extra_iterations"],
                                                  strict=True)}
    assert by_adp == {False: 2413.0, True: 215.0}


def test_a_ranks_own_sequences_are_counted_exactly_at_any_tp():
    """Attention DP over 12 ranks, 768 sequences: each rank's own are 64 (768 x (1/12) in floating
    point is 64.00000000000001, whose ceiling counted one iteration too many). With 1000/1000 and
    128 tokens, ceil(64 x 2,000 / 128) = 1,000 iterations: none beyond OSL."""
    inst = _instance("qwen3-235b-a22b", "fp8", 1000, 1000,
                     {"tp": [12], "pp": [1], "ep": [1], "batch": [768], "attention_dp": [True]}, 128,
                     chip="h200-sxm", devices=12)
    raw = {**inst.raw, "system": {"devices": 12, "scale_up_domain": 12}}
    f = schedule_table(Instance(InstanceFile.model_validate(raw), source=None, raw=raw), "main").features
    assert float(f["prefill.extra_iterations"][0]) == 0.0 and float(f["decode.sequences"][0]) == 64.0


def test_brute_force_equals_both_solvers_with_a_budget(solvers_match_brute_force):
    """Llama 8B FP8 on up to 8 H100s at 2048/128 with 2,048 tokens per iteration: the budget
    charges every batch whose round exceeds 128 iterations, and the optimum under it is proved by
    both solvers and equals enumeration; it is below the optimum without the budget."""
    decisions = {"tp": [1, 2], "pp": [1], "batch": [64, 128, 256, 512]}
    with_budget = solvers_match_brute_force(_instance("llama-3.1-8b", "fp8", 2048, 128, decisions, 2048))
    without = solvers_match_brute_force(_instance("llama-3.1-8b", "fp8", 2048, 128, decisions, None))
    assert with_budget.objective < without.objective


HEADER = ["id", "model", "gpu", "num_gpus", "tp", "pp", "ep", "attention_dp", "precision", "isl", "osl",
          "concurrency", "metric", "value", "unit", "source", "max_batch_size", "max_num_tokens"]


def test_the_overview_rows_get_their_token_budget_from_the_engine_table(tmp_path: Path):
    """The table's Llama 3 70B TP 2 engine (1,024 tokens), its Mixtral TP 4 (8,192), a layout it
    lacks (Mixtral at TP 8: the BuildConfig default 8,192), an unlisted source (none), a CSV column
    (wins)."""
    path = tmp_path / "m.csv"
    rows = [
        dict(id="a", model="llama-3.1-70b", tp=2, precision="fp16", isl=2048, osl=128),
        dict(id="b", model="mixtral-8x7b", tp=4, precision="fp16", isl=128, osl=128),
        dict(id="c", model="mixtral-8x7b", tp=8, precision="fp16", isl=128, osl=128),
        dict(id="d", model="llama-3.1-8b", tp=1, precision="fp8", isl=128, osl=128, source="mine"),
        dict(id="e", model="llama-3.1-70b", tp=2, precision="fp16", isl=2048, osl=128, max_num_tokens=4096),
    ]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=HEADER)
        w.writeheader()
        for r in rows:
            w.writerow({"gpu": "h100-sxm", "num_gpus": r["tp"], "pp": 1, "ep": 1, "attention_dp": 1, "concurrency": "",
                        "metric": "output_tokens_per_s", "value": 1.0, "unit": "1/s", "source": OVERVIEW,
                        "max_batch_size": "", "max_num_tokens": "", **r})
    parsed, bad = read_rows(path)
    assert not bad
    assert {r.id: r.engine_max_tokens for r in parsed} == {"a": 1024, "b": 8192, "c": 8192, "d": None, "e": 4096}
    a = parsed[0]
    # the budget reaches the model through the row's instance
    assert row_instance(a, 256).workloads[0].max_tokens_per_iteration == 1024


def test_a_malformed_default_budget_names_its_key(tmp_path: Path):
    from codesign.errors import InputError

    bad = tmp_path / "engines.toml"
    bad.write_text('[[benchmark]]\nsource = "x"\ndefault_max_num_tokens = 0\n')
    with pytest.raises(InputError) as exc:
        read_benchmark_engines(bad)
    assert "benchmark[0]" in str(exc.value) and "default_max_num_tokens" in str(exc.value)


def test_prefill_only_and_decode_only_workloads_count_their_own_steps():
    """A prefill-only step of 64 sequences x 2,048 prompt tokens under 8,192 tokens per iteration
    runs ceil(131,072 / 8,192) = 16 iterations, 15 beyond its one; a decode-only step of 5,000
    sequences under 2,048 runs ceil(5,000 / 2,048) = 3, 2 beyond its one, charged to that step."""
    def features(phase: str, batch: int, budget: int | None):
        spec = {"name": "main", "workload": "llama-3.1-8b", "precision": "fp8", "phase": phase,
                "input_tokens": 2048, "output_tokens": 128, "decisions": {"tp": [1], "pp": [1], "batch": [batch]}}
        if budget is not None:
            spec["max_tokens_per_iteration"] = budget
        raw = {"name": "token-budget", "description": "t", "system": {"devices": 1, "scale_up_domain": 8},
               "hardware": {"family": "catalog", "chip": "h100-sxm"}, "workloads": [spec]}
        return schedule_table(Instance(InstanceFile.model_validate(raw), source=None, raw=raw), "main").features

    f, g = features("prefill", 64, 8192), features("prefill", 64, None)
    assert f["prefill.extra_iterations"][0] == 15
    assert f["prefill.layers"][0] - g["prefill.layers"][0] == 15 * 32
    f, g = features("decode", 5000, 2048), features("decode", 5000, None)
    assert f["decode.extra_iterations"][0] == 2
    assert f["decode.bytes_local"][0] - g["decode.bytes_local"][0] == pytest.approx(2 * g["decode.bytes_weights_local"][0],
                                                                                   rel=1e-12)
