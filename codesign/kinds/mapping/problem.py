"""The pipeline-mapping kind: which layers form each pipeline stage, where each layer's weights and
KV cache live (local memory, host memory, a pooled module's tier) and which appliance modules each
device attaches to (``kind = "mapping"``; schema :mod:`codesign.kinds.mapping.spec`, model
:mod:`codesign.model.mapping`, MIP :mod:`codesign.kinds.mapping.formulation`,
formulations/mapping.md).
"""

from __future__ import annotations

import copy
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
from codesign.kinds.mapping import render
from codesign.kinds.mapping.brute import brute_force_mapping
from codesign.kinds.mapping.formulation import build_mapping, greedy_design
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.spec import MappingInstance, load_mapping, mapping_from_data
from codesign.model.calibration import CalibrationSet
from codesign.model.mapping import (
    MappingProblem,
    build_problem,
    evaluate_mapping,
    objective_sense,
    parse_mapping_design,
    space_size,
    structural_violations,
)
from codesign.model.units import GiB
from codesign.proof.driver import solve

#: the structural violations that make a design not one of the space (the rest make it infeasible)
SHAPE_VIOLATIONS = ("layers_per_stage has", "attach has", "every stage needs")

#: CP-SAT's largest integer coefficient for these MIPs. The period enters the energy objective
#: on a grid of ~1e9 steps: measured objective rounding 1.2e-6 relative with the backend's 1e9
#: default, 1.2e-9 with 1e12; the rows' rounding also widens the integer model (on
#: tests/kinds/test_mapping.py's tiny3, CP-SAT's proven bound was 6.0e-5 from the optimum at 1e12,
#: 3.5e-7 at 1e15). Row activities stay below CP-SAT's 2^61 whatever this is.
CPSAT_MAX_COEFFICIENT = 1e15
#: CP-SAT workers when the user gives none: 2 and 4 stall on pf-llama405b-mapping-energy (a 36 %
#: gap after 120 s), 1 leaves qwen3-235b-fragmented32-energy unproven at 60 s, 8 prove every named
#: mapping and placement instance (formulations/mapping.md §3)
CPSAT_WORKERS = 8
#: the backend options the mapping and placement MIPs need (an engine profile, not physics)
BACKEND_OPTIONS: dict[str, dict[str, Any]] = {
    "cpsat": {"max_coefficient": CPSAT_MAX_COEFFICIENT, "threads": CPSAT_WORKERS},
}

#: what the conventional design is, when an instance gives no [baseline]
GREEDY_BASELINE = ("balanced stages, each device attached to consecutive modules, every layer's weights and "
                   "then KV cache in the first allowed tier with room (local, host, an attached module)")


@register
class Mapping(Problem):
    """A mapping instance: wraps :class:`codesign.kinds.mapping.spec.MappingInstance`."""

    generator = staticmethod(generate_mapping)
    kind: ClassVar[str] = "mapping"

    def __init__(self, inst: MappingInstance):
        super().__init__(inst.spec, source=inst.source, calibration=inst.calibration)
        self.inst = inst

    @classmethod
    def load(cls, path: Path, *, calibration: CalibrationSet | None = None) -> Mapping:
        return cls(load_mapping(str(path), calibration=calibration))

    @classmethod
    def from_data(cls, data: dict[str, Any], *, source: str, calibration: CalibrationSet | None = None) -> Mapping:
        return cls(mapping_from_data(data, source=source, calibration=calibration))

    @cached_property
    def model(self) -> MappingProblem:
        """The instance's numbers (per-layer costs, devices, tiers), derived once."""
        return build_problem(self.inst)

    # --- the question -----------------------------------------------------------------------
    @property
    def metric(self) -> str:
        return self.model.objective

    @property
    def sense(self) -> Sense:
        return objective_sense(self.model)  # type: ignore[return-value]

    def decisions(self) -> list[DecisionInfo]:
        p = self.model
        return [
            DecisionInfo("layers_per_stage", f"{p.layers} layers in {p.stages} contiguous stages (at least one each)"),
            DecisionInfo("weights", f"a tier per layer: {', '.join(p.tiers[i].label for i in p.weight_tiers)}"),
            DecisionInfo("kv", f"a tier per layer: {', '.join(p.tiers[i].label for i in p.kv_tiers)}"),
            DecisionInfo("attach", f"per device, at most its pool ports of {p.modules} modules" if p.modules
                         else "no appliance modules"),
        ]

    def space_size(self) -> int:
        return space_size(self.model)

    def baseline(self) -> dict[str, Any]:
        given = self.inst.spec.baseline
        return dict(given) if given is not None else greedy_design(self.model).as_dict()

    @property
    def baseline_description(self) -> str:
        return "the instance's [baseline]" if self.inst.spec.baseline is not None else GREEDY_BASELINE

    # --- the model --------------------------------------------------------------------------
    def parse_design(self, data: dict[str, Any], source: str = "design") -> dict[str, Any]:
        """A design of the space: the decisions given, the baseline's for the others; a wrong
        shape (stage counts, one tier per layer, modules per device) is an InputError."""
        if not isinstance(data, dict):
            raise InputError("a mapping design is a table", file=source, value=type(data).__name__)
        design = parse_mapping_design(self.model, {**self.baseline(), **data}, source=source)
        shape = [v for v in structural_violations(self.model, design) if v.startswith(SHAPE_VIOLATIONS)]
        if shape:
            raise InputError("not a design of this instance: " + "; ".join(shape), file=source,
                             expected="a design like the instance's baseline (`codesign show NAME --json`)")
        return design.as_dict()

    def assess(self, design: dict[str, Any]) -> Assessment:
        p = self.model
        ev = evaluate_mapping(p, parse_mapping_design(p, design, source="design"))
        internal = ev.period_s if p.objective == "tokens_per_s" else ev.energy_per_token_J
        metrics = {
            "tokens_per_s": ev.tokens_per_s,
            "tpot_s": ev.tpot_s,
            "energy_per_token_J": ev.energy_per_token_J,
            # the average power of the whole pipeline: energy per token x tokens per second
            "system_power_W": ev.energy_per_token_J * ev.tokens_per_s,
            "period_s": ev.period_s,
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
        return Assessment(design, ev.feasible, ev.objective, internal, metrics, tuple(ev.violations), (), ev)

    def to_user(self, internal: float) -> float:
        p = self.model
        return p.micro_batch / internal if p.objective == "tokens_per_s" else internal

    @property
    def internal_description(self) -> str:
        if self.metric == "tokens_per_s":
            return f"the pipeline period in s: tokens/s = {self.model.micro_batch} / it"
        return "energy per token in J"

    # --- the MIP ----------------------------------------------------------------------------
    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        """(No presolve removes designs from this kind's MIP: ``presolve`` changes nothing.)"""
        mm = build_mapping(self.model)
        design_vars = np.array([*mm.n, *mm.cw.values(), *mm.ck.values(), *mm.a.values()], dtype=np.int64)
        return Formulation(
            mip=mm.mip, objective_unit=mm.objective_unit, decode=lambda x: mm.decode(x).as_dict(),
            design_vars=design_vars, stats=dict(mm.stats), backend_options=BACKEND_OPTIONS,
        )

    def brute_force(self) -> BruteForce:
        r = brute_force_mapping(self.model)
        best = None if r.design is None else self.assess(r.design.as_dict())
        return BruteForce(best, r.points, r.feasible_points)

    # --- views -------------------------------------------------------------------------------
    def lints(self) -> list[Lint]:
        return render.lints(self.inst)

    def summary(self) -> dict[str, Any]:
        return render.summary(self.inst, self.model)

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:
        render.print_summary(console, summary)

    def render_design(self, console: Any, assessment: Assessment) -> None:
        render.print_design(console, self.model, assessment.design, assessment.detail)

    def explain(self, *, solver: str, time_limit: float | None, progress: Any = None) -> dict[str, Any]:
        """Why no mapping is feasible: the tpot budget (with the least tpot any design reaches, from
        a solve without it) or memory capacity (the bytes to hold against the room); a feasible
        instance says so."""
        p = self.model
        if (answer := feasible_answer(self, solver, time_limit)) is not None:
            return answer
        conflicts: list[dict[str, Any]] = []
        if p.tpot_budget_s is not None:
            least = least_tpot(self, solver, time_limit)
            if least is not None:
                msg = f"the tpot budget {p.tpot_budget_s:.6g} s: without it the instance is feasible"
                if least.get("value") is not None:
                    msg += f", and the least tpot any design reaches is {least['value']:.6g} s (the budget must be at least that)"
                conflicts.append({"name": "budgets.tpot_s", "message": msg, "least_feasible_value": least.get("value")})
                return explanation(conflicts)
        lay = p.layer
        need = p.layers * (lay.w_store_B + lay.kv_store_B) + p.first_store_B + p.last_store_B
        room = sum(x.local_capacity_B + x.host_capacity_B for x in p.devices)
        room += sum(t.capacity_B for t in p.tiers if t.kind == "pool" and (p.paper_mode or any(x.ports for x in p.devices)))
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
        return explanation(conflicts)


def feasible_answer(problem: Problem, solver: str, time_limit: float | None) -> dict[str, Any] | None:
    """The explanation of a feasible instance (a solve finds a design the model accepts), else None."""
    sol = solve(problem, solver=solver, time_limit=time_limit)
    if sol.termination.startswith("interrupted"):
        raise KeyboardInterrupt
    if sol.design is not None and sol.feasible:
        return {"feasible": True, "conflicts": [], "relaxations": [], "note": "the instance is feasible",
                "complete": True, "interrupted": False}
    return None


def least_tpot(problem: Problem, solver: str, time_limit: float | None) -> dict[str, Any] | None:
    """Without its tpot budget and maximising tokens/s (the least period is the least tpot): the
    least tpot any design reaches (``value`` None when the solve stopped short of the proof), or
    None when the instance is infeasible even without the budget."""
    raw = copy.deepcopy(problem.data)
    raw["budgets"].pop("tpot_s", None)
    raw["objective"] = {"metric": "tokens_per_s"}
    free = solve(type(problem).from_data(raw, source=f"{problem.name} without its tpot budget",
                                         calibration=problem.calibration), solver=solver, time_limit=time_limit)
    if free.status not in ("optimal", "feasible"):
        return None
    return {"value": free.metrics["tpot_s"] if free.status == "optimal" else None}


def explanation(conflicts: list[dict[str, Any]]) -> dict[str, Any]:
    """An explanation record's fields for a kind that names its conflicts without relaxations."""
    return {"feasible": False, "conflicts": conflicts, "relaxations": [], "note": "", "complete": True,
            "interrupted": False}
