"""Random tiny mapping and placement instances whose whole design space brute force enumerates,
drawn deterministically from a seed (the exactness tests of :mod:`tests.proof.test_driver_exact_assignment`).

Each draw is a TOML-able instance dict from the kinds' generators
(:func:`codesign.kinds.mapping.generate.generate_mapping`,
:func:`codesign.kinds.placement.spec.generate_placement`), then randomly perturbed: chip mixes,
per-group ports, host memory, allowed tiers, an electrical appliance, devices per module, the
paper's bandwidth assumption, local memory that binds, explicit routing weights with ties,
dispatch precisions, both objectives and tpot budgets relative to the fastest design (resolved by
brute force into an absolute budget). A draw is kept only when its space has at most
``max_points`` points. ``edges`` also draws limits on the model's 1e-9 feasibility tolerance.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from codesign.errors import InputError
from codesign.kinds.mapping.brute import brute_force_mapping
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.spec import mapping_from_data
from codesign.kinds.placement.brute import brute_force_placement
from codesign.kinds.placement.spec import generate_placement, placement_from_data
from codesign.model import mapping as mapping_model
from codesign.model import mapping_build, placement_build
from codesign.model import placement as placement_model
from codesign.model.calibration import shipped

GiB = 2.0**30

MAPPING_CHIPS = ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "a100-pcie-80gb", "l40s")
MAPPING_WORKLOADS = ("llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b")
PLACEMENT_CHIPS = ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "a100-pcie-80gb", "l40s")
PLACEMENT_WORKLOADS = ("mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3")
#: tpot budgets relative to the fastest design's: below 1 (infeasible), on the model's 1e-9
#: tolerance edge, exactly tight, and loose enough to bind the energy objective
BUDGET_FACTORS = (0.97, 1.0 - 5e-10, 1.0, 1.0 + 1e-7, 1.02, 1.1, 1.3, 2.0)
#: the same without the tolerance-edge factors (tests/data/*-tolerance-edge.toml keep those)
SAFE_BUDGET_FACTORS = (0.97, 1.0 + 1e-7, 1.02, 1.1, 1.3, 2.0)


def _choice(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _subset(rng: np.random.Generator, items: tuple[str, ...]) -> tuple[str, ...]:
    while True:
        out = tuple(x for x in items if rng.random() < 0.6)
        if out:
            return out


def capacity_GiB(chip: str, usable_B: float) -> float:
    """The raw memory capacity (GiB) whose usable capacity under the shipped calibration is
    ``usable_B`` (the calibrated runtime reserve added back, the usable fraction divided out)."""
    cal = shipped().for_chip(chip)
    return (usable_B / GiB + cal.runtime_reserve_GiB) / cal.usable_memory_fraction


def draw_mapping(rng: np.random.Generator, max_points: float, *, edges: bool, symmetry: bool = False) -> dict[str, Any]:
    """A random tiny mapping instance (``symmetry``: 4-5 devices of one chip and 2-3 modules, so
    that the MIP's symmetry-breaking rows are active)."""
    while True:
        D = int(rng.integers(4, 6) if symmetry else rng.integers(2, 5))
        L = int(rng.integers(max(D, 2), 6))
        modules = int(_choice(rng, (2, 3) if symmetry else (0, 0, 1, 2, 2, 3, 4)))
        nchips = 1 if symmetry else int(_choice(rng, (1, 1, 2, 3)))
        chips = tuple(str(c) for c in rng.choice(MAPPING_CHIPS, size=min(nchips, D), replace=False))
        kw: dict[str, Any] = dict(
            devices=D, modules=modules, layers=L, workload=_choice(rng, MAPPING_WORKLOADS), chips=chips,
            ports=int(rng.integers(1, 3)), host_GiB=float(_choice(rng, (0.0, 0.0, 2.0, 64.0))),
            batch_per_stage=int(_choice(rng, (1, 8, 32, 128))),
            context_tokens=int(_choice(rng, (512, 8192, 65536, 131072))),
            precision=_choice(rng, ("fp8", "fp8", "bf16")),
            weights=_subset(rng, ("local", "host", "pool")), kv=_subset(rng, ("local", "host", "pool")),
            objective=_choice(rng, ("tokens_per_s", "energy_per_token_J")),
            name=f"random-mapping-{int(rng.integers(1 << 30))}",
        )
        if modules:
            if rng.random() < 0.2:
                kw["assumed_device_bandwidth_GBps"] = float(_choice(rng, (26_800.0, 2_000.0, 300.0)))
            if rng.random() < 0.4:
                kw["max_devices_per_module"] = int(_choice(rng, (1, 2)))
        try:
            data = generate_mapping(**kw)
        except ValueError:
            continue
        if not data["tiers"]["weights"] or not data["tiers"]["kv"]:
            continue
        groups = data["devices"]
        if modules and rng.random() < 0.3:  # ports differ between groups (0 = not attached)
            for g in groups:
                g["pool_ports"] = int(rng.integers(0, 3))
        if modules and rng.random() < 0.25:
            data["appliance"]["medium"] = "electrical"
        try:
            p = mapping_build.build_problem(mapping_from_data(data))
        except (InputError, ValueError):
            continue
        if mapping_model.space_size(p) > max_points:
            continue
        if rng.random() < 0.35:  # local memory that binds: room for a few layers' weights + KV
            lay = p.layer
            for gi, g in enumerate(groups):
                first, last = gi == 0, gi == len(groups) - 1
                fixed = (p.first_store_B if first else 0.0) + (p.last_store_B if last else 0.0)
                per = float(_choice(rng, (lay.w_store_B, lay.kv_store_B, lay.w_store_B + lay.kv_store_B)))
                if edges and rng.random() < 0.3:  # exactly k layers fit, up to the model's 1e-9 tolerance
                    room = (fixed + per * int(rng.integers(1, 4))) / (1 + float(_choice(rng, (0.0, 5e-10))))
                else:
                    room = fixed + per * float(rng.uniform(0.3, 3.0))
                g["memory_capacity_GiB"] = capacity_GiB(g["chip"], room)
            try:
                mapping_build.build_problem(mapping_from_data(data))
            except (InputError, ValueError):
                continue
        if rng.random() < 0.35:
            data["budgets"] = {"tpot_factor": float(_choice(rng, BUDGET_FACTORS if edges else SAFE_BUDGET_FACTORS))}
        return data


def resolve_mapping_budget(data: dict[str, Any]) -> dict[str, Any]:
    """A draw's relative budget ``tpot_factor`` (x the fastest design's tpot, by brute force) ->
    an absolute ``tpot_s``; dropped when no design is feasible anyway."""
    b = data.get("budgets", {}).get("tpot_factor")
    if b is None:
        return data
    fast = copy.deepcopy(data)
    fast.pop("budgets")
    fast["objective"] = {"metric": "tokens_per_s"}
    p = mapping_build.build_problem(mapping_from_data(fast))
    bf = brute_force_mapping(p)
    out = copy.deepcopy(data)
    if bf.objective is None:
        out.pop("budgets")
        return out
    out["budgets"] = {"tpot_s": p.stages * p.micro_batch / bf.objective * b}
    out["description"] += f"; tpot budget = {b!r} x the fastest design's tpot"
    return out


def _composition(rng: np.random.Generator, n: int) -> list[int]:
    k = int(rng.integers(1, n + 1))
    cuts = sorted(rng.choice(np.arange(1, n), size=k - 1, replace=False).tolist()) if k > 1 else []
    bounds = [0, *cuts, n]
    return [bounds[i + 1] - bounds[i] for i in range(k)]


def draw_placement(rng: np.random.Generator, max_points: float, *, edges: bool) -> dict[str, Any]:
    """A random tiny placement instance."""
    while True:
        D = int(_choice(rng, (2, 2, 3, 3, 4, 4, 4, 6)))
        workload = _choice(rng, PLACEMENT_WORKLOADS)
        E = int(rng.integers(2, 10))
        tp = int(_choice(rng, [t for t in (1, 2, 3, 4, 6) if D % t == 0]))
        domains: Any = None if rng.random() < 0.15 else _composition(rng, D)
        zipf = None if rng.random() < 0.25 else float(_choice(rng, (0.5, 1.0, 1.5, 3.0)))
        levels = None if rng.random() < 0.4 else int(rng.integers(1, 4))
        first_dense = 3 if workload == "deepseek-v3" else 0
        try:
            data = generate_placement(
                D, E, domains, workload=workload, chip=_choice(rng, PLACEMENT_CHIPS), tp=tp,
                layers=first_dense + int(rng.integers(1, 3)), batch_per_device=int(_choice(rng, (1, 2, 8, 32, 256))),
                context_tokens=int(_choice(rng, (256, 4096, 32768))), precision=_choice(rng, ("fp8", "fp8", "bf16")),
                zipf_exponent=zipf, levels=levels, objective=_choice(rng, ("tokens_per_s", "energy_per_token_J")),
                seed=int(rng.integers(1000)), name=f"random-placement-{int(rng.integers(1 << 30))}",
            )
        except ValueError:
            continue
        if rng.random() < 0.2:  # explicit weights with ties (classes of several experts)
            data["routing"] = {"profile": "weights", "weights": [float(x) for x in rng.integers(1, 4, size=E)],
                               "source": "random integer weights"}
        if rng.random() < 0.3:
            data["network"] = {"dispatch_bytes_per_element": float(_choice(rng, (1.0, 2.0))),
                               "combine_bytes_per_element": float(_choice(rng, (1.0, 2.0, 4.0)))}
        try:
            pb = placement_build.build_problem(placement_from_data(data))
        except (InputError, ValueError):
            continue
        if placement_model.space_size(pb) > max_points:
            continue
        if rng.random() < 0.35:  # device memory with room for exactly n experts (may be infeasible)
            n = int(rng.integers(max(math.ceil(E / D) - 1, 0), E + 1))
            room = pb.fixed_store_B + (n + float(_choice(rng, (0.5, 0.0)))) * pb.expert_store_B
            data["devices"]["memory_capacity_GiB"] = capacity_GiB(data["devices"]["chip"], room)
            try:
                placement_build.build_problem(placement_from_data(data))
            except (InputError, ValueError):
                continue
        if rng.random() < 0.35:
            data["budgets"] = {"tpot_factor": float(_choice(rng, BUDGET_FACTORS if edges else SAFE_BUDGET_FACTORS))}
        return data


def resolve_placement_budget(data: dict[str, Any]) -> dict[str, Any]:
    """As :func:`resolve_mapping_budget`, for placement (tpot = batch / tokens/s)."""
    b = data.get("budgets", {}).get("tpot_factor")
    if b is None:
        return data
    fast = copy.deepcopy(data)
    fast.pop("budgets")
    fast["objective"] = {"metric": "tokens_per_s"}
    pb = placement_build.build_problem(placement_from_data(fast))
    bf = brute_force_placement(pb)
    out = copy.deepcopy(data)
    if bf.objective is None:
        out.pop("budgets")
        return out
    out["budgets"] = {"tpot_s": pb.batch / bf.objective * b}
    out["description"] += f"; tpot budget = {b!r} x the fastest design's tpot"
    return out


def instance_for(family: str, seed: int, max_points: float, *, edges: bool = False) -> dict[str, Any]:
    """The budget-resolved instance of draw ``seed`` of ``family`` (mapping, mapping-symmetry,
    placement); deterministic."""
    if family == "mapping":
        return resolve_mapping_budget(draw_mapping(np.random.default_rng([seed, 0]), max_points, edges=edges))
    if family == "mapping-symmetry":
        rng = np.random.default_rng([seed, 2])
        return resolve_mapping_budget(draw_mapping(rng, max_points, edges=edges, symmetry=True))
    if family == "placement":
        return resolve_placement_budget(draw_placement(np.random.default_rng([seed, 1]), max_points, edges=edges))
    raise ValueError(family)
