"""Instance generator for benchmarks: DeepStack-style 3D-tile co-design instances whose design
space grows from ~1e5 to beyond 1e30 points.

:func:`scaled_instance` returns an instance in the ordinary instance format (a dict that
:func:`codesign.kinds.grid.spec.instance_from_data` validates; :func:`generate` returns the validated
:class:`~codesign.kinds.grid.spec.Instance`). Two knobs grow the space:

- ``workloads``: deployments sharing the one hardware design (as ``deepstack-multi-workload``),
  each with its own schedule decisions; every workload multiplies the space by its number of
  layouts (~10^2..10^3). Workloads are drawn, in order, from :data:`WORKLOAD_POOL` (six models,
  decode and prefill-heavy RAG, varied SLOs and contexts; past six the pool repeats with longer
  contexts so that no two workloads are identical).
- ``hw_level``: the hardware decisions' domains: 0 = a small grid (4,800 designs), 1 = the
  ``deepstack-llama70b-decode`` grid (44,100), 2 = a dense grid (604,800 designs).

Everything else (64 devices in scale-up domains of 8, 120 W / 300 mm² per-tile budgets,
tokens/s objective) follows ``deepstack-multi-workload``. The space size is exact
(:func:`codesign.kinds.grid.space.space_size`). Example::

    from codesign.kinds.grid.generate import generate, scaled_instance
    inst = generate(workloads=3, hw_level=1)          # ~6e11 points
    raw = scaled_instance(8, hw_level=2, objective="energy_per_token_J")
"""

from __future__ import annotations

import copy
from typing import Any

from codesign.kinds.grid.spec import Instance, instance_from_data

#: hardware domains per level (decision -> values)
HW_LEVELS: dict[int, dict[str, list]] = {
    0: {
        "dram_layers": [2, 4, 8, 16],
        "tsv_count": [8192, 16384, 32768, 65536],
        "tsv_pitch_um": [9.0, 25.0, 40.0],
        "compute_area_mm2": [40.0, 80.0, 120.0, 160.0, 200.0],
        "clock_GHz": [0.8, 1.2, 1.5, 1.75, 2.2],
        "sram_MiB": [0.5, 1.0, 2.0, 4.0],
    },
    1: {
        "dram_layers": [1, 2, 4, 6, 8, 10, 12, 14, 16],
        "tsv_count": [4096, 8192, 16384, 32768, 65536],
        "tsv_pitch_um": [9.0, 15.0, 25.0, 40.0],
        "compute_area_mm2": [40.0, 60.0, 80.0, 100.0, 120.0, 160.0, 200.0],
        "clock_GHz": [0.8, 1.0, 1.2, 1.5, 1.75, 2.0, 2.2],
        "sram_MiB": [0.25, 0.5, 1.0, 2.0, 4.0],
    },
    2: {
        "dram_layers": list(range(1, 17)),
        "tsv_count": [2048, 4096, 8192, 12288, 16384, 24576, 32768, 49152, 65536],
        "tsv_pitch_um": [9.0, 12.0, 15.0, 20.0, 25.0, 32.0, 40.0],
        "compute_area_mm2": [40.0, 50.0, 60.0, 70.0, 80.0, 100.0, 120.0, 140.0, 160.0, 200.0],
        "clock_GHz": [0.8, 0.9, 1.0, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0, 2.2],
        "sram_MiB": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
    },
}

_DENSE = {"tp": [1, 2, 4, 8, 16], "pp": [1, 2, 4, 8], "batch": [8, 16, 32, 64, 128, 256, 512]}
_MOE = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "ep": [1, 2, 4, 8], "batch": [16, 32, 64, 128, 256, 512]}

#: the most workloads a generated instance has (each multiplies the space by ~10^2..10^3)
MAX_WORKLOADS = 64

#: the workloads, in the order they are added (name, model, phase, ISL, OSL, SLOs, decisions)
WORKLOAD_POOL: list[dict[str, Any]] = [
    {"name": "llama70b", "workload": "llama-3.1-70b", "phase": "decode", "input_tokens": 2048,
     "output_tokens": 512, "tpot_slo_ms": 50.0, "decisions": _DENSE},
    {"name": "qwen30b", "workload": "qwen3-30b-a3b", "phase": "decode", "input_tokens": 1024,
     "output_tokens": 512, "tpot_slo_ms": 30.0, "decisions": _MOE},
    {"name": "llama8b", "workload": "llama-3.1-8b", "phase": "decode", "input_tokens": 1024,
     "output_tokens": 256, "tpot_slo_ms": 20.0,
     "decisions": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "batch": [16, 32, 64, 128, 256, 512]}},
    {"name": "mixtral", "workload": "mixtral-8x7b", "phase": "decode", "input_tokens": 1024,
     "output_tokens": 512, "tpot_slo_ms": 30.0, "decisions": _MOE},
    {"name": "llama70b_rag", "workload": "llama-3.1-70b", "phase": "both", "input_tokens": 8192,
     "output_tokens": 256, "ttft_slo_ms": 8000.0,
     "decisions": {"tp": [1, 2, 4, 8, 16], "pp": [1, 2, 4, 8], "batch": [4, 8, 16, 32, 64, 128]}},
    {"name": "gptoss120b", "workload": "gpt-oss-120b", "phase": "decode", "input_tokens": 2048,
     "output_tokens": 1024, "tpot_slo_ms": 30.0, "decisions": _MOE},
]


def _workload(i: int) -> dict[str, Any]:
    """The i-th workload: the pool, repeated with 2^k times the context (k = i // len(pool))."""
    base = copy.deepcopy(WORKLOAD_POOL[i % len(WORKLOAD_POOL)])
    k = i // len(WORKLOAD_POOL)
    if k:
        base["name"] = f"{base['name']}_ctx{k}"
        base["input_tokens"] *= 2**k
    base["precision"] = "fp8"
    return base


def scaled_instance(
    workloads: int = 1,
    hw_level: int = 1,
    *,
    objective: str = "tokens_per_s",
    power_W: float = 120.0,
    area_mm2: float = 300.0,
    name: str | None = None,
) -> dict[str, Any]:
    """A generated instance as a dict in the instance-file format (see the module docstring).

    ``workloads`` >= 1 deployments share one hardware design drawn from ``HW_LEVELS[hw_level]``;
    ``objective`` is any instance objective (``tokens_per_s``, ``energy_per_token_J``, ...).
    """
    if not 1 <= workloads <= MAX_WORKLOADS:  # (10**8 of them ran for hours)
        raise ValueError(f"workloads must be 1 to {MAX_WORKLOADS}")
    if hw_level not in HW_LEVELS:
        raise ValueError(f"hw_level must be one of {sorted(HW_LEVELS)}")
    ws = [_workload(i) for i in range(workloads)]
    hw = HW_LEVELS[hw_level]
    baseline: dict[str, Any] = {"dram_layers": hw["dram_layers"][len(hw["dram_layers"]) // 2],
                                "tsv_count": hw["tsv_count"][1], "tsv_pitch_um": hw["tsv_pitch_um"][-1],
                                "compute_area_mm2": hw["compute_area_mm2"][1], "clock_GHz": hw["clock_GHz"][1],
                                "sram_MiB": hw["sram_MiB"][1]}
    for w in ws:
        b = {"tp": 8, "pp": 1, "batch": 64 if 64 in w["decisions"]["batch"] else w["decisions"]["batch"][0]}
        if "ep" in w["decisions"]:
            b["ep"] = 8
        if workloads == 1:
            baseline.update(b)
        else:
            baseline[w["name"]] = b
    return {
        "name": name or f"gen-w{workloads}-hw{hw_level}" + ("" if objective == "tokens_per_s" else f"-{objective}"),
        "description": f"generated: {workloads} workload(s) sharing one 3D tile, hardware grid level {hw_level}",
        "provenance": "codesign.kinds.grid.generate.scaled_instance (benchmark scaling series)",
        "system": {"devices": 64, "scale_up_domain": 8},
        "hardware": {"family": "stacked-3d", "stack": "deepstack-3d", "decisions": copy.deepcopy(hw)},
        "workloads": ws,
        "budgets": {"power_W": power_W, "area_mm2": area_mm2},
        "objective": {"metric": objective},
        "baseline": baseline,
    }


def generate(workloads: int = 1, hw_level: int = 1, **kw: Any) -> Instance:
    """:func:`scaled_instance`, validated into an :class:`~codesign.kinds.grid.spec.Instance`."""
    raw = scaled_instance(workloads, hw_level, **kw)
    return instance_from_data(raw, source=f"<{raw['name']}>")
