"""The placement kind: which device holds each routed expert of an MoE model, and which devices
form each attention-TP group on the scale-up topology (``kind = "placement"``; schema
:mod:`codesign.kinds.placement.spec`, model :mod:`codesign.model.placement`, MIP
:mod:`codesign.kinds.placement.formulation`, formulations/placement.md).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from codesign.errors import InputError
from codesign.kinds.base import (
    Assessment,
    BruteForce,
    DecisionInfo,
    Formulation,
    Lint,
    Problem,
    Sense,
    register,
)
from codesign.kinds.mapping.problem import BACKEND_OPTIONS, explanation, feasible_answer, least_tpot
from codesign.kinds.mapping.render import host_term_lints
from codesign.kinds.placement import render
from codesign.kinds.placement.brute import brute_force_placement
from codesign.kinds.placement.formulation import build_placement
from codesign.kinds.placement.spec import (
    PlacementInstance,
    generate_placement,
    load_placement,
    placement_from_data,
)
from codesign.model.calibration import CalibrationSet
from codesign.model.placement import (
    PlacementProblem,
    build_problem,
    evaluate_placement,
    objective_sense,
    parse_placement_design,
    space_size,
    structural_violations,
)
from codesign.model.units import GiB

#: what the conventional design is, when an instance gives no [baseline]
ROUND_ROBIN_BASELINE = ("expert e on device e mod D (the experts' index order, as engines place them), TP groups of "
                        "consecutive devices")


@register
class Placement(Problem):
    """A placement instance: wraps :data:`codesign.kinds.placement.spec.PlacementInstance`."""

    generator = staticmethod(generate_placement)
    kind: ClassVar[str] = "placement"

    def __init__(self, inst: PlacementInstance):
        super().__init__(inst.spec, source=inst.source, calibration=inst.calibration)
        self.inst = inst

    @classmethod
    def load(cls, path: Path, *, calibration: CalibrationSet | None = None) -> Placement:
        return cls(load_placement(str(path), calibration=calibration))

    @classmethod
    def from_data(cls, data: dict[str, Any], *, source: str, calibration: CalibrationSet | None = None) -> Placement:
        return cls(placement_from_data(data, source=source, calibration=calibration))

    @cached_property
    def model(self) -> PlacementProblem:
        """The instance's numbers (routing classes, per-device costs, links), derived once."""
        return build_problem(self.inst)

    # --- the question -----------------------------------------------------------------------
    @property
    def metric(self) -> str:
        return self.model.objective

    @property
    def sense(self) -> Sense:
        return objective_sense(self.model)  # type: ignore[return-value]

    def decisions(self) -> list[DecisionInfo]:
        pb = self.model
        out = [DecisionInfo("experts", f"a device (0..{pb.devices - 1}) for each of {pb.experts} experts")]
        if pb.tp > 1:
            out.append(DecisionInfo("groups", f"{pb.groups} groups of {pb.tp} devices over domains {pb.domains}"))
        return out

    def space_size(self) -> int:
        return space_size(self.model)

    def baseline(self) -> dict[str, Any]:
        given = self.inst.spec.baseline
        if given is not None:
            return dict(given)
        pb = self.model
        groups = [list(range(g * pb.tp, (g + 1) * pb.tp)) for g in range(pb.devices // pb.tp)]
        return {"experts": [e % pb.devices for e in range(pb.experts)], "groups": groups}

    @property
    def baseline_description(self) -> str:
        return "the instance's [baseline]" if self.inst.spec.baseline is not None else ROUND_ROBIN_BASELINE

    # --- the model --------------------------------------------------------------------------
    def parse_design(self, data: dict[str, Any], source: str = "design") -> dict[str, Any]:
        """A design of the space: the decisions given, the baseline's for the others; a device
        index out of range or groups that do not partition the devices are an InputError."""
        if not isinstance(data, dict):
            raise InputError("a placement design is a table", file=source, value=type(data).__name__)
        design = parse_placement_design(self.model, {**self.baseline(), **data}, source=source)
        wrong = structural_violations(self.model, design)
        if wrong:
            raise InputError("not a design of this instance: " + "; ".join(wrong), file=source,
                             expected="a design like the instance's baseline (`codesign show NAME --json`)")
        return design.as_dict()

    def assess(self, design: dict[str, Any]) -> Assessment:
        pb = self.model
        ev = evaluate_placement(pb, parse_placement_design(pb, design, source="design"))
        internal = ev.step_s if pb.objective == "tokens_per_s" else ev.energy_per_token_J
        metrics = {
            "tokens_per_s": ev.tokens_per_s,
            "tpot_s": ev.tpot_s,
            "energy_per_token_J": ev.energy_per_token_J,
            "system_power_W": ev.energy_per_token_J * ev.tokens_per_s,
            **{k: v for k, v in ev.as_dict().items()
               if k not in ("feasible", "violations", "objective", "tokens_per_s", "tpot_s", "energy_per_token_J")},
        }
        return Assessment(design, ev.feasible, ev.objective, internal, metrics, tuple(ev.violations), (), ev)

    def to_user(self, internal: float) -> float:
        pb = self.model
        return pb.batch / internal if pb.objective == "tokens_per_s" else internal

    @property
    def internal_description(self) -> str:
        if self.metric == "tokens_per_s":
            return f"the decode step in s: tokens/s = {self.model.batch} / it"
        return "energy per token in J"

    # --- the MIP ----------------------------------------------------------------------------
    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        """(No presolve removes designs from this kind's MIP: ``presolve`` changes nothing.)"""
        pm = build_placement(self.model)
        design_vars = np.array([*pm.n.values(), *pm.y], dtype=np.int64)
        return Formulation(
            mip=pm.mip, objective_unit=pm.objective_unit, decode=lambda x: pm.decode(x).as_dict(),
            design_vars=design_vars, stats=dict(pm.stats), backend_options=BACKEND_OPTIONS,
        )

    def brute_force(self) -> BruteForce:
        r = brute_force_placement(self.model)
        best = None if r.design is None else self.assess(r.design.as_dict())
        return BruteForce(best, r.points, r.feasible_points)

    # --- views -------------------------------------------------------------------------------
    def lints(self) -> list[Lint]:
        return host_term_lints([self.inst.spec.devices.chip], self.calibration)

    def summary(self) -> dict[str, Any]:
        return render.summary(self.inst, self.model)

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:
        render.print_summary(console, summary)

    def render_design(self, console: Any, assessment: Assessment) -> None:
        render.print_design(console, self.model, assessment.design, assessment.detail)

    def explain(self, *, solver: str, time_limit: float | None, progress: Any = None) -> dict[str, Any]:
        """Why no placement is feasible: the tpot budget (with the least step time any placement
        reaches, from a solve without it) or the devices' memory (experts they can hold against the
        model's); a feasible instance says so."""
        pb = self.model
        if (answer := feasible_answer(self, solver, time_limit)) is not None:
            return answer
        if pb.tpot_budget_s is not None and (least := least_tpot(self, solver, time_limit)) is not None:
            msg = f"the tpot budget {pb.tpot_budget_s:.6g} s: without it the instance is feasible"
            if least.get("value") is not None:
                msg += f", and the least tpot any placement reaches is {least['value']:.6g} s (the budget must be at least that)"
            return explanation([{"name": "budgets.tpot_s", "message": msg, "least_feasible_value": least.get("value")}])
        room = pb.max_experts_per_device * pb.devices
        return explanation([{
            "name": "memory capacity",
            "message": f"each device holds at most {pb.max_experts_per_device} experts ({pb.expert_store_B / GiB:.3f} GiB "
                       f"each over the MoE layers, beside {pb.fixed_store_B / GiB:.2f} GiB of the rest in "
                       f"{pb.capacity_B / GiB:.2f} GiB usable): {room} on {pb.devices} devices, the model has "
                       f"{pb.experts}; add devices, or use a chip with more memory or a smaller batch or context",
        }])

