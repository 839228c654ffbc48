"""What the kinds over fixed hardware share (mapping, placement): an instance file of the family
format, a derived *model problem* (the instance's numbers, built once), a throughput objective
whose internal form is a step time, designs that may be partial, solver options, and the shape of
an infeasibility explanation (a tpot budget, else the kind's capacity argument).

A subclass names its loaders and model functions as class attributes and writes only what is its
own: the decisions, the baseline rule, the metrics of an evaluation, the MIP's design variables,
the capacity explanation and the views.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Callable
from functools import cached_property
from typing import Any, ClassVar

from codesign.errors import InputError
from codesign.kinds.base import BruteForce, InstanceProblem, Sense
from codesign.proof.driver import solve

#: CP-SAT's largest integer coefficient for these MIPs. The period enters the energy objective
#: on a grid of ~1e9 steps: measured objective rounding 1.2e-6 relative with the backend's 1e9
#: default, 1.2e-9 with 1e12; the rows' rounding also widens the integer model (on a two-chip tiny
#: mapping, CP-SAT's proven bound was 6.0e-5 from the optimum at 1e12, 3.5e-7 at 1e15). Row
#: activities stay below CP-SAT's 2^61 whatever this is.
CPSAT_MAX_COEFFICIENT = 1e15
#: the backend options these MIPs need (an engine profile, not physics). CP-SAT's workers stay the
#: backend's default (2): on 2 cores 2, 4 and 8 workers all proved every named mapping and
#: placement instance, 2 the fastest in total (BENCHMARKS.md §2, "CP-SAT's worker count")
BACKEND_OPTIONS: dict[str, dict[str, Any]] = {
    "cpsat": {"max_coefficient": CPSAT_MAX_COEFFICIENT},
}


class FixedHardwareProblem(InstanceProblem):
    """A problem whose hardware is fixed by the file (wraps a ``FamilyInstance``)."""

    #: the instance's numbers from its validated instance (``build_problem`` of the kind's model)
    build_model: ClassVar[Callable[[Any], Any]]
    #: sequences whose tokens one internal time unit serves (tokens/s = batch / internal)
    batch_attribute: ClassVar[str]
    #: what the internal time is, for people
    internal_time: ClassVar[str]
    #: what the rule-made baseline is, when the file gives none
    baseline_rule: ClassVar[str]
    #: CP-SAT proves these assignment MIPs as fast as HiGHS or faster (placements: 0.8 s vs 13.5 s on
    #: qwen3-235b-fragmented32; HiGHS unproven after 120 s on its energy variant, CP-SAT 12 s)
    default_solver: ClassVar[str] = "cpsat"

    @cached_property
    def model(self) -> Any:
        """The instance's numbers, derived once."""
        return type(self).build_model(self.inst)

    @property
    def metric(self) -> str:
        return self.model.objective

    @property
    def sense(self) -> Sense:
        return "max" if self.metric == "tokens_per_s" else "min"

    def baseline(self) -> dict[str, Any]:
        given = self.inst.spec.baseline
        return dict(given) if given is not None else self.rule_baseline()

    @abstractmethod
    def rule_baseline(self) -> dict[str, Any]:
        """The kind's conventional design (:attr:`baseline_rule`)."""

    @property
    def baseline_description(self) -> str:
        return "the instance's [baseline]" if self.inst.spec.baseline is not None else self.baseline_rule

    def parse_design(self, data: dict[str, Any], source: str = "design") -> dict[str, Any]:
        """A design of the space: the decisions given, the baseline's for the others; a design not
        of the space (:meth:`shape_problems`) is an InputError."""
        if not isinstance(data, dict):
            raise InputError(f"a {self.kind} design is a table", file=source, value=type(data).__name__)
        design = self.parse_full({**self.baseline(), **data}, source)
        wrong = self.shape_problems(design)
        if wrong:
            raise InputError("not a design of this instance: " + "; ".join(wrong), file=source,
                             expected="a design like the instance's baseline (`codesign show NAME --json`)")
        return design.as_dict()

    @abstractmethod
    def parse_full(self, data: dict[str, Any], source: str) -> Any:
        """The kind's design object from a complete design (InputError on a malformed one)."""

    @abstractmethod
    def shape_problems(self, design: Any) -> list[str]:
        """Why ``design`` is not one of the space (empty: it is; it may still be infeasible)."""

    def to_user(self, internal: float) -> float:
        return getattr(self.model, self.batch_attribute) / internal if self.metric == "tokens_per_s" else internal

    @property
    def internal_description(self) -> str:
        if self.metric == "tokens_per_s":
            return f"{self.internal_time} in s: tokens/s = {getattr(self.model, self.batch_attribute)} / it"
        return "energy per token in J"

    def brute_force_of(self, result: Any) -> BruteForce:
        """A kind's brute-force result (``design``, ``points``, ``feasible_points``) as the protocol's."""
        best = None if result.design is None else self.assess(result.design.as_dict())
        return BruteForce(best, result.points, result.feasible_points, result.complete)

    def explain(self, *, solver: str, time_limit: float | None, progress: Any = None) -> dict[str, Any]:
        """Why no design is feasible: the tpot budget (with the least tpot any design reaches, from a
        solve without it), else :meth:`capacity_conflicts`; a feasible instance says so."""
        sol = solve(self, solver=solver, time_limit=time_limit)
        if sol.termination.startswith("interrupted"):
            raise KeyboardInterrupt
        if sol.design is not None and sol.feasible:
            return {**explanation([]), "feasible": True, "note": "the instance is feasible"}
        budget = self.model.tpot_budget_s
        if budget is not None and (least := self._least_tpot(solver, time_limit)) is not None:
            msg = f"the tpot budget {budget:.6g} s: without it the instance is feasible"
            if least["value"] is not None:
                msg += f", and the least tpot any design reaches is {least['value']:.6g} s (the budget must be at least that)"
            return explanation([{"name": "budgets.tpot_s", "message": msg, "least_feasible_value": least["value"]}])
        return explanation(self.capacity_conflicts())

    @abstractmethod
    def capacity_conflicts(self) -> list[dict[str, Any]]:
        """What memory capacity keeps every design out (``name`` and ``message`` each)."""

    def _least_tpot(self, solver: str, time_limit: float | None) -> dict[str, Any] | None:
        """Without its tpot budget and maximising tokens/s (the least step time is the least tpot):
        the least tpot any design reaches (``value`` None when the solve stopped short of the
        proof), or None when the instance is infeasible even without the budget."""
        raw = copy.deepcopy(self.data)
        raw["budgets"].pop("tpot_s", None)
        raw["objective"] = {"metric": "tokens_per_s"}
        free = solve(type(self).from_data(raw, source=f"{self.name} without its tpot budget",
                                          calibration=self.calibration), solver=solver, time_limit=time_limit)
        if free.status not in ("optimal", "feasible"):
            return None
        return {"value": free.metrics["tpot_s"] if free.status == "optimal" else None}


def explanation(conflicts: list[dict[str, Any]]) -> dict[str, Any]:
    """An explanation record's fields for a kind that names its conflicts without relaxations."""
    return {"feasible": False, "conflicts": conflicts, "relaxations": [], "note": "", "complete": True,
            "interrupted": False}
