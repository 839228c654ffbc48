"""Solve an instance: build the exact MIP, run a backend, decode, verify with the model, report.

The result speaks in the user's objective (tokens/s is maximised; the MIP minimises the
weighted time per token, its reciprocal). ``status`` is "optimal" only when the solver proved
optimality, the model re-check passed, and the verified gap is within ``GAP_TOL``.
"""

from __future__ import annotations

import datetime as _dt
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codesign import __version__
from codesign.errors import InputError, ModelError
from codesign.instance import Instance
from codesign.model.evaluate import objective_from_internal

#: a result is called optimal when the verified relative gap is at most this
GAP_TOL = 1e-6

SOLVERS = ("highs", "cpsat")


@dataclass
class Solution:
    instance: str
    instance_hash: str
    status: str
    sense: str
    objective_metric: str
    objective: float | None
    bound: float | None
    gap: float | None
    design: dict[str, Any] | None
    metrics: dict[str, float] | None
    workload_metrics: dict[str, dict[str, float]] | None
    solver: str
    solver_version: str
    termination: str
    parameters: dict[str, Any]
    time_s: float
    build_s: float
    solve_s: float
    nodes: int | None
    mip: dict[str, Any]
    verification: dict[str, Any] | None
    internal_objective: float | None = None
    internal_bound: float | None = None
    rounding: dict[str, Any] | None = None
    reason: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def user_gap(sense: str, objective: float | None, bound: float | None) -> float | None:
    """Relative gap in the user's objective: (f - lb)/|f| for min, (ub - f)/|f| for max."""
    if objective is None or bound is None:
        return None
    if objective == 0:
        return 0.0 if bound == 0 else float("inf")
    diff = (objective - bound) if sense == "min" else (bound - objective)
    return diff / abs(objective)


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def solve_instance(
    inst: Instance,
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    threads: int | None = None,
    progress=None,
    verbose: bool = False,
) -> Solution:
    """Build, solve, decode and verify (raises ModelError if the model disagrees with the solver)."""
    from codesign import backends
    from codesign.formulation.build import build
    from codesign.verify import verify

    if solver not in SOLVERS:
        raise InputError(f"unknown solver {solver!r}", expected=f"one of {SOLVERS}")
    t0 = time.perf_counter()
    comp = build(inst)
    build_s = time.perf_counter() - t0
    sense = inst.objective.resolved_sense
    base = dict(
        instance=inst.name,
        instance_hash=inst.content_hash,
        sense=sense,
        objective_metric=inst.objective.metric,
        solver=solver,
        mip={**comp.mip.stats(), "pruned": comp.pruned},
        build_s=build_s,
        provenance=_provenance(),
    )
    if comp.empty_reason:
        return Solution(
            **base, status="infeasible", objective=None, bound=None, gap=None, design=None, metrics=None,
            workload_metrics=None, solver_version="", termination="presolve", parameters={},
            time_s=time.perf_counter() - t0, solve_s=0.0, nodes=0, verification=None, reason=comp.empty_reason,
        )
    opts: dict[str, Any] = {"verbose": verbose}
    if time_limit is not None:
        opts["time_limit"] = time_limit
    if threads is not None:
        opts["threads"] = threads
    if progress is not None:
        unit = comp.objective_unit

        def _progress(inc, bnd, gap, elapsed):
            to_user = lambda v: None if v is None else objective_from_internal(inst, v * unit)  # noqa: E731
            progress(to_user(inc), to_user(bnd), gap, elapsed)

        opts["progress"] = _progress
    res = backends.solve(comp.mip, solver, **opts)
    unit = comp.objective_unit
    design = metrics = wmetrics = ver = None
    obj = bound = gap = internal = internal_bound = None
    status = res.status
    if res.bound is not None:
        internal_bound = res.bound * unit
        bound = objective_from_internal(inst, internal_bound) if internal_bound > 0 else (
            float("inf") if sense == "max" else internal_bound
        )
    if res.x is not None and res.status in ("optimal", "feasible"):
        design = comp.decode(res.x)
        v = verify(inst, design, res.objective * unit if res.objective is not None else None)
        ver = v.as_dict()
        if not v.ok:
            raise ModelError(
                f"{solver} returned a design the model disagrees with on {inst.name}: " + "; ".join(v.problems)
            )
        internal = v.objective_model
        obj = objective_from_internal(inst, internal)
        metrics = v.evaluation.metrics
        wmetrics = v.evaluation.workload_metrics
        gap = user_gap(sense, obj, bound)
        if status == "optimal" and (gap is None or abs(gap) > GAP_TOL):
            status = "feasible"
    return Solution(
        **base, status=status, objective=obj, bound=bound, gap=gap, design=design, metrics=metrics,
        workload_metrics=wmetrics, solver_version=res.solver_version, termination=res.termination,
        parameters={**res.parameters, "verified_gap_tolerance": GAP_TOL}, time_s=time.perf_counter() - t0,
        solve_s=res.wall_time_s, nodes=res.nodes, verification=ver, internal_objective=internal,
        internal_bound=internal_bound, rounding=_rounding_dict(res), reason=None if status != "infeasible" else "the MIP is infeasible",
    )


def _rounding_dict(res) -> dict[str, Any] | None:
    r = getattr(res, "rounding", None)
    if r is None:
        return None
    if hasattr(r, "to_dict"):
        return r.to_dict()
    if hasattr(r, "__dataclass_fields__"):
        from dataclasses import asdict

        d = asdict(r)
        d.pop("rows", None)
        return d
    return None


def _provenance() -> dict[str, Any]:
    import platform

    return {
        "codesign_version": __version__,
        "git_revision": git_revision(),
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


#: two solvers agree when the model's objectives of their designs differ by at most this
AGREEMENT_RTOL = 1e-9


def cross_check_solutions(a: Solution, b: Solution) -> dict[str, Any]:
    """Both solvers must reach the same verified optimum (their designs may differ on ties)."""
    objs = [a.objective, b.objective]
    info = {"solvers": [a.solver, b.solver], "statuses": [a.status, b.status], "objectives": objs}
    if a.status == "infeasible" or b.status == "infeasible":
        if a.status != b.status:
            raise ModelError(f"solvers disagree on feasibility: {a.solver} {a.status}, {b.solver} {b.status}")
        return {**info, "agree": True}
    if a.status != "optimal" or b.status != "optimal":
        return {**info, "agree": None, "note": "not both proven optimal; nothing to compare"}
    rel = abs(a.objective - b.objective) / max(abs(a.objective), 1e-300)
    if rel > AGREEMENT_RTOL:
        raise ModelError(
            f"{a.solver} and {b.solver} disagree on {a.instance}: {a.objective!r} vs {b.objective!r} (relative {rel:.3g})"
        )
    return {**info, "agree": True, "relative_difference": rel}


def check_solution(path: str | Path) -> dict[str, Any]:
    """Re-verify a stored solution: same instance content, feasible design, same objective."""
    from codesign.instance import load_instance
    from codesign.jsonio import read_json
    from codesign.verify import verify

    data = read_json(path)
    for key in ("instance", "instance_hash", "status", "design", "internal_objective"):
        if key not in data:
            raise InputError("not a solution file: key missing", file=path, key=key)
    inst = load_instance(data["instance"])
    if inst.content_hash != data["instance_hash"]:
        return {"ok": False, "message": f"instance {inst.name} changed since the solution was written (hash differs)"}
    if data["design"] is None:
        return {"ok": data["status"] == "infeasible", "message": f"no design; status {data['status']}"}
    v = verify(inst, data["design"], data["internal_objective"])
    if not v.ok:
        return {"ok": False, "message": "; ".join(v.problems), "verification": v.as_dict()}
    if v.relative_difference is not None and v.relative_difference > AGREEMENT_RTOL:
        return {"ok": False, "message": f"objective differs from the record by {v.relative_difference:.3g}"}
    obj = objective_from_internal(inst, v.objective_model)
    return {
        "ok": True,
        "message": f"{data['status']} {inst.objective.metric} = {obj:.10g} reproduced by the model",
        "objective": obj,
        "status": data["status"],
        "verification": v.as_dict(),
    }


def write_ledger(directory: str | Path) -> Path:
    """Rewrite ``<dir>/ledger.solu`` from every solution file in ``dir``.

    One line per instance in the SCIP ``.solu`` style: ``=opt=`` proven optimum, ``=best=`` best
    known with its gap, ``=inf=`` proven infeasible; the value is the user's objective.
    """
    from codesign.jsonio import read_json

    directory = Path(directory)
    lines = ["# instance ledger: =opt= proven optimal (verified gap <= 1e-6), =best= feasible, =inf= infeasible"]
    for f in sorted(directory.glob("*.json")):
        d = read_json(f)
        if not isinstance(d, dict) or "status" not in d or "instance" not in d:
            continue
        tag = {"optimal": "=opt=", "feasible": "=best=", "infeasible": "=inf="}.get(d["status"])
        if tag is None:
            continue
        value = "" if d.get("objective") is None else f"{d['objective']:.12g}"
        extra = f"  # {d['sense']} {d['objective_metric']}, {d['solver']}"
        if d["status"] == "feasible" and d.get("gap") is not None:
            extra += f", gap {d['gap']:.3g}"
        lines.append(f"{tag} {d['instance']} {value}{extra}".rstrip())
    path = directory / "ledger.solu"
    tmp = path.with_suffix(".solu.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path
