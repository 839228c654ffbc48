"""Solve a placement instance (build the MIP, run a backend, decode, re-check with the model) and
brute force over every per-expert placement and every TP-group partition (tiny instances).

``status`` is "optimal" only when the backend proved its model optimal, the model re-evaluates the
decoded design as feasible, the MIP's objective of that design equals the model's (relative
``OBJECTIVE_RTOL``) and the model's objective is within ``GAP_TOL`` of the solver's bound. A design
the model rejects, or an objective it does not reproduce, raises ModelError (a bug, CLI exit 3).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codesign.errors import InputError, ModelError
from codesign.mapping.placement import PlacementInstance, list_placement_instances, load_placement
from codesign.mapping.placement_formulation import build_placement, to_user
from codesign.model.placement import (
    PlacementDesign,
    PlacementProblem,
    assess,
    build_problem,
    evaluate_placement,
    objective_sense,
    parse_placement_design,
    set_partitions,
    space_size,
    tp_costs,
)
from codesign.solve import GAP_TOL, _provenance, check_solver

#: the MIP's objective of a decoded design and the model's must agree to this
OBJECTIVE_RTOL = 1e-6
#: two solvers' proven optima must agree to this
AGREEMENT_RTOL = 2 * GAP_TOL
#: brute force refuses spaces larger than this
MAX_POINTS = 5e7
CHUNK = 50_000


@dataclass
class PlacementSolution:
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
        d = asdict(self)
        d["space_size_log10"] = math.log10(self.space_size)
        return d


def solve_placement(
    inst: PlacementInstance,
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    threads: int | None = None,
    progress=None,
    verbose: bool = False,
    problem: PlacementProblem | None = None,
) -> PlacementSolution:
    from codesign.backends import solve as backend_solve

    check_solver(solver)
    t0 = time.perf_counter()
    pb = problem or build_problem(inst)
    pm = build_placement(pb)
    build_s = time.perf_counter() - t0
    opts: dict[str, Any] = {"verbose": verbose}
    if time_limit is not None:
        opts["time_limit"] = time_limit
    if threads is not None:
        opts["threads"] = threads
    if progress is not None:

        def _progress(inc, bnd, gap, elapsed):
            conv = lambda v: None if v is None else to_user(pb, v, pm.objective_unit)  # noqa: E731
            progress(conv(inc), conv(bnd), gap, elapsed)

        opts["progress"] = _progress
    if solver == "cpsat":
        from codesign.mapping.solve import CPSAT_MAX_COEFFICIENT

        # finer integer scaling than the backend default (see codesign.mapping.solve): the
        # stress test measured ~1000x smaller rounding gaps on the energy objective
        opts["max_coefficient"] = CPSAT_MAX_COEFFICIENT
    res = backend_solve(pm.mip, solver, **opts)
    sense = objective_sense(pb)
    design = metrics = None
    obj = bound = gap = None
    status = res.status
    if res.bound is not None and res.bound > 0:
        bound = to_user(pb, res.bound, pm.objective_unit)
    if res.x is not None:
        d = pm.decode(res.x)
        ev = evaluate_placement(pb, d)
        if not ev.feasible:
            raise ModelError(f"{solver} returned a placement the model rejects: {'; '.join(ev.violations)}")
        claimed = to_user(pb, res.objective, pm.objective_unit)
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
    return PlacementSolution(
        instance=inst.name,
        instance_hash=inst.content_hash,
        kind="placement",
        solver=solver,
        status=status,
        sense=sense,
        objective_metric=pb.objective,
        objective=obj,
        bound=bound,
        gap=gap,
        design=design,
        metrics=metrics,
        space_size=space_size(pb),
        mip=pm.stats,
        build_s=build_s,
        solve_s=res.wall_time_s,
        time_s=time.perf_counter() - t0,
        nodes=res.nodes,
        termination=res.termination,
        solver_version=res.solver_version,
        parameters={**res.parameters, "verified_gap_tolerance": GAP_TOL, "objective_rtol": OBJECTIVE_RTOL},
        provenance={**_provenance(), "instance_source": str(inst.source) if inst.source else None},
    )


def cross_check_placement(a: PlacementSolution, b: PlacementSolution) -> dict[str, Any]:
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
    return {**info, "agree": True, "relative_difference": rel, "times_s": [a.time_s, b.time_s]}


def check_placement_solution(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """Re-verify a stored placement solution with the model (no solver)."""
    name = data["instance"]
    source = (data.get("provenance") or {}).get("instance_source")
    inst = load_placement(name if name in list_placement_instances() or not source else source)
    if inst.content_hash != data["instance_hash"]:
        return {"ok": False, "message": f"instance {inst.name} changed since the solution was written (hash differs)"}
    if data.get("design") is None:
        return {"ok": data["status"] == "infeasible", "message": f"no design; status {data['status']}"}
    pb = build_problem(inst)
    d = require_design(pb, data["design"], str(path))
    ev = evaluate_placement(pb, d)
    if not ev.feasible:
        return {"ok": False, "message": "; ".join(ev.violations)}
    rel = abs(ev.objective - data["objective"]) / abs(ev.objective)
    if rel > OBJECTIVE_RTOL:
        return {"ok": False, "message": f"objective {ev.objective!r} differs from the record {data['objective']!r} ({rel:.3g})"}
    return {"ok": True, "message": f"{data['status']} {pb.objective} = {ev.objective:.10g} reproduced by the model", "objective": ev.objective, "status": data["status"]}


def require_design(pb: PlacementProblem, data: Any, source: str) -> PlacementDesign:
    if not isinstance(data, dict):
        raise InputError("a placement design must be a table", file=source, value=type(data).__name__)
    return parse_placement_design(pb, data, source=source)


# --- brute force ------------------------------------------------------------------------------


@dataclass
class BruteResult:
    objective: float | None
    design: PlacementDesign | None
    points: int
    feasible_points: int


def brute_force_placement(pb: PlacementProblem) -> BruteResult:
    """Evaluate every per-expert placement (D^E) under every TP-group partition with the model."""
    D, E = pb.devices, pb.experts
    partitions = [[(d,) for d in range(D)]] if pb.tp == 1 else list(set_partitions(list(range(D)), pb.tp))
    total = D**E * len(partitions)
    if total > MAX_POINTS:
        raise ValueError(f"{total:.3g} points: too many for brute force (limit {MAX_POINTS:.0e})")
    sense = 1.0 if pb.objective == "tokens_per_s" else -1.0
    best_val = -math.inf
    best: PlacementDesign | None = None
    feasible = 0
    powers = D ** np.arange(E)
    for groups in partitions:
        tp_t, tp_e = tp_costs(pb, groups)
        for lo in range(0, D**E, CHUNK):
            codes = np.arange(lo, min(lo + CHUNK, D**E))
            A = (codes[:, None] // powers[None, :]) % D
            a = assess(pb, A, tp_t, tp_e)
            ok = a.feasible
            feasible += int(ok.sum())
            if not ok.any():
                continue
            value = pb.batch / a.step_s if sense > 0 else a.energy_per_token_J
            score = np.where(ok, sense * value, -np.inf)
            i = int(np.argmax(score))
            if score[i] > best_val:
                best_val = float(score[i])
                best = PlacementDesign(tuple(int(x) for x in A[i]), tuple(tuple(g) for g in groups))
    return BruteResult(None if best is None else sense * best_val, best, total, feasible)
