"""Solve a mapping instance: build the MIP, then :func:`codesign.kinds.family.solve_compiled`
(run a backend, decode, re-check with the model; what "optimal" means is stated there)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from codesign.errors import InputError
from codesign.kinds.family import FamilySolution, check_stored, solve_compiled
from codesign.kinds.mapping.formulation import build_mapping
from codesign.kinds.mapping.spec import MappingInstance, list_mapping_instances, load_mapping
from codesign.model.mapping import (
    build_problem,
    evaluate_mapping,
    objective_sense,
    parse_mapping_design,
    space_size,
)


def _to_user(p, internal: float, unit: float) -> float:
    """MIP objective -> the user's metric (period in µs -> tokens/s; energy in mJ -> J)."""
    if p.objective == "tokens_per_s":
        return p.micro_batch / (internal * unit) if internal > 0 else float("inf")
    return internal * unit


def solve_mapping(
    inst: MappingInstance,
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    threads: int | None = None,
    progress=None,
    verbose: bool = False,
) -> FamilySolution:
    t0 = time.perf_counter()
    p = build_problem(inst)
    mm = build_mapping(p)
    return solve_compiled(
        inst, "mapping", mm,
        evaluate=lambda d: evaluate_mapping(p, d),
        to_user=lambda v: _to_user(p, v, mm.objective_unit),
        sense=objective_sense(p), metric=p.objective, space=space_size(p),
        solver=solver, t0=t0, time_limit=time_limit, threads=threads, progress=progress, verbose=verbose,
    )


def check_mapping_solution(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """Re-verify a stored mapping solution with the model (no solver)."""

    def evaluate_record(inst, design, source):
        p = build_problem(inst)
        return evaluate_mapping(p, parse_mapping_design(p, design, source=source)), p.objective

    return check_stored(data, path, load=load_mapping, named=list_mapping_instances(), evaluate_record=evaluate_record)


def require_design(p, data: Any, source: str):
    if not isinstance(data, dict):
        raise InputError("a mapping design must be a table", file=source, value=type(data).__name__)
    return parse_mapping_design(p, data, source=source)


def explain_infeasible(inst: MappingInstance, solver: str = "highs", time_limit: float | None = None) -> dict[str, Any]:
    """Why a mapping instance has no feasible design: the tpot budget (with the least tpot any
    design achieves, by a solve without the budget) or memory capacity (bytes to hold vs room)."""
    import copy

    from codesign.kinds.mapping.spec import mapping_from_data
    from codesign.model.mapping import GiB

    p = build_problem(inst)
    out: dict[str, Any] = {"conflicts": []}
    if p.tpot_budget_s is not None:
        raw = copy.deepcopy(inst.spec.model_dump(mode="json", exclude_none=True))
        raw["budgets"].pop("tpot_s", None)
        raw["objective"] = {"metric": "tokens_per_s"}  # the least period is the least tpot
        free = solve_mapping(mapping_from_data(raw, source=inst.source), solver=solver, time_limit=time_limit)
        if free.status in ("optimal", "feasible"):
            least = free.metrics["tpot_s"] if free.status == "optimal" else None
            msg = f"the tpot budget {p.tpot_budget_s:.6g} s: without it the instance is feasible"
            if least is not None:
                msg += f", and the least tpot any design reaches is {least:.6g} s (the budget must be at least that)"
            out["conflicts"].append({"constraint": "budgets.tpot_s", "message": msg, "least_feasible_value": least})
            return out
    lay = p.layer
    need = p.layers * (lay.w_store_B + lay.kv_store_B) + p.first_store_B + p.last_store_B
    room = sum(x.local_capacity_B for x in p.devices) + sum(x.host_capacity_B for x in p.devices)
    room += sum(t.capacity_B for t in p.tiers if t.kind == "pool" and (p.paper_mode or any(x.ports for x in p.devices)))
    fixed = [("first", p.first_store_B, p.devices[0]), ("last", p.last_store_B, p.devices[-1])]
    for which, b, dev in fixed:
        if b > dev.local_capacity_B:
            out["conflicts"].append({"constraint": f"capacity of {dev.name}", "message": f"the {which} stage's embedding/LM head alone ({b / GiB:.2f} GiB) exceed its usable memory ({dev.local_capacity_B / GiB:.2f} GiB)"})
    if need > room:
        out["conflicts"].append({
            "constraint": "memory capacity",
            "message": f"weights + KV cache need {need / GiB:,.1f} GiB, the allowed tiers hold {room / GiB:,.1f} GiB; allow more tiers (host, pool), more devices, or a smaller batch/context",
        })
    if not out["conflicts"]:
        out["conflicts"].append({
            "constraint": "memory capacity per tier",
            "message": f"the bytes fit in total ({need / GiB:,.1f} of {room / GiB:,.1f} GiB) but not per device and tier: whole layers (weights {lay.w_store_B / GiB:.2f} GiB, KV {lay.kv_store_B / GiB:.2f} GiB) do not pack into the devices' tiers",
        })
    return out
