"""The placement kind: which device holds each routed expert of an MoE model, and which devices
form each attention-TP group on the scale-up topology (``kind = "placement"``; schema
:mod:`codesign.kinds.placement.spec`, model :mod:`codesign.model.placement`, MIP
:mod:`codesign.kinds.placement.formulation`, formulations/placement.md).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from codesign.kinds.base import Assessment, BruteForce, DecisionInfo, Formulation, Lint, register
from codesign.kinds.fixed import BACKEND_OPTIONS, FixedHardwareProblem
from codesign.kinds.mapping.render import host_term_lints
from codesign.kinds.placement import render
from codesign.kinds.placement.brute import brute_force_placement
from codesign.kinds.placement.formulation import build_placement
from codesign.kinds.placement.spec import generate_placement, load_placement, placement_from_data
from codesign.model.placement import (
    PlacementDesign,
    evaluate_placement,
    parse_placement_design,
    space_size,
    structural_violations,
)
from codesign.model.placement_build import build_problem
from codesign.model.units import GiB


@register
class Placement(FixedHardwareProblem):
    """A placement instance: wraps :data:`codesign.kinds.placement.spec.PlacementInstance`."""

    kind: ClassVar[str] = "placement"
    generator = staticmethod(generate_placement)
    load_instance = staticmethod(load_placement)
    instance_from_data = staticmethod(placement_from_data)
    build_model = staticmethod(build_problem)
    batch_attribute = "batch"
    internal_time = "the decode step"
    baseline_rule = ("expert e on device e mod D (the experts' index order, as engines place them), TP groups of "
                     "consecutive devices")

    def decisions(self) -> list[DecisionInfo]:
        pb = self.model
        out = [DecisionInfo("experts", f"a device (0..{pb.devices - 1}) for each of {pb.experts} experts", "placement")]
        if pb.tp > 1:
            out.append(DecisionInfo("groups", f"{pb.groups} groups of {pb.tp} devices over domains {pb.domains}", "placement"))
        return out

    def space_size(self) -> int:
        return space_size(self.model)

    def rule_baseline(self) -> dict[str, Any]:
        pb = self.model
        groups = [list(range(g * pb.tp, (g + 1) * pb.tp)) for g in range(pb.devices // pb.tp)]
        return {"experts": [e % pb.devices for e in range(pb.experts)], "groups": groups}

    def parse_full(self, data: dict[str, Any], source: str) -> PlacementDesign:
        return parse_placement_design(self.model, data, source=source)

    def shape_problems(self, design: PlacementDesign) -> list[str]:
        """A device index out of range, groups that do not partition the devices."""
        return structural_violations(self.model, design)

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

    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        """(No presolve removes designs from this kind's MIP: ``presolve`` changes nothing.)"""
        pm = build_placement(self.model)
        design_vars = np.array([*pm.n.values(), *pm.y], dtype=np.int64)
        return Formulation(
            mip=pm.mip, objective_unit=pm.objective_unit, decode=lambda x: pm.decode(x).as_dict(),
            design_vars=design_vars, stats=dict(pm.stats), backend_options=BACKEND_OPTIONS,
        )

    def brute_force(self, *, deadline: float | None = None) -> BruteForce:
        return self.brute_force_of(brute_force_placement(self.model, deadline))

    def lints(self) -> list[Lint]:
        return host_term_lints([self.inst.spec.devices.chip], self.calibration, engine=self.inst.spec.system.engine)

    def summary(self) -> dict[str, Any]:
        return render.summary(self.inst, self.model)

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:
        render.print_summary(console, summary)

    def render_design(self, console: Any, assessment: Assessment) -> None:
        render.print_design(console, self.model, assessment.design, assessment.detail)

    def capacity_conflicts(self) -> list[dict[str, Any]]:
        """The experts the devices can hold against the model's."""
        pb = self.model
        room = pb.max_experts_per_device * pb.devices
        return [{
            "name": "memory capacity",
            "message": f"each device holds at most {pb.max_experts_per_device} experts ({pb.expert_store_B / GiB:.3f} GiB "
                       f"each over the MoE layers, beside {pb.fixed_store_B / GiB:.2f} GiB of the rest in "
                       f"{pb.capacity_B / GiB:.2f} GiB usable): {room} on {pb.devices} devices, the model has "
                       f"{pb.experts}; add devices, or use a chip with more memory or a smaller batch or context",
        }]
