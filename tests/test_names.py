"""Names a measurement file writes for the catalog's models, chips and precisions (codesign.names)."""

from __future__ import annotations

import csv

import pytest

from codesign.calibration.report import run_validation
from codesign.calibration.rows import read_rows
from codesign.catalog import list_ids, load_chip, resolve_chip
from codesign.model.workload import list_workloads, load_workload, resolve_workload
from codesign.names import alias_index, normalized_name, resolve_name


@pytest.mark.parametrize("given, expected", [
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", "llama-3.3-70b"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),  # V3 is the model, not a version tag
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek-r1"),
    ("Llama 3.1 8B", "llama-3.1-8b"),
    ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
    ("AMD Instinct MI300X", "mi300x"),
])
def test_normalized_names(given, expected):
    assert normalized_name(given) == expected


def test_every_catalog_id_normalises_to_itself():
    """Normalising never eats part of an id (RTX PRO 6000's model number is not a release tag)."""
    for cid in list_ids("chips"):
        assert normalized_name(cid, release_tags=False) == cid
    for wid in list_workloads():
        assert normalized_name(wid) == wid


def test_an_exact_id_wins_and_an_ambiguous_name_resolves_to_nothing():
    entries = {"a-1": ["x"], "b-2": ["x"], "x": []}
    assert resolve_name("x", entries) == "x"
    assert resolve_name("X", entries) is None  # normalises to x, which names all three
    assert resolve_name("A 1", entries) == "a-1"


def test_no_catalog_name_stands_for_two_entries():
    for entries in ({c: load_chip(c).aliases for c in list_ids("chips")},
                    {w: load_workload(w).aliases for w in list_workloads()}):
        clash = {k: v for k, v in alias_index(entries).items() if len(v) > 1}
        assert not clash


@pytest.mark.parametrize("name, chip", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H200", "h200-sxm"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), ("NVIDIA B200", "b200"), ("NVIDIA L40S", "l40s"),
    ("AMD Instinct MI300X", "mi300x"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
    ("h100", None),  # PCIe and NVL cards exist: a bare "h100" is not read as the SXM module
    ("RTX PRO 5000", None), ("NVIDIA RTX PRO 4500", None),  # other cards, not the 6000
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA H20", "h20"), ("NVIDIA L4", "l4"), ("NVIDIA A10G", "a10g"), ("NVIDIA A10", "a10"),
    ("AMD Instinct MI325X", "mi325x"), ("MI325X", "mi325x"),
    # the two SXM4 modules differ only in the memory their names carry
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"), ("A100 SXM4 40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"), ("A100 SXM 80GB", "a100-sxm-80gb"),
    # other parts: the 40 GB PCIe card, the 144 GB HBM3e GH200, the HBM3e H20
    ("NVIDIA A100-PCIE-40GB", None), ("NVIDIA GH200 144G HBM3e", None), ("NVIDIA H20 HBM3e", None),
])
def test_chip_names(name, chip):
    assert resolve_chip(name) == chip


@pytest.mark.parametrize("name, workload", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("nvidia/Llama-3.1-405B-Instruct-FP4", "llama-3.1-405b"),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP8", "llama-4-scout"), ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"),
    # Llama 3 (not 3.1) has 3.1's config.json values in every field the schema has: an alias of 3.1
    ("meta-llama/Meta-Llama-3-70B", "llama-3.1-70b"), ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3.1-8b"),
    ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"), ("Qwen/Qwen3-32B-FP8", "qwen3-32b"),
    ("google/gemma-2-27b-it", "gemma-2-27b"), ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"),
    ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b"), ("meta-llama/Llama-2-13b-chat-hf", "llama-2-13b"),
    # DeepSeek-R1 distills read as their base architectures
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "llama-3.3-70b"), ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "llama-3.1-8b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"), ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "qwen2.5-7b"),
    # sizes and variants not in the catalog are not guessed
    ("Qwen/Qwen2.5-3B", None), ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", None),
    ("meta-llama/Llama-3.2-11B-Vision-Instruct", None),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"), ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"),
    # other architectures, not V3's: V2.5 (160 experts), V3.2 (sparse attention), the bare family
    ("deepseek-ai/DeepSeek-V2.5", None), ("deepseek-ai/DeepSeek-V3.2", None), ("DeepSeek", None),
])
def test_workload_names(name, workload):
    assert resolve_workload(name) == workload


def test_a_measurement_file_in_other_names_is_read_as_catalog_ids(tmp_path):
    path = tmp_path / "m.csv"
    header = ["id", "model", "gpu", "num_gpus", "tp", "pp", "ep", "attention_dp", "precision", "isl", "osl",
              "concurrency", "metric", "value", "unit", "source"]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerow(["a", "meta-llama/Llama-3.1-8B-Instruct", "NVIDIA H100 80GB HBM3", 1, 1, 1, 1, 1, "fp8",
                    1000, 1000, "", "output_tokens_per_s", 14108, "1/s", "x"])
        w.writerow(["b", "llama-3.1-8b", "h100-sxm", 1, 1, 1, 1, 1, "bfloat16",
                    1000, 1000, "", "output_tokens_per_s", 7054, "1/s", "x"])
    rows, bad = read_rows(path)
    assert not bad
    a, b = rows
    assert (a.model, a.gpu, a.precision) == ("llama-3.1-8b", "h100-sxm", "fp8")
    assert dict(a.named_as) == {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "NVIDIA H100 80GB HBM3"}
    assert (b.precision, b.kv_precision, dict(b.named_as)) == ("bf16", "bf16", {"precision": "bfloat16"})
    report = run_validation(path).as_dict()
    assert report["names_read"] == {"NVIDIA H100 80GB HBM3 -> h100-sxm": 1, "bfloat16 -> bf16": 1,
                                    "meta-llama/Llama-3.1-8B-Instruct -> llama-3.1-8b": 1}
    assert report["n_skipped"] == 0
