"""Gap certificates for a user's design: "no feasible design beats yours by more than G %".

``certify(inst, design)`` audits every constraint of the instance with the model (value, limit,
slack, pass/fail), evaluates the design's objective, and obtains a proven bound on the best
objective of any feasible design under the same budgets — from a stored solution whose instance
hash matches, or by solving. The certified gap is

    minimise:  G = (f(d) − f_lb) / |f(d)|        maximise:  G = (f_ub − f(d)) / |f(d)|

A time-limited solve still yields a valid (looser) certificate from the bound it proved.
``check_certificate`` re-checks a certificate file without solving: the audit and objective are
recomputed with the model; the bound is taken as recorded, with its provenance.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from codesign import __version__
from codesign.errors import InputError
from codesign.jsonio import read_json
from codesign.kinds.grid.spec import Instance, load_instance, parse_design, with_budgets
from codesign.model.evaluate import evaluate
from codesign.proof.driver import git_revision, solve_instance, user_gap

#: a recomputed objective must match the certificate's to this relative difference
RECHECK_RTOL = 1e-9


def _stored_bound(inst: Instance, solution_dir: Path) -> dict[str, Any] | None:
    path = solution_dir / f"{inst.name}.json"
    if not path.exists():
        return None
    try:
        data = read_json(path)
    except InputError:
        return None
    if data.get("instance_hash") != inst.content_hash or data.get("bound") is None:
        return None
    if data.get("status") not in ("optimal", "feasible"):
        return None
    return {
        "bound": data["bound"],
        "source": f"stored solution {path}",
        "status": data["status"],
        "solver": data.get("solver"),
        "solver_version": data.get("solver_version"),
        "parameters": data.get("parameters"),
        "time_s": data.get("time_s"),
        "optimum": data.get("objective"),
    }


def certify(
    inst: Instance,
    design: dict[str, Any],
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    solution_dir: Path | None = Path("solutions"),
    source: str = "design",
) -> dict[str, Any]:
    """The certificate of ``design`` (a dict; JSON-ready)."""
    full = parse_design(inst, design, source=source)
    ev = evaluate(inst, full)
    sense = inst.objective.resolved_sense
    prov = _stored_bound(inst, solution_dir) if solution_dir is not None else None
    if prov is None:
        sol = solve_instance(inst, solver=solver, time_limit=time_limit)
        prov = {
            "bound": sol.bound,
            "source": "solve",
            "status": sol.status,
            "solver": sol.solver,
            "solver_version": sol.solver_version,
            "parameters": sol.parameters,
            "time_s": sol.time_s,
            "optimum": sol.objective,
        }
        if sol.status == "infeasible":
            prov["bound"] = None
            prov["note"] = sol.reason
    bound = prov["bound"]
    gap = user_gap(sense, ev.objective, bound) if ev.feasible and bound is not None else None
    if gap is not None and gap < 0:
        gap = 0.0 if abs(gap) <= 1e-9 else gap
    violated = [a.name for a in ev.audit if not a.ok] + [f"layout: {s}" for s in ev.structural]
    if not ev.feasible:
        statement = "the design is infeasible: it violates " + ", ".join(violated)
    elif gap is None:
        statement = "no bound is available (the solve found none within its limits)"
    else:
        statement = (
            f"no feasible design beats this one by more than {100 * gap:.4g} % "
            f"({'lower' if sense == 'min' else 'higher'} is better; bound {bound:.10g})"
        )
    return {
        "kind": "codesign-certificate",
        "instance": inst.name,
        "instance_source": str(inst.source) if inst.source else None,
        "instance_hash": inst.content_hash,
        "budgets": [b.model_dump() for b in inst.spec.budgets.custom],
        "design": full,
        "feasible": ev.feasible,
        "violated": violated,
        "objective_metric": inst.objective.metric,
        "sense": sense,
        "objective": ev.objective,
        "internal_objective": ev.internal_objective,
        "bound": bound,
        "gap": gap,
        "statement": statement,
        "bound_provenance": prov,
        "audit": [
            {"name": a.name, "family": a.family, "value": a.value, "limit": a.limit, "slack": a.slack, "ok": a.ok, "unit": a.unit}
            for a in ev.audit
        ],
        "metrics": ev.metrics,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "codesign_version": __version__,
        "git_revision": git_revision(),
    }


def check_certificate(path: str | Path) -> dict[str, Any]:
    """Re-check a certificate: same instance content, audit and objective recomputed with the
    model, gap recomputed from the recorded bound."""
    data = read_json(path)
    if data.get("kind") != "codesign-certificate":
        raise InputError("not a certificate file", file=path, key="kind", value=data.get("kind"))
    source = data.get("instance_source")
    inst = load_instance(source if source and Path(source).exists() else data["instance"])
    inst = with_budgets(inst, [b["expr"] for b in data.get("budgets", []) if b["name"].startswith("cli-")])
    if inst.content_hash != data["instance_hash"]:
        return {"ok": False, "message": "the instance changed since the certificate was written (content hash differs)"}
    ev = evaluate(inst, parse_design(inst, data["design"], source=str(path)))
    problems = []
    if ev.feasible != data["feasible"]:
        problems.append(f"feasibility differs: recorded {data['feasible']}, recomputed {ev.feasible}")
    if data.get("objective") is None:
        problems.append("the certificate records no objective")
    elif abs(ev.objective - data["objective"]) > RECHECK_RTOL * abs(ev.objective):
        problems.append(f"objective differs: recorded {data['objective']!r}, recomputed {ev.objective!r}")
    recorded = {a["name"]: a for a in data["audit"]}
    for a in ev.audit:
        r = recorded.get(a.name)
        if r is None or r["ok"] != a.ok:
            problems.append(f"audit of {a.name} differs")
    gap = user_gap(data["sense"], ev.objective, data["bound"]) if ev.feasible and data["bound"] is not None else None
    if gap is not None and data["gap"] is not None and abs(max(gap, 0.0) - max(data["gap"], 0.0)) > 1e-9:
        problems.append(f"gap differs: recorded {data['gap']!r}, recomputed {gap!r}")
    return {
        "ok": not problems,
        "problems": problems,
        "gap": gap,
        "bound": data["bound"],
        "bound_provenance": data["bound_provenance"],
        "message": "certificate re-checked: " + data["statement"] if not problems else "; ".join(problems),
    }
