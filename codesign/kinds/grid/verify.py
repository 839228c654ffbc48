"""Verification: re-check a solver's claim with the analytical model only.

This module never imports the formulation: it takes the design a solver returned and what the
solver claimed about it (objective, feasibility), re-evaluates the design with
:func:`codesign.model.evaluate.evaluate`, and reports every disagreement with the numbers. A
disagreement is a bug (in the formulation, a backend or a solver), never a tolerance to widen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from codesign.errors import InputError
from codesign.kinds.grid.spec import Instance, parse_design
from codesign.model.evaluate import Evaluation, evaluate

#: the model's objective and the solver's must agree to this relative difference; solvers
#: satisfy rows to ~1e-9 absolute on O(1)-scaled rows, which bounds the objective error
OBJECTIVE_RTOL = 1e-6


@dataclass
class Verification:
    ok: bool
    objective_model: float | None  # internal (minimised) objective of the design, by the model
    objective_claimed: float | None
    relative_difference: float | None
    problems: list[str] = field(default_factory=list)
    evaluation: Evaluation | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "objective_model": self.objective_model,
            "objective_claimed": self.objective_claimed,
            "relative_difference": self.relative_difference,
            "tolerance": OBJECTIVE_RTOL,
            "problems": self.problems,
        }


def verify(inst: Instance, design: dict[str, Any], claimed_internal: float | None) -> Verification:
    """Check that ``design`` is a feasible design of ``inst`` and that the model's objective
    (the internal, minimised Σ weight x metric) equals ``claimed_internal``."""
    problems: list[str] = []
    try:
        full = parse_design(inst, design, source="solver design")
    except InputError as exc:
        return Verification(False, None, claimed_internal, None, [f"design not in the space: {exc}"])
    if set(full) != set(design):
        missing = sorted(set(full) - set(design))
        problems.append(f"design leaves decisions unset: {missing}")
    ev = evaluate(inst, full)
    return _judge(ev, claimed_internal, problems)


def with_claim(v: Verification, claimed_internal: float | None) -> Verification:
    """The verification ``v`` of a design, judged against a (new) claimed objective: the same
    checks as :func:`verify` on the model's evaluation ``v`` already holds (the model is not
    run again; the evaluation is a pure function of the instance and the design)."""
    if v.evaluation is None:
        return Verification(v.ok, v.objective_model, claimed_internal, None, list(v.problems), None)
    problems = [p for p in v.problems if p.startswith("design leaves decisions unset")]
    return _judge(v.evaluation, claimed_internal, problems)


def _judge(ev: Evaluation, claimed_internal: float | None, problems: list[str]) -> Verification:
    problems += [f"layout rule broken: {s}" for s in ev.structural]
    for a in ev.audit:
        if not a.ok:
            problems.append(f"constraint {a.name} violated: {a.value:.6g} > {a.limit:.6g} {a.unit}")
    rel = None
    if claimed_internal is not None:
        denom = max(abs(ev.internal_objective), 1e-300)
        rel = abs(ev.internal_objective - claimed_internal) / denom
        if not math.isfinite(rel) or rel > OBJECTIVE_RTOL:
            problems.append(
                f"objective mismatch: model {ev.internal_objective:.12g}, solver {claimed_internal:.12g} "
                f"(relative difference {rel:.3g} > {OBJECTIVE_RTOL:g})"
            )
    return Verification(not problems, ev.internal_objective, claimed_internal, rel, problems, ev)
