"""Rows, measurement files and the hand-derived figures the calibration tests share.

    Llama 3.1 8B parameters   32 x (attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040
                                    + MLP 3 x 4096 x 14,336 = 176,160,768 + norms 2 x 4096)
                              + embedding + LM head 2 x 128,256 x 4096 + final norm 4096
                              = 6,979,584,000 + 1,050,673,152 + 4096 = 8,030,261,248
    FP8 weights               body + final norm at 1 B, embedding + LM head at 2 B (16 bit):
                              6,979,588,096 + 2 x 1,050,673,152 = 9,080,934,400 B
    FP8 KV per token          32 layers x 2 (K, V) x 8 KV heads x 128 x 1 B = 65,536 B
                              (FP16: 131,072 B; an FP4 checkpoint's cache is FP8 under trtllm-bench)
    one 1000/1000 sequence    2000 x 65,536 = 131,072,000 B
    decoding state per slot   4 fp32 rows and 1 int32 row of the 128,256-entry vocabulary, 64 KiB
                              of top-K scratch, 10 x 4 B x 2,000 tokens = 2,710,656 B
"""

from __future__ import annotations

import csv
from pathlib import Path

from codesign.calibration.rows import Row

HEADER = ["id", "model", "gpu", "num_gpus", "tp", "pp", "ep", "attention_dp", "precision", "isl", "osl",
          "concurrency", "metric", "value", "unit", "source"]

GiB = 2**30
W_8B_FP8 = 9_080_934_400  # embedding and LM head in 16 bit
EMBED_HEAD_8B = 1_050_673_152
KV_SEQ_8B_FP8_2000 = 2000 * 65_536
STATE_8B_2000 = 4 * 128_256 * 4 + 128_256 * 4 + 65_536 + 40 * 2000
#: the engine's memory rule with an 8 GiB reserve: u = 1, R = 8 GiB, f = 0.9
ENGINE = {"usable_memory_fraction": 1.0, "runtime_reserve_GiB": 8.0, "kv_cache_free_fraction": 0.9}

#: the source of the TensorRT-LLM 0.14 overview's rows (validation/measurements.csv)
OVERVIEW = "arthurrasmusson/TensorRT-LLM@e00d4e6564921307dd264b61fe1d46f116095e0e:docs/source/performance/perf-overview.md"

REPO = Path(__file__).resolve().parent.parent.parent
MEASUREMENTS = REPO / "validation" / "measurements.csv"


def row(**kw) -> Row:
    """A Llama 3.1 8B FP8 row on one H100, offline at 1000/1000 (any field overridden)."""
    base = dict(id="r1", model="llama-3.1-8b", gpu="h100-sxm", num_gpus=1, tp=1, pp=1, ep=1, attention_dp=1,
                precision="fp8", isl=1000, osl=1000, concurrency=None, metric="output_tokens_per_s", value=14108.0)
    base.update(kw)
    return Row(**base)


def csv_row(rid: str, **kw) -> dict:
    """The same row as a CSV line (a dict of the HEADER's columns)."""
    d = dict(id=rid, model="llama-3.1-8b", gpu="h100-sxm", num_gpus=1, tp=1, pp=1, ep=1, attention_dp=1,
             precision="fp8", isl=1000, osl=1000, concurrency="", metric="output_tokens_per_s", value=14108.0,
             unit="1/s", source="test")
    d.update(kw)
    return d


def write_csv(path: Path, rows: list[dict], extra: tuple[str, ...] = ()) -> Path:
    """A measurements file of ``rows`` (HEADER's columns and ``extra`` ones)."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*HEADER, *extra])
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in (*HEADER, *extra)})
    return path
