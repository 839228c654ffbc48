"""MXFP4, a weight-only precision: 4.25-bit weights (OCP MX v1.0: 32 E2M1 values and one E8M0
scale, 136 bits), 16-bit math and a 16-bit KV cache unless one is stated (instance.py,
hardware.PRECISION_FALLBACK, calibration.rows.engine_kv_precision). Every figure is derived by hand."""

from __future__ import annotations

import csv

import pytest

from codesign import catalog
from codesign.calibration.engine import footprint, skip_reason
from codesign.calibration.rows import read_rows
from codesign.kinds.grid.spec import WorkloadSpec
from codesign.model.hardware import math_format
from codesign.model.units import BYTES_PER_ELEMENT, kv_precision_of

# Llama 3.1 8B: embedding and LM head 2 x 128,256 x 4,096 = 1,050,673,152 parameters, kept at 16 bit;
# the other 6,979,588,096 (32 layers of 218,112,000 with their norms, and the final norm) at the
# weights' precision
EMBED_HEAD_PARAMS = 2 * 128_256 * 4_096
BODY_PARAMS = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336 + 2 * 4096) + 4096
# one token's KV cache at 16 bit: 32 layers x 8 KV heads x 128 x (K and V) x 2 B
KV_TOKEN_16BIT_B = 32 * 8 * 128 * 2 * 2


def test_mxfp4_stores_4_25_bits_per_weight():
    assert BYTES_PER_ELEMENT["mxfp4"] == (32 * 4 + 8) / 32 / 8 == 0.53125
    assert BODY_PARAMS == 6_979_588_096


def test_mxfp4_math_is_16_bit_on_every_chip():
    """Even where the chip has an FP4 tensor rate (B200): the weights are dequantised for the GEMM."""
    for chip in ("b200", "h100-sxm", "a100-sxm-80gb"):
        peaks = catalog.load_chip(chip).peak_dense_TFLOPS
        assert math_format(peaks, "mxfp4", chip) == "bf16"
    assert math_format(catalog.load_chip("b200").peak_dense_TFLOPS, "fp4", "b200") == "fp4"


def test_mxfp4_kv_cache_is_16_bit_unless_stated():
    assert kv_precision_of("mxfp4", None) == "bf16" and kv_precision_of("mxfp4", "fp8") == "fp8"
    assert kv_precision_of("fp8", None) == "fp8"
    spec = WorkloadSpec(workload="llama-3.1-8b", precision="mxfp4", input_tokens=1000, output_tokens=1000)
    assert spec.weight_bytes_per_param == 0.53125 and spec.kv_bytes_per_element == 2.0
    spec = WorkloadSpec(workload="llama-3.1-8b", precision="mxfp4", kv_precision="fp8", input_tokens=1, output_tokens=1)
    assert spec.kv_bytes_per_element == 1.0


def test_an_mxfp4_row_of_a_measurements_file(tmp_path):
    """Read as mxfp4 under any of its spellings; the footprint of Llama 8B at 2,000 tokens per
    sequence: 2,101,346,304 B of 16-bit embedding and head + 6,979,588,096 x 0.53125 =
    3,707,906,176 B of the rest; a 16-bit KV cache of 2,000 x 131,072 B per sequence."""
    header = ["id", "model", "gpu", "num_gpus", "tp", "precision", "isl", "osl", "metric", "value", "source"]
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for i, spelled in enumerate(("mxfp4", "MXFP4", "mx_fp4")):
            w.writerow(dict(id=f"r{i}", model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100 80GB HBM3", num_gpus=1, tp=1,
                            precision=spelled, isl=1000, osl=1000, metric="output_tokens_per_s", value=1.0, source="t"))
    rows, bad = read_rows(path)
    assert not bad and [(r.precision, r.kv_cache_precision) for r in rows] == [("mxfp4", "bf16")] * 3
    fp = footprint(rows[0])
    assert fp.weights_B == pytest.approx(2 * EMBED_HEAD_PARAMS + 0.53125 * BODY_PARAMS, abs=1)
    assert fp.weights_B == pytest.approx(5_809_252_480, abs=1)
    assert fp.kv_per_sequence_B == 2000 * KV_TOKEN_16BIT_B == 262_144_000
    assert skip_reason(rows[0]) is None
