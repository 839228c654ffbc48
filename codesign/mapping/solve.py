"""Solve a mapping instance: build the MIP, run a backend, decode, re-check with the model.

``status`` is "optimal" only when the backend proved its model optimal, the model re-evaluates
the decoded design as feasible, the MIP's objective of that design equals the model's (relative
``OBJECTIVE_RTOL``), and the model's objective is within ``GAP_TOL`` (relative) of the solver's
bound. A design the model rejects, or an objective the model does not reproduce, is a bug and
raises :class:`~codesign.errors.ModelError` (CLI exit 3).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from codesign.errors import InputError, ModelError
from codesign.mapping.formulation import build_mapping
from codesign.mapping.spec import MappingInstance, list_mapping_instances, load_mapping
from codesign.model.mapping import (
    build_problem,
    evaluate_mapping,
    objective_sense,
    parse_mapping_design,
    space_size,
)
from codesign.solve import GAP_TOL, _provenance, check_solver

#: the MIP's objective of a decoded design and the model's must agree to this (HiGHS meets rows
#: within its feasibility tolerance, 1e-7 absolute on microsecond rows)
OBJECTIVE_RTOL = 1e-6
#: largest integer coefficient of the CP-SAT scaling (the backend's default is 1e9; row
#: activities stay below its MAX_ACTIVITY = 2^61 whatever this is)
CPSAT_MAX_COEFFICIENT = 1e12
#: two solvers' proven optima must agree to this (each is within GAP_TOL of its bound)
AGREEMENT_RTOL = 2 * GAP_TOL


@dataclass
class MappingSolution:
    instance: str
    instance_hash: str
    kind: str
    solver: str
    status: str
    sense: str
    objective_metric: str
    objective: float | None
    bound: float | None
    gap: float | None
    design: dict[str, Any] | None
    metrics: dict[str, Any] | None
    space_size: int
    mip: dict[str, int]
    build_s: float
    solve_s: float
    time_s: float
    nodes: int | None
    termination: str
    solver_version: str
    parameters: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    cross_check: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
) -> MappingSolution:
    from codesign.backends import solve as backend_solve

    check_solver(solver)
    t0 = time.perf_counter()
    p = build_problem(inst)
    mm = build_mapping(p)
    build_s = time.perf_counter() - t0
    opts: dict[str, Any] = {"verbose": verbose}
    if time_limit is not None:
        opts["time_limit"] = time_limit
    if threads is not None:
        opts["threads"] = threads
    if progress is not None:

        def _progress(inc, bnd, gap, elapsed):
            conv = lambda v: None if v is None else _to_user(p, v, mm.objective_unit)  # noqa: E731
            progress(conv(inc), conv(bnd), gap, elapsed)

        opts["progress"] = _progress
    if solver == "cpsat":
        # larger integer coefficients than the backend's default: the period enters the energy
        # objective on a grid of ~1e9 steps, and the objective's rounding error must stay well
        # below GAP_TOL (measured: 1.2e-6 relative with 1e9, 1.2e-9 with 1e12)
        opts["max_coefficient"] = CPSAT_MAX_COEFFICIENT
    res = backend_solve(mm.mip, solver, **opts)
    sense = objective_sense(p)
    design = metrics = None
    obj = bound = gap = None
    status = res.status
    if res.bound is not None and res.bound > 0:
        bound = _to_user(p, res.bound, mm.objective_unit)
    if res.x is not None:
        d = mm.decode(res.x)
        ev = evaluate_mapping(p, d)
        if not ev.feasible:
            raise ModelError(f"{solver} returned a mapping the model rejects: {'; '.join(ev.violations)}")
        claimed = _to_user(p, res.objective, mm.objective_unit)
        if abs(claimed - ev.objective) > OBJECTIVE_RTOL * abs(ev.objective):
            raise ModelError(f"{solver} objective {claimed:.12g} differs from the model's {ev.objective:.12g}")
        obj = ev.objective
        design = d.as_dict()
        metrics = ev.as_dict()
        if bound is not None:
            gap = (bound - obj) / abs(obj) if sense == "max" else (obj - bound) / abs(obj)
            gap = max(gap, 0.0)
        proved = res.status == "optimal" or res.termination.upper().startswith("OPTIMAL")
        status = "optimal" if proved and gap is not None and gap <= GAP_TOL else "feasible"
    return MappingSolution(
        instance=inst.name,
        instance_hash=inst.content_hash,
        kind="mapping",
        solver=solver,
        status=status,
        sense=sense,
        objective_metric=p.objective,
        objective=obj,
        bound=bound,
        gap=gap,
        design=design,
        metrics=metrics,
        space_size=space_size(p),
        mip=mm.stats,
        build_s=build_s,
        solve_s=res.wall_time_s,
        time_s=time.perf_counter() - t0,
        nodes=res.nodes,
        termination=res.termination,
        solver_version=res.solver_version,
        parameters={**res.parameters, "verified_gap_tolerance": GAP_TOL, "objective_rtol": OBJECTIVE_RTOL},
        provenance={**_provenance(), "instance_source": str(inst.source) if inst.source else None},
    )


def cross_check_mapping(a: MappingSolution, b: MappingSolution) -> dict[str, Any]:
    info = {"solvers": [a.solver, b.solver], "statuses": [a.status, b.status], "objectives": [a.objective, b.objective]}
    if "infeasible" in (a.status, b.status):
        if a.status != b.status:
            raise ModelError(f"solvers disagree on feasibility: {a.solver} {a.status}, {b.solver} {b.status}")
        return {**info, "agree": True}
    if a.status != "optimal" or b.status != "optimal":
        return {**info, "agree": None, "note": "not both proven optimal; nothing to compare"}
    rel = abs(a.objective - b.objective) / abs(a.objective)
    if rel > AGREEMENT_RTOL:
        raise ModelError(f"{a.solver} and {b.solver} disagree on {a.instance}: {a.objective!r} vs {b.objective!r} (relative {rel:.3g})")
    return {**info, "agree": True, "relative_difference": rel}


def check_mapping_solution(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """Re-verify a stored mapping solution with the model (no solver)."""
    name = data["instance"]
    source = (data.get("provenance") or {}).get("instance_source")
    inst = load_mapping(name if name in list_mapping_instances() or not source else source)
    if inst.content_hash != data["instance_hash"]:
        return {"ok": False, "message": f"instance {inst.name} changed since the solution was written (hash differs)"}
    if data.get("design") is None:
        return {"ok": data["status"] == "infeasible", "message": f"no design; status {data['status']}"}
    p = build_problem(inst)
    d = parse_mapping_design(p, data["design"], source=str(path))
    ev = evaluate_mapping(p, d)
    if not ev.feasible:
        return {"ok": False, "message": "; ".join(ev.violations)}
    rel = abs(ev.objective - data["objective"]) / abs(ev.objective)
    if rel > OBJECTIVE_RTOL:
        return {"ok": False, "message": f"objective {ev.objective!r} differs from the record {data['objective']!r} ({rel:.3g})"}
    return {"ok": True, "message": f"{data['status']} {p.objective} = {ev.objective:.10g} reproduced by the model", "objective": ev.objective, "status": data["status"]}


def require_design(p, data: Any, source: str):
    if not isinstance(data, dict):
        raise InputError("a mapping design must be a table", file=source, value=type(data).__name__)
    return parse_mapping_design(p, data, source=source)


def explain_infeasible(inst: MappingInstance, solver: str = "highs", time_limit: float | None = None) -> dict[str, Any]:
    """Why a mapping instance has no feasible design: the tpot budget (with the least tpot any
    design achieves, by a solve without the budget) or memory capacity (bytes to hold vs room)."""
    import copy

    from codesign.mapping.spec import mapping_from_data
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
