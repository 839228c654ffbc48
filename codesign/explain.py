"""Explanations of infeasibility: which constraints conflict, and how far to relax each.

``explain(inst)`` finds a minimal set of named constraints (budgets, SLOs, physical limits) that
cannot hold together — a deletion filter over feasibility solves of the exact MIP: start from
every constraint; drop one at a time and keep it dropped when the rest stay infeasible. What is
left is irreducible: removing any one member makes the instance feasible. Divisibility rules
of the parallel layout are structure, not constraints, and are never dropped.

For each conflicting constraint, the least relaxation that restores feasibility with all other
constraints in force is the minimum of (left side − limit) over the designs that satisfy the
rest: a MIP with that as objective. Each relaxation is re-solved to confirm it restores
feasibility.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from codesign.instance import Instance
from codesign.model.evaluate import Constraint, constraints
from codesign.space import build_tables

#: a relaxation is applied with this relative margin when it is re-checked
RELAX_MARGIN = 1e-9


@dataclass
class Explanation:
    feasible: bool
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    relaxations: list[dict[str, Any]] = field(default_factory=list)
    solves: int = 0
    seconds: float = 0.0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "conflicts": self.conflicts,
            "relaxations": self.relaxations,
            "solves": self.solves,
            "seconds": self.seconds,
            "note": self.note,
        }


def _describe(c: Constraint) -> dict[str, Any]:
    return {"name": c.name, "family": c.family, "workload": c.workload, "limit": c.rhs if not c.rhs_hw else c.rhs_hw,
            "unit": c.unit, "expr": c.text or None}


def explain(inst: Instance, *, solver: str = "highs") -> Explanation:
    """Minimal conflicting constraints and the least relaxation of each (see module docstring)."""
    from codesign.formulation.build import build
    from codesign.solve import backend_solve

    t0 = time.perf_counter()
    tables = build_tables(inst)
    cons = constraints(inst, tables.hw, tables.scheds)
    names = [c.name for c in cons]
    by_name = {c.name: c for c in cons}
    solves = 0

    def feasible(keep: set[str]) -> bool:
        nonlocal solves
        comp = build(inst, tables, include=keep)
        if comp.empty_reason:
            return False
        comp.mip.set_objective([], [])
        solves += 1
        res = backend_solve(comp.mip, solver)
        return res.status in ("optimal", "feasible")

    if feasible(set(names)):
        return Explanation(True, solves=solves, seconds=time.perf_counter() - t0, note="the instance is feasible")
    if not feasible(set()):
        return Explanation(
            False, solves=solves, seconds=time.perf_counter() - t0,
            note="infeasible even without any constraint: no parallel layout satisfies the divisibility rules",
        )
    keep = list(names)
    for name in names:
        trial = set(keep) - {name}
        if not feasible(trial):
            keep.remove(name)  # not needed for the conflict
    conflict = [by_name[n] for n in keep]
    relaxations = []
    for c in conflict:
        others = set(keep) - {c.name} | (set(names) - set(keep))
        comp = build(inst, tables, include=others, objective=c)
        solves += 1
        res = backend_solve(comp.mip, solver) if not comp.empty_reason else None
        if res is None or res.objective is None:
            relaxations.append({**_describe(c), "restores": False, "note": "relaxing this one alone cannot restore feasibility: the other constraints conflict as well"})
            continue
        delta = max(0.0, res.objective * comp.objective_unit)
        relaxations.append({**_describe(c), "violation_at_best": delta, "restores": None})
    # confirm each relaxation alone restores feasibility
    for r in relaxations:
        if "violation_at_best" not in r:
            continue
        c = by_name[r["name"]]
        relaxed = _relaxed(inst, c, r["violation_at_best"] * (1 + RELAX_MARGIN) + 1e-12)
        r["new_limit"] = _new_limit(c, r["violation_at_best"])
        if c.text:
            from codesign.budgets import as_written, written_relaxation

            names = [w.name for w in inst.workloads]
            r["as_written"] = as_written(c.text, names, r["violation_at_best"])
            moved = written_relaxation(c.text, names, r["violation_at_best"])
            if moved is not None:  # in the budget's own unit (violation_at_best is the normalised row's)
                r["relax_by_as_written"] = moved
        r["restores"] = feasible_with(relaxed, inst, tables, c, r["violation_at_best"], solver)
        solves += 1
    return Explanation(
        False,
        conflicts=[_describe(c) for c in conflict],
        relaxations=relaxations,
        solves=solves,
        seconds=time.perf_counter() - t0,
    )


def _new_limit(c: Constraint, delta: float) -> Any:
    if c.rhs_hw:
        return f"{c.rhs_hw} + {delta:.6g} {c.unit}".strip()
    if c.name == "budget-system-power":
        return None
    return c.rhs + delta


def _relaxed(inst: Instance, c: Constraint, delta: float) -> Constraint:
    from dataclasses import replace

    return replace(c, rhs=c.rhs + delta)


def feasible_with(relaxed: Constraint, inst: Instance, tables, original: Constraint, delta: float, solver: str) -> bool:
    """Is the instance feasible when ``original`` is replaced by ``relaxed``? (exact MIP)"""
    from codesign.formulation.build import build
    from codesign.solve import backend_solve

    names = {c.name for c in constraints(inst, tables.hw, tables.scheds)}
    comp = build(inst, tables, include=names - {original.name}, extra_constraints=[relaxed])
    if comp.empty_reason:
        return False
    comp.mip.set_objective([], [])
    return backend_solve(comp.mip, solver).status in ("optimal", "feasible")
