"""The training kind: the parallel layout, ZeRO stage, micro-batch, recomputation and collective
paths of one training step of a dense transformer (``kind = "training"``; schema
:mod:`codesign.kinds.training.spec`, model :mod:`codesign.model.training`, MIP
:mod:`codesign.kinds.training.formulation`, formulations/training.md).

The baseline, unless the file gives one, is the best design whose every collective stays on
NVLink and InfiniBand (the model ranks the electrical-only designs): ``evaluate`` of an instance
against ``solve`` of it is best against best.
"""

from __future__ import annotations

import copy
import time
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from codesign.errors import InputError, did_you_mean
from codesign.kinds.base import (
    Assessment,
    AuditRow,
    BruteForce,
    DecisionInfo,
    Formulation,
    InstanceProblem,
    Lint,
    Sense,
    register,
)
from codesign.kinds.fixed import BACKEND_OPTIONS
from codesign.kinds.training import render
from codesign.kinds.training.formulation import build_training
from codesign.kinds.training.spec import build_setup, load_training, training_from_data
from codesign.model.training import (
    CLASSES,
    OBJECTIVES,
    TrainingDesign,
    TrainingEvaluation,
    best,
    canonical,
    design_problems,
    enumerate_designs,
    evaluate,
    internal,
    user_value,
)

DESIGN_KEYS = ("tp", "pp", "zero", "micro_batch", "recompute", "tp_path", "dp_path", "pp_path")


@register
class Training(InstanceProblem):
    kind: ClassVar[str] = "training"
    objectives: ClassVar[tuple[str, ...]] = tuple(OBJECTIVES)
    default_solver: ClassVar[str] = "highs"

    load_instance = staticmethod(load_training)
    instance_from_data = staticmethod(training_from_data)

    @cached_property
    def setup(self):
        return build_setup(self.inst)

    @cached_property
    def designs(self) -> list[TrainingDesign]:
        return enumerate_designs(self.setup)

    @cached_property
    def evaluations(self) -> list[TrainingEvaluation]:
        return [evaluate(self.setup, d) for d in self.designs]

    # --- the question -------------------------------------------------------------------------
    @property
    def metric(self) -> str:
        return self.setup.objective

    @property
    def sense(self) -> Sense:
        return "max" if self.metric == "tokens_per_s" else "min"

    def decisions(self) -> list[DecisionInfo]:
        s = self.setup
        return [
            DecisionInfo("tp", s.tp_options, "parallelism"),
            DecisionInfo("pp", s.pp_options, "parallelism"),
            DecisionInfo("zero", s.zero_options, "parallelism"),
            DecisionInfo("micro_batch", s.micro_batch_options, "parallelism"),
            DecisionInfo("recompute", s.recompute_options, "mapping"),
            *(DecisionInfo(f"{c}_path", s.paths, "mapping") for c in CLASSES),
        ]

    def space_size(self) -> int:
        return len(self.designs)

    @cached_property
    def _electrical_best(self) -> TrainingDesign | None:
        return best(self.setup, [d for d in self.designs if "appliance" not in (d.tp_path, d.dp_path, d.pp_path)])[0]

    def baseline(self) -> dict[str, Any]:
        if self.inst.spec.baseline is not None:
            return dict(self.inst.spec.baseline)
        top = self._electrical_best
        return (top or self.designs[0]).as_dict()

    @property
    def baseline_description(self) -> str:
        if self.inst.spec.baseline is not None:
            return "the instance's [baseline]"
        if self._electrical_best is None:
            return "the space's first design (no NVLink/InfiniBand-only design is feasible)"
        return "the best design whose collectives all stay on NVLink and InfiniBand (best against best)"

    # --- the model --------------------------------------------------------------------------------
    def parse_design(self, data: dict[str, Any], source: str = "design") -> dict[str, Any]:
        if not isinstance(data, dict):
            raise InputError("a training design is a table", file=source, value=type(data).__name__)
        unknown = [k for k in data if k not in DESIGN_KEYS]
        if unknown:
            raise InputError("not a decision of a training design", file=source, key=unknown[0],
                             expected=", ".join(DESIGN_KEYS), suggestion=did_you_mean(unknown[0], DESIGN_KEYS))
        full = {**self.baseline(), **data}
        types = {"tp": int, "pp": int, "zero": int, "micro_batch": int, "recompute": bool,
                 "tp_path": str, "dp_path": str, "pp_path": str}
        for k, t in types.items():
            v = full.get(k)
            if type(v) is not t:
                raise InputError(f"{k} must be a{'n integer' if t is int else ' boolean' if t is bool else ' string'}",
                                 file=source, key=k, value=v)
        d = TrainingDesign(**{k: full[k] for k in DESIGN_KEYS})
        wrong = design_problems(self.setup, d)
        if wrong:
            raise InputError("not a design of this instance: " + "; ".join(wrong), file=source,
                             expected="a design like the instance's baseline (`codesign show NAME --json`)")
        return canonical(self.setup, d).as_dict()

    def assess(self, design: dict[str, Any]) -> Assessment:
        s = self.setup
        d = TrainingDesign(**{k: design[k] for k in DESIGN_KEYS})
        ev = evaluate(s, d)
        metrics = {
            "tokens_per_s": ev.tokens_per_s,
            "energy_per_token_J": ev.energy_per_token_J,
            "system_power_W": ev.system_power_W,
            "energy_per_step_J": ev.energy_per_step_J,
            "network_energy_per_step_J": ev.network_J,
            **{k: v for k, v in ev.as_dict().items()
               if k not in ("feasible", "violations", "tokens_per_s", "energy_per_token_J", "system_power_W",
                            "energy_per_step_J", "network_J")},
        }
        audit = [AuditRow("memory per device", ev.memory_B_per_device, s.capacity_B, "B",
                          ev.memory_B_per_device <= s.capacity_B * (1 + 1e-9))]
        if s.step_time_budget_s is not None:
            audit.append(AuditRow("step time", ev.step_s, s.step_time_budget_s, "s", "step time" not in " ".join(ev.violations)))
        if s.power_budget_W is not None:
            audit.append(AuditRow("power", ev.system_power_W, s.power_budget_W, "W", "power" not in " ".join(ev.violations)))
        objective = ev.tokens_per_s if s.objective == "tokens_per_s" else internal(s, ev)
        return Assessment(design, ev.feasible, objective, internal(s, ev), metrics, tuple(ev.violations), tuple(audit), ev)

    def to_user(self, internal_value: float) -> float:
        return user_value(self.setup, internal_value)

    @property
    def internal_description(self) -> str:
        if self.metric == "tokens_per_s":
            return f"the step time in s: tokens/s = {self.setup.tokens_per_step} / it"
        return f"{self.metric} in J"

    # --- the MIP ------------------------------------------------------------------------------
    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        """(No presolve: every design is a column; ``presolve`` changes nothing.)"""
        tm = build_training(self.setup, self.designs, self.evaluations)
        return Formulation(mip=tm.mip, objective_unit=tm.objective_unit, decode=tm.decode, design_vars=tm.x,
                           onehot=True, stats=dict(tm.stats), backend_options=BACKEND_OPTIONS,
                           describe=lambda var: tm.designs[int(np.flatnonzero(tm.x == var)[0])].as_dict())

    def brute_force(self, *, deadline: float | None = None) -> BruteForce:
        """Every design evaluated afresh by the model (not the cached evaluations the MIP is built from)."""
        s = self.setup
        top, top_val, feasible, done = None, float("inf"), 0, 0
        for d in enumerate_designs(s):
            if deadline is not None and done and time.perf_counter() > deadline:
                break
            done += 1
            ev = evaluate(s, d)
            if ev.feasible:
                feasible += 1
                if internal(s, ev) < top_val:
                    top, top_val = d, internal(s, ev)
        best_a = None if top is None else self.assess(top.as_dict())
        return BruteForce(best_a, len(self.designs), feasible, done == len(self.designs))

    # --- variants and views -----------------------------------------------------------------------
    def with_objective(self, metric: str | None) -> Training:
        if metric is None:
            return self
        if metric not in self.objectives:
            raise InputError("not an objective of training instances", key="--objective", value=metric,
                             expected=" | ".join(self.objectives), suggestion=did_you_mean(metric, self.objectives))
        raw = copy.deepcopy(self.data)
        raw["objective"] = {"metric": metric}
        return Training(training_from_data(raw, source=str(self.source or self.name), calibration=self.calibration))

    def lints(self) -> list[Lint]:
        return render.lints(self.inst)

    def summary(self) -> dict[str, Any]:
        return render.summary(self.inst, self.setup)

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:
        render.print_summary(console, summary)

    def render_design(self, console: Any, assessment: Assessment) -> None:
        render.print_design(console, assessment)
