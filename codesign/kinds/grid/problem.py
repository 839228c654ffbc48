"""The hardware/schedule grid kind: hardware knobs (DRAM layers, TSVs, clock, area, chip, pooled
ports) and, per workload, the parallel layout and batch, each from a finite domain
(``instances/*.toml``; schema :mod:`codesign.kinds.grid.spec`, MIP
:mod:`codesign.kinds.grid.formulation`, formulations/codesign.md).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.markup import escape

from codesign.errors import InputError
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
from codesign.kinds.grid import boxes, factored
from codesign.kinds.grid import explain as grid_explain
from codesign.kinds.grid import spec as grid_spec
from codesign.kinds.grid.design import parse_design
from codesign.kinds.grid.formulation import build, formulation_of
from codesign.kinds.grid.generate import scaled_instance
from codesign.kinds.grid.lints import lint
from codesign.kinds.grid.space import brute_force, space_size
from codesign.kinds.grid.tiebreak import least_hardware_metric
from codesign.model.evaluate import OBJECTIVE_METRIC, evaluate, objective_from_internal

#: every ``evaluate`` metric of one workload that a multi-workload record lists per workload
#: the system keys left out of the content where unset (``Grid.data``)
UNSET_SYSTEM_KEYS = ("torus", "allreduce", "engine")
PER_WORKLOAD_HEADLINE = ("tokens_per_s", "ttft_s", "tpot_s", "energy_per_token_J")

#: the group (``kinds.base.DECISION_GROUPS``) of each schedule decision; every other decision of a
#: grid instance (the chip, its knobs, pool ports) is "hardware"
SCHEDULE_GROUPS = {"tp": "parallelism", "pp": "parallelism", "ep": "parallelism", "batch": "parallelism",
                   "attention_dp": "parallelism", "ep_all_to_all": "parallelism", "overlap": "parallelism", "weights_tier": "mapping", "kv_tier": "mapping"}


def decision_group(name: str) -> str:
    """The group of a grid decision by name (``llama70b.tp``: a workload's ``tp``)."""
    return SCHEDULE_GROUPS.get(name.rsplit(".", 1)[-1], "hardware")


@register
class Grid(InstanceProblem):
    """A hardware/schedule instance: wraps :class:`codesign.kinds.grid.spec.Instance`."""

    generator = staticmethod(scaled_instance)
    kind: ClassVar[str] = "grid"
    objectives: ClassVar[tuple[str, ...]] = tuple(OBJECTIVE_METRIC)
    takes_budgets: ClassVar[bool] = True
    load_instance = staticmethod(grid_spec.load_instance)
    instance_from_data = staticmethod(grid_spec.instance_from_data)

    def __init__(self, inst: grid_spec.Instance, *, formulation: str = "auto"):
        super().__init__(inst)
        #: how the hardware enters the MIP: enumerated designs, factored knobs, boxes, or auto (factored.py)
        self.formulation = formulation

    @property
    def data(self) -> dict[str, Any]:
        data = self.inst.spec.model_dump(mode="json")
        # system keys added after records were stored (model/topology.py) are left out where unset:
        # an instance that does not set them keeps the content hash it had
        data["system"] = {k: v for k, v in data["system"].items() if v is not None or k not in UNSET_SYSTEM_KEYS}
        # likewise a workload's routing (model.md eq. 2.14b), added after records were stored
        data["workloads"] = [{k: v for k, v in w.items() if v is not None or k != "routing"} for w in data["workloads"]]
        return data

    # --- the question -----------------------------------------------------------------------
    @property
    def metric(self) -> str:
        return self.inst.objective.metric

    @property
    def sense(self) -> Sense:
        return self.inst.objective.resolved_sense  # type: ignore[return-value]

    def decisions(self) -> list[DecisionInfo]:
        return [DecisionInfo(d.name, tuple(d.domain), decision_group(d.name)) for d in self.inst.decisions]

    def space_size(self) -> int:
        return space_size(self.inst)

    def baseline(self) -> dict[str, Any]:
        return self.inst.baseline()

    # --- the model --------------------------------------------------------------------------
    def parse_design(self, data: dict[str, Any], source: str = "design") -> dict[str, Any]:
        return parse_design(self.inst, data, source=source)

    def assess(self, design: dict[str, Any]) -> Assessment:
        ev = evaluate(self.inst, design)
        metrics = dict(ev.metrics)
        if len(self.inst.workloads) > 1:
            for w, vals in ev.workload_metrics.items():
                metrics.update({f"{w}.{k}": v for k, v in vals.items()})
        audit = tuple(AuditRow(a.name, a.value, a.limit, a.unit, a.ok) for a in ev.audit)
        violations = tuple(f"layout rule broken: {s}" for s in ev.structural) + tuple(
            f"{a.name}: {a.value:.6g} > {a.limit:.6g} {a.unit}".rstrip() for a in ev.audit if not a.ok)
        return Assessment(dict(ev.design), ev.feasible, ev.objective, ev.internal_objective, metrics, violations,
                          audit, ev)

    def to_user(self, internal: float) -> float:
        return objective_from_internal(self.inst, internal)

    @property
    def internal_description(self) -> str:
        total = sum(w.weight for w in self.inst.workloads)
        if self.metric == "tokens_per_s":
            return (f"the weighted time per token, Σ weight x s/token over the workloads, in s: tokens/s = "
                    f"{total:g} / it")
        return f"Σ weight x {self.metric} over the workloads (SI): {self.metric} = it / {total:g}"

    # --- the MIP ----------------------------------------------------------------------------
    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        if factored.chosen(self.inst, self.formulation):
            return factored.formulate(self.inst, solver)
        comp = build(self.inst, integer_grid=solver == "cpsat", decompose=presolve)
        return formulation_of(comp)

    def own_search(self, solver: str, time_limit: float | None) -> Any | None:
        """The box branch-and-bound (:mod:`codesign.kinds.grid.boxes`) when asked for
        (``--formulation boxes``), and under ``auto`` (solver and formulation) where the factored
        formulation would be chosen: above 1e7 hardware designs the box search proves what the
        factored MIP does not (formulations/factored.md §6). Else None: the MIP."""
        chosen = self.formulation == "boxes" or (
            self.formulation == "auto" and solver == "auto" and factored.chosen(self.inst, "auto"))
        if not chosen:
            return None
        try:
            return boxes.solve(self, time_limit=time_limit)
        except InputError:
            if self.formulation == "boxes":
                raise
            return None  # (auto: an instance the box search cannot bound goes to the factored MIP)

    def brute_force(self, *, deadline: float | None = None) -> BruteForce:
        r = brute_force(self.inst, deadline=deadline)
        best = None if r.design is None else self.assess(r.design)
        # the grid's enumeration keeps each hardware design's best schedule and prunes by the
        # incumbent, so it does not count feasible points (optimal_count counts the tied optima)
        return BruteForce(best, r.points, None, r.complete)

    # --- views -------------------------------------------------------------------------------
    def lints(self) -> list[Lint]:
        return [Lint(x.code, x.severity, x.message, dict(x.numbers)) for x in lint(self.inst)]  # type: ignore[arg-type]

    def summary(self) -> dict[str, Any]:
        inst = self.inst
        return {
            "workloads": [w.model_dump() for w in inst.workloads],
            "system": inst.system.model_dump(),
            "hardware": {"family": inst.hardware.family, "chip": inst.hardware.chip, "stack": inst.hardware.stack},
            "budgets": inst.budgets.model_dump(exclude_none=True),
        }

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:
        budgets = {k: v for k, v in summary["budgets"].items() if k != "custom"}
        if budgets:
            console.print("budgets: " + ", ".join(f"{k} <= {v:g}" for k, v in budgets.items()))
        for b in summary["budgets"].get("custom", []):
            console.print(f"budget {b['name']}: {b['expr']}")

    def render_design(self, console: Any, assessment: Assessment) -> None:
        shown = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in assessment.design.items())
        console.print(f"design: {escape(shown)}", highlight=False)

    # --- variants ------------------------------------------------------------------------------
    def with_budgets(self, texts: list[str]) -> Grid:
        return Grid(grid_spec.with_budgets(self.inst, texts), formulation=self.formulation) if texts else self

    def with_objective(self, metric: str | None) -> Grid:
        return Grid(grid_spec.with_objective(self.inst, metric), formulation=self.formulation) if metric is not None else self

    def with_formulation(self, formulation: str) -> Grid:
        """The same instance compiled ``enumerated``, ``factored``, searched by ``boxes``, or ``auto`` (factored.FORMULATIONS)."""
        factored.chosen(self.inst, formulation)  # an unknown name is an InputError here
        return Grid(self.inst, formulation=formulation)

    def budget_texts(self) -> list[str]:
        return [b.expr for b in self.inst.spec.budgets.custom if b.name.startswith("cli-")]

    def least_hardware_metric(self, metric: str) -> Assessment | None:
        """The feasible design with the least hardware ``metric`` (:mod:`codesign.kinds.grid.tiebreak`)."""
        return least_hardware_metric(self, metric)

    def explain(self, *, solver: str, time_limit: float | None, progress: Any = None) -> dict[str, Any]:
        return grid_explain.explain(self, solver=solver, time_limit=time_limit, progress=progress)
