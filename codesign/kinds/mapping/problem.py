"""The pipeline-mapping kind: which layers form each pipeline stage, where each layer's weights and
KV cache live (local memory, host memory, a pooled module's tier) and which appliance modules each
device attaches to (``kind = "mapping"``; schema :mod:`codesign.kinds.mapping.spec`, model
:mod:`codesign.model.mapping`, MIP :mod:`codesign.kinds.mapping.formulation`,
formulations/mapping.md).
"""

from __future__ import annotations

import copy
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from codesign.errors import InputError, did_you_mean
from codesign.kinds.base import Assessment, BruteForce, DecisionInfo, Formulation, Lint, register
from codesign.kinds.fixed import BACKEND_OPTIONS, FixedHardwareProblem
from codesign.kinds.mapping import joint, render
from codesign.kinds.mapping.brute import brute_force_mapping
from codesign.kinds.mapping.formulation import build_mapping, greedy_design
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.spec import load_mapping, mapping_from_data
from codesign.model.mapping import (
    MappingDesign,
    MappingProblem,
    evaluate_mapping,
    parse_mapping_design,
    space_size,
    structural_violations,
)
from codesign.model.mapping_budgets import MAPPING_BUDGET_METRICS, parse_mapping_budget
from codesign.model.mapping_build import build_problem
from codesign.model.units import GiB

#: the structural violations that make a design not one of the space (the rest make it infeasible)
SHAPE_VIOLATIONS = ("layers_per_stage has", "attach has", "every stage needs")


@register
class Mapping(FixedHardwareProblem):
    """A mapping instance: wraps :class:`codesign.kinds.mapping.spec.MappingInstance`."""

    kind: ClassVar[str] = "mapping"
    objectives: ClassVar[tuple[str, ...]] = ("tokens_per_s", "energy_per_token_J")
    takes_budgets: ClassVar[bool] = True
    #: the metrics a budget (and so a frontier's budgeted metric) may name
    budget_metrics: ClassVar[tuple[str, ...]] = tuple(MAPPING_BUDGET_METRICS)
    generator = staticmethod(generate_mapping)
    load_instance = staticmethod(load_mapping)
    instance_from_data = staticmethod(mapping_from_data)
    build_model = staticmethod(build_problem)
    batch_attribute = "micro_batch"
    internal_time = "the pipeline period"
    baseline_rule = ("balanced stages, each device attached to consecutive modules, every layer's weights and then "
                     "KV cache in the first allowed tier with room (local, host, an attached module)")

    # --- joint hardware (:mod:`codesign.kinds.mapping.joint`) ------------------------------
    @cached_property
    def hardware(self) -> joint.HardwareSpace:
        return joint.hardware_space(self.inst)

    @cached_property
    def model(self) -> MappingProblem:
        """The instance's numbers; with hardware decisions, those of the largest hardware."""
        return self.problem_at(self.hardware.largest()) if self.hardware.joint else build_problem(self.inst)

    def problem_at(self, hw: dict[str, Any]) -> MappingProblem:
        """The fixed-hardware numbers of one hardware design (built once each)."""
        cache = self.__dict__.setdefault("_problems", {})
        k = joint.key(hw)
        if k not in cache:
            cache[k] = build_problem(joint.instance_at(self.inst, hw))
        return cache[k]

    def _split(self, design: dict[str, Any]) -> tuple[MappingProblem, dict[str, Any]]:
        """The numbers a design is evaluated with and its mapping part."""
        if not self.hardware.joint:
            return self.model, design
        hw = joint.parse_hardware(self.hardware, design.get(joint.HARDWARE_KEY), self.hardware.largest(), "design")
        return self.problem_at(hw), {k: v for k, v in design.items() if k != joint.HARDWARE_KEY}

    def decisions(self) -> list[DecisionInfo]:
        p = self.model
        return [*(self.hardware.decisions() if self.hardware.joint else []),
            DecisionInfo("layers_per_stage", f"{p.layers} layers in {p.stages} contiguous stages (at least one each)",
                         "mapping"),
            DecisionInfo("weights", f"a tier per layer: {', '.join(p.tiers[i].label for i in p.weight_tiers)}", "mapping"),
            DecisionInfo("kv", f"a tier per layer: {', '.join(p.tiers[i].label for i in p.kv_tiers)}", "mapping"),
            DecisionInfo("attach", f"per device, at most its pool ports of {p.modules} modules" if p.modules
                         else "no appliance modules", "placement"),
        ]

    def space_size(self) -> int:
        if self.hardware.joint:
            return sum(space_size(self.problem_at(hw)) for hw in self.hardware.choices())
        return space_size(self.model)

    def rule_baseline(self) -> dict[str, Any]:
        if self.hardware.joint:
            hw, design, _ = joint.greedy(self)
            return {joint.HARDWARE_KEY: hw, **design.as_dict()}
        return greedy_design(self.model).as_dict()

    def parse_full(self, data: dict[str, Any], source: str) -> MappingDesign | joint.JointDesign:
        if not self.hardware.joint:
            return parse_mapping_design(self.model, data, source=source)
        hw = joint.parse_hardware(self.hardware, data.get(joint.HARDWARE_KEY), self.baseline().get(joint.HARDWARE_KEY)
                                  or self.hardware.largest(), source)
        p = self.problem_at(hw)
        rest = {k: v for k, v in data.items() if k != joint.HARDWARE_KEY}
        return joint.JointDesign(hw, p, parse_mapping_design(p, rest, source=source))

    def shape_problems(self, design: MappingDesign | joint.JointDesign) -> list[str]:
        p, m = (design.problem, design.mapping) if isinstance(design, joint.JointDesign) else (self.model, design)
        return [v for v in structural_violations(p, m) if v.startswith(SHAPE_VIOLATIONS)]

    def assess(self, design: dict[str, Any]) -> Assessment:
        p, mapping = self._split(design)
        ev = evaluate_mapping(p, parse_mapping_design(p, mapping, source="design"))
        internal = ev.period_s if p.objective == "tokens_per_s" else ev.energy_per_token_J
        metrics = {
            "tokens_per_s": ev.tokens_per_s,
            "tpot_s": ev.tpot_s,
            "energy_per_token_J": ev.energy_per_token_J,
            # the average power of the whole pipeline: energy per token x tokens per second
            "system_power_W": ev.energy_per_token_J * ev.tokens_per_s,
            "period_s": ev.period_s,
            "time_per_token_s": ev.period_s / p.micro_batch,  # 1 / tokens_per_s (a budget's metric)
            "bottleneck": ev.bottleneck,
            "stage_s": ev.stage_s,
            "compute_s": ev.compute_s,
            "memory_s": ev.memory_s,
            "port_load_s": ev.port_load_s,
            "switch_load_s": ev.switch_load_s,
            "local_used_B": ev.local_used_B,
            "host_used_B": ev.host_used_B,
            "pool_used_B": ev.pool_used_B,
            "local_capacity_B": [d.local_capacity_B for d in p.devices],
        }
        if self.hardware.joint:
            metrics["hardware_static_W"] = p.hardware_static_W
        return Assessment(design, ev.feasible, ev.objective, internal, metrics, tuple(ev.violations), (), ev)

    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        """(No presolve removes designs from this kind's MIP: ``presolve`` changes nothing.) The stage
        envelopes (valid cuts) are for HiGHS: they slow CP-SAT (formulations/mapping.md §4)."""
        envelopes = solver != "cpsat"
        if self.hardware.joint:
            return joint.formulate(self, envelopes=envelopes)
        mm = build_mapping(self.model, envelopes=envelopes)
        design_vars = np.array([*mm.n, *mm.cw.values(), *mm.ck.values(), *mm.a.values()], dtype=np.int64)
        return Formulation(
            mip=mm.mip, objective_unit=mm.objective_unit, decode=lambda x: mm.decode(x).as_dict(),
            design_vars=design_vars, stats=dict(mm.stats), backend_options=BACKEND_OPTIONS,
        )

    def brute_force(self, *, deadline: float | None = None) -> BruteForce:
        if self.hardware.joint:
            return joint.brute_force(self, deadline)
        return self.brute_force_of(brute_force_mapping(self.model, deadline))

    # --- variants ------------------------------------------------------------------------------
    def _variant(self, raw: dict[str, Any]) -> Mapping:
        return Mapping(mapping_from_data(raw, source=self.source, calibration=self.calibration))

    def with_budgets(self, texts: list[str]) -> Mapping:
        """The same instance with ``cli-N`` budgets (:mod:`codesign.model.mapping_budgets`); they join
        the content hash."""
        if not texts:
            return self
        for i, t in enumerate(texts):  # a malformed one is named as given
            parse_mapping_budget(t, name=f"cli-{i + 1}", source="--budget")
        raw = copy.deepcopy(self.data)
        budgets = raw.setdefault("budgets", {})
        budgets["custom"] = [*budgets.get("custom", []), *({"name": f"cli-{i + 1}", "expr": t} for i, t in enumerate(texts))]
        return self._variant(raw)

    def with_objective(self, metric: str | None) -> Mapping:
        if metric is None:
            return self
        if metric not in self.objectives:
            raise InputError("not an objective of mapping instances", key="--objective", value=metric,
                             expected=" | ".join(self.objectives), suggestion=did_you_mean(metric, self.objectives))
        raw = copy.deepcopy(self.data)
        raw["objective"] = {"metric": metric}
        return self._variant(raw)

    def budget_texts(self) -> list[str]:
        return [b.expr for b in self.inst.spec.budgets.custom if b.name.startswith("cli-")]

    @property
    def default_solver(self) -> str:  # type: ignore[override]
        """CP-SAT, except under a metric budget: its period-epigraph row stalled CP-SAT (unproven
        at 60 s on pf-llama405b-kv-mapping with 'tokens_per_s >= 1391.43', HiGHS 3.3 s); and with
        hardware decisions: pf-dense1t-joint HiGHS 6-15 s, CP-SAT 44-50 s. A joint instance whose
        tpot budget caps the period and whose chips are fixed goes back to CP-SAT: the cap makes its
        big-Ms and integer grid tight (pf-llama405b-joint, 2 cores at load 9: CP-SAT 14-18 s, HiGHS
        44-49 s; formulations/mapping.md §4)."""
        if self.inst.spec.budgets.custom:
            return "highs"
        if self.hardware.joint:
            capped = self.model.tpot_budget_s is not None and not self.hardware.chips
            return "cpsat" if capped else "highs"
        return "cpsat"

    def lints(self) -> list[Lint]:
        return render.lints(self.inst)

    def summary(self) -> dict[str, Any]:
        return render.summary(self.inst, self.model)

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:
        render.print_summary(console, summary)

    def render_design(self, console: Any, assessment: Assessment) -> None:
        p, mapping = self._split(assessment.design)
        if self.hardware.joint:
            console.print(f"hardware: {assessment.design[joint.HARDWARE_KEY]}")
        render.print_design(console, p, mapping, assessment.detail)

    def capacity_conflicts(self) -> list[dict[str, Any]]:
        """The bytes to hold against the room of the allowed tiers, the first and last stage's
        embedding and LM head, else whole layers that do not pack into the devices' tiers."""
        p = self.model
        lay = p.layer
        need = p.layers * (lay.w_store_B + lay.kv_store_B) + p.first_store_B + p.last_store_B
        room = sum(x.local_capacity_B + x.host_capacity_B for x in p.devices)
        room += sum(t.capacity_B for t in p.tiers if t.kind == "pool" and (p.paper_mode or any(x.ports for x in p.devices)))
        conflicts = []
        for which, b, dev in (("first", p.first_store_B, p.devices[0]), ("last", p.last_store_B, p.devices[-1])):
            if b > dev.local_capacity_B:
                conflicts.append({"name": f"capacity of {dev.name}",
                                  "message": f"the {which} stage's embedding/LM head alone ({b / GiB:.2f} GiB) exceed "
                                             f"its usable memory ({dev.local_capacity_B / GiB:.2f} GiB)"})
        if need > room:
            conflicts.append({"name": "memory capacity",
                              "message": f"weights + KV cache need {need / GiB:,.1f} GiB, the allowed tiers hold "
                                         f"{room / GiB:,.1f} GiB; allow more tiers (host, pool), more devices, or a "
                                         "smaller batch/context"})
        if not conflicts:
            conflicts.append({"name": "memory capacity per tier",
                              "message": f"the bytes fit in total ({need / GiB:,.1f} of {room / GiB:,.1f} GiB) but not "
                                         f"per device and tier: whole layers (weights {lay.w_store_B / GiB:.2f} GiB, KV "
                                         f"{lay.kv_store_B / GiB:.2f} GiB) do not pack into the devices' tiers"})
        return conflicts
