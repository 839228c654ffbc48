"""Units and number formats: what every other module converts with, defined once.

SI inside: seconds, bytes, FLOP, watts, joules, square millimetres. Files carry their unit in the
key (``memory_bandwidth_GBps``, ``tdp_W``, ``energy_pJ_per_bit``) and are converted once, when
they are loaded, with the factors below.
"""

from __future__ import annotations

from typing import Literal

# --- unit factors -----------------------------------------------------------------------------
#: decimal bytes per second in a GB/s; bytes in a TB
GBps = 1e9
TB = 1e12
#: binary bytes in a GiB / MiB (DRAM capacities are binary)
GiB = 2.0**30
MiB = 2.0**20
#: SI prefixes used by the catalog's keys (``_ns``, ``_us``, ``_pJ_per_bit``, ``_TFLOPS``)
NANO = 1e-9
MICRO = 1e-6
PICO = 1e-12
TERA = 1e12
GIGA = 1e9
#: bytes per second in one Tbps (a link's rate in terabits per second)
TBPS_TO_BPS = 1e12 / 8.0

# --- number formats ----------------------------------------------------------------------------
#: the precisions a workload may give its weights (and its KV cache)
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "mxfp4"]

BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    # NVFP4, the 4-bit format of the catalog's fp4 tensor-core peaks: 16 E2M1 values share one
    # FP8 (E4M3) scale, 72 bits per 16 elements = 4.5 bits (the per-tensor FP32 scale is
    # negligible); NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference"
    # (developer.nvidia.com blog, June 2025)
    "fp4": 0.5625,
    # MXFP4 (OCP Microscaling Formats v1.0, the format of gpt-oss's expert weights): 32 E2M1 values
    # share one E8M0 scale, 136 bits per 32 elements = 4.25 bits. A weight-only format here: its
    # math runs at 16 bit (PRECISION_FALLBACK), as the W4A16 kernels that serve it on GPUs without
    # an FP4 MMA do; an engine running Blackwell's block-scaled FP4 MMA is "fp4"
    "mxfp4": 0.53125,
}

#: the KV cache's precision where a workload does not give one: the weights' precision, but a
#: weight-only format's cache is written by its 16-bit math
WEIGHT_ONLY_KV_PRECISION: dict[str, str] = {"mxfp4": "bf16"}

#: precision -> the chip's math formats to try, in order, when it has no native throughput at
#: that precision (weights are up-converted and the math runs at the next wider format)
PRECISION_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "fp8", "bf16", "fp16"),
    # weight-only: 4.25-bit weights (BYTES_PER_ELEMENT), activations and GEMMs at 16 bit
    "mxfp4": ("bf16", "fp16"),
    "fp8": ("fp8", "bf16", "fp16"),
    "int8": ("int8", "fp8", "bf16", "fp16"),
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "tf32": ("tf32", "bf16"),
    "fp32": ("fp32", "tf32"),
}


def kv_precision_of(precision: str, kv_precision: str | None) -> str:
    """The KV cache's precision of a workload with weights at ``precision`` and a stated
    ``kv_precision`` (None: not stated)."""
    return kv_precision or WEIGHT_ONLY_KV_PRECISION.get(precision, precision)
