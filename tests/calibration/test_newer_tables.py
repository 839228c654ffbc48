"""The newer public measurement files: TensorRT-LLM's later performance overview
(validation/trtllm-1.x-overview.csv), DeepStack's recorded vLLM runs on 8 x B200
(validation/deepstack-vllm-b200.csv) and NVIDIA's closed MLPerf Inference v4.1 Offline results
(validation/mlperf-v4.1-nvidia.csv). Each loads, every row names its source, no row is skipped,
and a few rows read back as the source documents print them (checked by hand against the pages)."""

from __future__ import annotations

import pytest

from codesign.calibration.engine import skip_reason
from codesign.calibration.rows import read_rows, read_split

from .helpers import REPO

TRTLLM_1X = "NVIDIA/TensorRT-LLM@585c756579dc4d01f21fc13c2f604cdb461ac4f0:docs/source/developer-guide/perf-overview.md"
DEEPSTACK = "tile-ai/DeepStack@8ed05cc48818e773d7e3f1efd93a92b7e7f963cf:data/fig09/reference/"


@pytest.fixture(scope="module")
def overview():
    rows, bad = read_rows(REPO / "validation" / "trtllm-1.x-overview.csv")
    assert not bad
    return {r.id: r for r in rows}


@pytest.fixture(scope="module")
def deepstack():
    rows, bad = read_rows(REPO / "validation" / "deepstack-vllm-b200.csv")
    assert not bad
    return {r.id: r for r in rows}


def test_the_newer_overview_loads_with_a_source_on_every_row(overview):
    """150 rows, every one from the one document; none in the shipped split; none skipped."""
    rows = list(overview.values())
    assert len(rows) == 150
    assert {r.source for r in rows} == {TRTLLM_1X}
    labels = read_split(REPO / "validation" / "split.json")
    assert not any(r.id in labels for r in rows)
    assert all(skip_reason(r) is None for r in rows)
    assert {r.metric for r in rows} == {"output_tokens_per_s_per_gpu"}


def test_the_overview_rows_read_as_the_page_prints_them(overview):
    """DeepSeek R1 0528, B200 DEP4 (FP4), 1000/1000: 6,463 tok/s/GPU, four GPUs, attention DP and EP
    over all four; gpt-oss-120b on one GB200 at 1024/8192: 14,800, MXFP4 weights and (its options)
    an FP8 KV cache; the same model on one H200 keeps the checkpoint's cache (`# Hopper: use auto`);
    Qwen3 30B on RTX PRO 6000 DEP2,PP2 at 8192/1024: 1,416 on four GPUs, 1,500 requests."""
    r = overview["t0001"]
    assert (r.model, r.gpu, r.precision, r.isl, r.osl, r.value) == ("deepseek-v3", "b200", "fp4", 1000, 1000, 6463)
    assert (r.num_gpus, r.tp, r.pp, r.ep, r.attention_dp) == (4, 4, 1, 4, 4)
    gb = [r for r in overview.values()
          if (r.model, r.gpu, r.isl, r.osl) == ("gpt-oss-120b", "gb200", 1024, 8192)]
    assert len(gb) == 1 and gb[0].value == 14800 and gb[0].num_gpus == 1
    assert (gb[0].precision, gb[0].kv_cache_precision) == ("mxfp4", "fp8")
    h200 = [r for r in overview.values() if (r.model, r.gpu) == ("gpt-oss-120b", "h200-sxm")]
    assert len(h200) == 5 and {r.kv_cache_precision for r in h200} == {"bf16"}
    rtx = [r for r in overview.values()
           if (r.model, r.gpu, r.pp, r.isl, r.osl) == ("qwen3-30b-a3b", "rtx-pro-6000", 2, 8192, 1024)]
    assert len(rtx) == 1 and rtx[0].value == 1416
    assert (rtx[0].num_gpus, rtx[0].tp, rtx[0].ep, rtx[0].attention_dp, rtx[0].num_requests) == (4, 2, 2, 2, 1500)
    # the page's request table has no 1000/1000 entry: those rows carry no request count
    assert {r.num_requests for r in overview.values() if r.isl == 1000} == {None}


def test_the_deepstack_runs_load_with_a_source_on_every_row(deepstack):
    """42 rows (the four recorded vLLM summaries' CUDA-graph rows), each naming its file; a fixed
    batch (max_batch_size = num_requests = BS); none skipped."""
    rows = list(deepstack.values())
    assert len(rows) == 42
    assert all(r.source.startswith(DEEPSTACK) for r in rows)
    assert all(skip_reason(r) is None for r in rows)
    assert all(r.engine_max_batch == r.num_requests for r in rows)
    assert {r.model for r in rows} == {"deepseek-v3", "llama-3.1-405b", "llama-3.3-70b", "qwen3-235b-a22b"}
    assert {(r.gpu, r.num_gpus, r.tp, r.metric) for r in rows} == {("b200", 8, 8, "itl_s")}


def test_the_deepstack_itl_is_the_batch_over_the_system_decode_rate(deepstack):
    """Llama 3 70B at BS 16: System Decode TPS 1,488.8, so 16 / 1488.8 = 10.747 ms per token;
    DeepSeek-V3 at BS 1: 1 / 97.08 = 10.301 ms (FP8 weights, as DeepStack models the run)."""
    r = deepstack["ds-llama-3.3-70b-bs16"]
    assert r.value == pytest.approx(16 / 1488.8, rel=1e-5) and r.engine_max_batch == 16
    r = deepstack["ds-deepseek-v3-bs1"]
    assert r.value == pytest.approx(0.0103008, rel=1e-6) and r.precision == "fp8"


MLPERF_41 = "mlcommons/inference_results_v4.1@198fc46799b3328b36ee4bcbdebfa2db5a8e6183:closed/NVIDIA/"


@pytest.fixture(scope="module")
def mlperf():
    rows, bad = read_rows(REPO / "validation" / "mlperf-v4.1-nvidia.csv")
    assert not bad
    return {r.id: r for r in rows}


def test_the_mlperf_rows_load_with_a_source_on_every_row(mlperf):
    """4 rows of NVIDIA's closed MLPerf Inference v4.1 submission, each naming its summary file under
    the one results tree; none in the shipped split; none skipped; every row carries its engine's
    limits and the trtllm-0.14 profile (benchmark_engines.toml)."""
    rows = list(mlperf.values())
    assert len(rows) == 4
    assert all(r.source.startswith(MLPERF_41 + "results/") and "mlperf_log_summary.txt" in r.source for r in rows)
    labels = read_split(REPO / "validation" / "split.json")
    assert not any(r.id in labels for r in rows)
    assert all(skip_reason(r) is None for r in rows)
    assert {r.metric for r in rows} == {"output_tokens_per_s"}
    assert {r.engine for r in rows} == {"trtllm-0.14"}
    assert all(r.engine_max_batch is not None and r.engine_max_tokens is not None for r in rows)


def test_the_mlperf_rows_read_as_the_submission_prints_them(mlperf):
    """DGX-H100, Llama 2 70B, Offline: 'Tokens per second: 24524.9', 'Samples per second: 84.4792',
    so 24524.9 / 84.4792 = 290.3 output tokens per sample (290); TP 2 on 8 GPUs is 4 replicas, each
    an engine of gpu_batch_size 896 and max_num_tokens 4096. H200 x 8, Mixtral 8x7B: 59022.3 tokens/s,
    TP 1 (8 replicas), gpu_batch_size 3072, max_num_tokens 16384."""
    r = mlperf["mlp41-llama2-70b-h100x8"]
    assert (r.model, r.gpu, r.precision, r.value, r.osl) == ("llama-2-70b", "h100-sxm", "fp8", 24524.9, 290)
    assert (r.num_gpus, r.tp, r.dp, r.engine_max_batch, r.engine_max_tokens) == (8, 2, 4, 896, 4096)
    assert r.num_requests == 200640
    r = mlperf["mlp41-mixtral-8x7b-h200x8"]
    assert (r.model, r.gpu, r.value, r.osl) == ("mixtral-8x7b", "h200-sxm", 59022.3, 146)
    assert (r.num_gpus, r.tp, r.dp, r.engine_max_batch, r.engine_max_tokens) == (8, 1, 8, 3072, 16384)
