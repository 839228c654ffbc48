"""Why a hardware/schedule instance is infeasible: which constraints conflict, how far to relax each.

A minimal set of named constraints (budgets, SLOs, physical limits) that cannot hold together is
found by a deletion filter over feasibility solves of the exact MIP: start from every constraint;
drop one at a time and keep it dropped when the rest stay infeasible. What is left is
irreducible: without any one member, the others of the set can hold. Divisibility rules of the
parallel layout are structure, not constraints, and are never dropped.

For each member, the least relaxation that restores feasibility with every other constraint in
force is the least (left side - limit) over the designs that satisfy the rest: a MIP with that as
its objective.

Every solve goes through the one driver (:func:`codesign.proof.driver.run`), judged by the model:
"feasible" means a design the model accepts exists, and a relaxation comes with its witness, the
design accepted under every other constraint whose own violation is the amount reported (so it
restores feasibility by construction). ``least`` says the driver proved no design violates less
(by more than its tie tolerance).
"""

from __future__ import annotations

import time
from typing import Any

from codesign.errors import ModelError
from codesign.kinds.base import Assessment, Problem
from codesign.kinds.grid.formulation import build, formulation_of
from codesign.kinds.grid.space import build_tables
from codesign.model.budgets import as_written, written_relaxation
from codesign.model.evaluate import Constraint, constraints
from codesign.proof.driver import AUTO, Run, choose_solver, run

#: a violation this small (in the constraint's own unit, relative to its size) counts as a tie
#: when minimising one that is near zero
VIOLATION_ABS_TOL = 1e-12


def _describe(c: Constraint) -> dict[str, Any]:
    return {"name": c.name, "family": c.family, "workload": c.workload, "limit": c.rhs if not c.rhs_hw else c.rhs_hw,
            "unit": c.unit, "expr": c.text or None}


class _Deadline:
    """What is left of an explanation's time limit (None: no limit)."""

    def __init__(self, time_limit: float | None):
        self.end = None if time_limit is None else time.perf_counter() + time_limit

    def left(self) -> float | None:
        return None if self.end is None else max(self.end - time.perf_counter(), 0.0)

    @property
    def over(self) -> bool:
        return self.end is not None and time.perf_counter() >= self.end


class _Stopped(Exception):
    """The time limit or Ctrl-C ended the explanation before its answer was complete."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def explain(problem: Problem, *, solver: str = AUTO, time_limit: float | None = None, progress: Any = None) -> dict[str, Any]:
    """Minimal conflicting constraints and the least relaxation of each (module docstring).

    Returns ``feasible``, ``conflicts``, ``relaxations``, ``solves``, ``seconds``, ``note`` and
    ``complete`` (False when ``time_limit`` or Ctrl-C stopped it: what is listed holds, the rest
    is unknown)."""
    inst = problem.inst  # type: ignore[attr-defined]
    solver = choose_solver(problem, solver)
    t0 = time.perf_counter()
    deadline = _Deadline(time_limit)
    tables = build_tables(inst)
    cons = constraints(inst, tables.hw, tables.scheds)
    names = [c.name for c in cons]
    by_name = {c.name: c for c in cons}
    devices = inst.system.devices
    solves = 0

    def say(text: str) -> None:
        if progress is not None:
            progress(text)

    def solved(form, judge, *, abs_tol: float = 0.0) -> Run:
        nonlocal solves
        if deadline.over:
            raise _Stopped("time limit")
        r = run(form, judge, solver, time_limit=deadline.left(), abs_tol=abs_tol)
        solves += r.rounds
        if r.interrupted:
            raise _Stopped("interrupted")
        if r.timed_out or (r.status == "no_solution" and deadline.over):
            raise _Stopped("time limit")
        return r

    def accepted_under(keep: set[str]):
        def judge(design: dict[str, Any]) -> tuple[bool, float, Assessment | None]:
            a = problem.assess(design)
            ev = a.detail
            ok = not ev.structural and all(x.ok for x in ev.audit if x.name in keep)
            return ok, 0.0, a
        return judge

    def feasible(keep: set[str]) -> bool:
        comp = build(inst, tables, include=keep)
        if comp.empty_reason:
            return False
        comp.mip.set_objective([], [])
        r = solved(formulation_of(comp), accepted_under(keep))
        if r.status not in ("optimal", "infeasible"):
            raise ModelError(f"explain: {solver} returned neither a design nor a proof of infeasibility "
                             f"({r.status}: {r.termination}); try --solver highs")
        return r.status == "optimal"

    conflicts: list[Constraint] = []
    relaxations: list[dict[str, Any]] = []
    try:
        say("is the instance feasible?")
        if feasible(set(names)):
            return _answer(True, [], [], solves, t0, "the instance is feasible")
        if not feasible(set()):
            return _answer(False, [], [], solves, t0,
                           "infeasible even without any constraint: no parallel layout satisfies the divisibility rules")
        keep = list(names)
        for k, name in enumerate(names):
            say(f"deletion filter: constraint {k + 1} of {len(names)} ({name})")
            if not feasible(set(keep) - {name}):
                keep.remove(name)  # not needed for the conflict
        conflicts = [by_name[n] for n in keep]
        for c in conflicts:
            say(f"least relaxation of {c.name}")
            relaxations.append(_least_relaxation(problem, tables, c, set(names) - {c.name}, devices, solved))
    except _Stopped as stop:
        note = ("Ctrl-C" if stop.why == "interrupted" else "the time limit") + " stopped the explanation: "
        note += ("the conflict listed is minimal; relaxations not listed are unknown" if relaxations or conflicts
                 else "no conflict found yet")
        out = _answer(False, [_describe(c) for c in conflicts], relaxations, solves, t0, note)
        out.update(complete=False, interrupted=stop.why == "interrupted")
        return out
    return _answer(False, [_describe(c) for c in conflicts], relaxations, solves, t0, "")


def _least_relaxation(problem: Problem, tables, c: Constraint, others: set[str], devices: int, solved) -> dict[str, Any]:
    """The least violation of ``c`` over designs the model accepts under ``others``, its witness
    and whether it is proven least."""
    inst = problem.inst  # type: ignore[attr-defined]
    # the audit states the whole system's power; the row (and the MIP) is per device
    per_row = devices if c.name == "budget-system-power" else 1.0

    def judge(design: dict[str, Any]) -> tuple[bool, float, Assessment | None]:
        a = problem.assess(design)
        ev = a.detail
        ok = not ev.structural and all(x.ok for x in ev.audit if x.name in others)
        (row,) = [x for x in ev.audit if x.name == c.name]
        return ok, (row.value - row.limit) / per_row, a

    comp = build(inst, tables, include=others, objective=c)
    found = None if comp.empty_reason else solved(formulation_of(comp), judge, abs_tol=VIOLATION_ABS_TOL * abs(comp.objective_unit))
    if found is None or found.best is None:
        return {**_describe(c), "restores": False,
                "note": "relaxing this one alone cannot restore feasibility: the other constraints conflict as well"}
    delta = max(0.0, found.best_internal) * per_row
    r = {**_describe(c), "violation_at_best": delta, "restores": True, "least": found.status == "optimal",
         "witness": found.best.design, "new_limit": _new_limit(c, delta)}
    if c.text:
        workloads = [w.name for w in inst.workloads]
        r["as_written"] = as_written(c.text, workloads, delta)
        moved = written_relaxation(c.text, workloads, delta)
        if moved is not None:  # in the budget's own unit (violation_at_best is the normalised row's)
            r["relax_by_as_written"] = moved
    return r


def _answer(feasible: bool, conflicts, relaxations, solves: int, t0: float, note: str) -> dict[str, Any]:
    return {"feasible": feasible, "conflicts": conflicts, "relaxations": relaxations, "solves": solves,
            "seconds": time.perf_counter() - t0, "note": note, "complete": True, "interrupted": False}


def _new_limit(c: Constraint, delta: float) -> Any:
    if c.rhs_hw:
        return f"{c.rhs_hw} + {delta:.6g} {c.unit}".strip()
    if c.name == "budget-system-power":
        return None
    return c.rhs + delta
