"""A measurement row's engine profile (codesign.model.engines): chosen by ``--engine``, the CSV's
``engine`` column or the source's entry in benchmark_engines.toml, and its rules reaching the row
and its one-design instance (codesign.calibration.engine).

Hand-derived figures:
- vLLM on one H100 SXM (80 GiB, no A100): max_num_seqs 1,024, max_num_batched_tokens 8,192; on an
  A100 SXM: 256 and 2,048 (vllm/engine/arg_utils.py, vllm-project/vllm@99d7eb5).
- An FP8 checkpoint's KV cache: FP8 under trtllm-bench, BF16 under vLLM's kv_cache_dtype "auto".
- trtllm-bench's maximum batch when the build is not known: 4,096 per executor; under attention
  DP at TP 4 each of the 4 ranks has its own: 16,384 per replica.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from codesign.calibration.engine import engine_state_B, evaluate_row, row_instance
from codesign.calibration.rows import read_rows
from codesign.calibration.terms import recompose, row_terms, step_time
from codesign.cli import app
from codesign.errors import InputError
from codesign.model.calibration import shipped

from .helpers import OVERVIEW, csv_row, write_csv

V1 = "NVIDIA/TensorRT-LLM@00f37686aa854010d68bcbd0f4ab000221541ca6:docs/source/performance/perf-overview.md"
runner = CliRunner()


def _rows(tmp_path, lines, engine=None):
    path = write_csv(tmp_path / "m.csv", lines, extra=("engine",))
    rows, bad = read_rows(path, engine=engine)
    assert not bad, bad
    return {r.id: r for r in rows}


def test_the_source_names_the_engine_and_the_column_or_option_overrides_it(tmp_path):
    rows = _rows(tmp_path, [
        csv_row("a", source=OVERVIEW),
        csv_row("b", source=V1),
        csv_row("c", source="someone's benchmark"),
        csv_row("d", source=OVERVIEW, engine="vllm"),
    ])
    assert {i: r.engine for i, r in rows.items()} == {"a": "trtllm-0.14", "b": "trtllm-1.x", "c": None, "d": "vllm"}
    forced = _rows(tmp_path, [csv_row("a", source=OVERVIEW), csv_row("d", source=OVERVIEW, engine="vllm")],
                   engine="sglang")
    assert {r.engine for r in forced.values()} == {"sglang"}


def test_the_profiles_rules_reach_the_row(tmp_path):
    rows = _rows(tmp_path, [
        csv_row("h100", source="x", engine="vllm"),
        csv_row("a100", source="x", engine="vllm", gpu="a100-sxm-80gb"),
        csv_row("trt", source="x", engine="trtllm-1.x"),
    ])
    h100, a100, trt = rows["h100"], rows["a100"], rows["trt"]
    assert (h100.engine_cap(4096), h100.engine_max_tokens, h100.kv_precision) == (1024, 8192, "bf16")
    assert (a100.engine_cap(4096), a100.engine_max_tokens) == (256, 2048)
    # trtllm-1.x: trtllm-bench's cap, no known token budget, an FP8 checkpoint's FP8 cache
    assert (trt.engine_cap(4096), trt.engine_max_tokens, trt.kv_precision) == (4096, None, "fp8")
    # cap=None still drops every cap
    assert h100.engine_cap(None) is None


def test_the_cap_is_per_attention_dp_rank(tmp_path):
    rows = _rows(tmp_path, [csv_row("q", model="qwen3-235b-a22b", num_gpus=4, tp=4, ep=4, attention_dp=4,
                                    source="x", engine="trtllm-1.x")])
    assert rows["q"].engine_cap(4096) == 4 * 4096 == 16384


def test_a_profile_without_decoding_state_charges_none_for_the_engines_slots(tmp_path):
    lines = [csv_row("t", source="x", engine="trtllm-0.14", max_batch_size=256),
             csv_row("v", source="x", engine="vllm", max_batch_size=256)]
    path = write_csv(tmp_path / "m.csv", lines, extra=("engine", "max_batch_size"))
    rows = {r.id: r for r in read_rows(path)[0]}
    # 256 slots x (4 x 128,256 x 4 + 128,256 x 4 + 65,536 + 40 x 2,000) B
    assert engine_state_B(rows["t"]) == 256 * (4 * 128_256 * 4 + 128_256 * 4 + 65_536 + 40 * 2000)
    assert engine_state_B(rows["v"]) == 0.0


def test_the_row_instance_takes_the_engines_allreduce_and_ep_dispatch(tmp_path):
    moe = {"model": "mixtral-8x7b", "num_gpus": 8, "tp": 8, "ep": 8, "source": V1}
    rows = _rows(tmp_path, [
        csv_row("gather", **moe),
        csv_row("a2a", **moe, engine="trtllm-1.x-all-to-all"),
        csv_row("fast", source=OVERVIEW, engine="trtllm-0.14-fastest-allreduce"),
        csv_row("nccl", source=OVERVIEW),
    ])
    assert row_instance(rows["gather"], 8).raw["workloads"][0]["decisions"]["ep_all_to_all"] == [False]
    assert "ep_all_to_all" not in row_instance(rows["a2a"], 8).raw["workloads"][0]["decisions"]
    assert row_instance(rows["fast"], 8).raw["system"]["allreduce"] == "fastest"
    assert row_instance(rows["nccl"], 8).raw["system"]["allreduce"] == "nccl"


def test_an_unknown_engine_is_an_input_error(tmp_path):
    path = write_csv(tmp_path / "m.csv", [csv_row("a", engine="tensorrt")], extra=("engine",))
    with pytest.raises(InputError, match="unknown engine 'tensorrt'"):
        read_rows(path)
    with pytest.raises(InputError, match="unknown engine"):
        read_rows(write_csv(tmp_path / "n.csv", [csv_row("a")]), engine="vllm-9")


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_the_cli_exits_2_on_an_unknown_engine_and_lists_the_known_ones(tmp_path, command):
    path = write_csv(tmp_path / "m.csv", [csv_row("a")])
    got = runner.invoke(app, [command, str(path), "--engine", "trtllm-2"])
    assert got.exit_code == 2, got.output
    assert "unknown engine 'trtllm-2'" in got.output and "trtllm-0.14" in got.output and "sglang" in got.output


DEEPSTACK = ("tile-ai/DeepStack@8ed05cc48818e773d7e3f1efd93a92b7e7f963cf:data/fig09/reference/"
             "benchmark_summary_llama_3_70b.csv (BS 1)")


def test_deepstacks_vllm_rows_take_the_vllm_profile_and_its_all_reduce_by_size(tmp_path):
    """DeepStack's recorded vLLM runs (benchmark_engines.toml): the vllm profile; on a B200 its
    all-reduce by message size, which the row's instance names (system.allreduce = "vllm"); no
    per-slot decoding state for the engine's other slots."""
    row = _rows(tmp_path, [csv_row("ds", source=DEEPSTACK, model="llama-3.3-70b", gpu="b200", num_gpus=8, tp=8,
                                   precision="bf16", isl=1024, osl=1024, max_batch_size=1, num_requests=1)])["ds"]
    assert row.engine == "vllm" and row.rules.allreduce == "vllm" and row.rules.allreduce_bands is not None
    assert row_instance(row, 1).system.allreduce == "vllm"
    assert engine_state_B(row) == 0.0
    # on a chip without bands (an L40S) the same profile leaves NCCL's all-reduce
    l40s = _rows(tmp_path, [csv_row("l", source=DEEPSTACK, gpu="l40s")])["l"]
    assert l40s.rules.allreduce is None and l40s.rules.allreduce_bands is None


# --- the engine's host time per sequence (trtllm-1.x: 20 us; eq. 5.3's host term) -------------------
V1X = "NVIDIA/TensorRT-LLM@585c756579dc4d01f21fc13c2f604cdb461ac4f0:docs/source/developer-guide/perf-overview.md"


def test_both_1x_overviews_run_the_1x_profile(tmp_path):
    rows = _rows(tmp_path, [csv_row("a", source=V1), csv_row("b", source=V1X), csv_row("c", source=OVERVIEW)])
    assert {i: r.engine for i, r in rows.items()} == {"a": "trtllm-1.x", "b": "trtllm-1.x", "c": "trtllm-0.14"}
    assert [r.rules.host_us_per_sequence for r in rows.values()] == [20.0, 20.0, 0.0]


def test_a_1x_rows_steps_pay_20_us_per_sequence_and_the_fit_holds_it(tmp_path):
    """Llama 8B on one H100 at 16 sequences: each step pays 16 x 20 us = 320 us under trtllm-1.x,
    nothing under trtllm-0.14. The terms carry it as a modelled time (``engine_host``), not a
    calibration field, so a calibration's own host time adds on top: 16 x (20 + 10) us = 480 us."""
    rows = _rows(tmp_path, [csv_row("new", source=V1), csv_row("old", source=OVERVIEW)])
    cal = shipped().for_chip("h100-sxm").model_dump()
    t_new, t_old = row_terms(rows["new"], 16), row_terms(rows["old"], 16)
    for phase in ("prefill", "decode"):
        new, old = getattr(t_new, phase), getattr(t_old, phase)
        assert new["sequences"] == old["sequences"] == 16
        assert new["engine_host"] == pytest.approx(320e-6, rel=1e-12)
        assert old["engine_host"] == 0.0
        no_host = new | {"engine_host": 0.0}
        assert step_time(new, cal) - step_time(no_host, cal) == pytest.approx(320e-6, rel=1e-9)
        assert step_time(new, cal | {"host_us_per_sequence": 10.0}) - step_time(no_host, cal) == \
            pytest.approx(480e-6, rel=1e-9)
    # the re-composition at the file's calibration is evaluate's prediction, the host time included
    ev = evaluate_row(rows["new"], 16).workload_metrics["main"]
    assert ev["decode_step.host_s"] == pytest.approx(320e-6, rel=1e-12)
    assert recompose(t_new, cal) == pytest.approx(ev["tokens_per_s"], rel=1e-9)
