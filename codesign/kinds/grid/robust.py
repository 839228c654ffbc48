"""Robust multi-workload designs (``solve --robust``): one hardware design for several workloads
that minimises the worst relative regret against each workload's own optimum.

For workload w with its own proven optimum opt_w (the instance with w alone: same hardware space,
budgets and w's SLOs, solved through the driver), a design's regret is

    regret_w = 1 - value_w / opt_w      (a maximised metric: tokens/s)
    regret_w = (value_w - opt_w) / opt_w (a minimised one: J/token, TPOT, TTFT)

In the model's SI form m_w (s/token for tokens/s, else the metric itself; the smaller the better)
both are increasing functions of the ratio ρ_w = m_w / m*_w (1 - 1/ρ_w and ρ_w - 1), so the
worst regret is that function of max_w ρ_w, and the MIP minimises an epigraph variable

    σ >= m_w(design) / m*_w   for every workload w,

each m_w the model's form compiled exactly over the one-hots (the same compilation as the
weighted-sum objective, :func:`codesign.kinds.grid.formulation.compile_form`). The internal
objective the driver verifies and proves is σ; the record states the worst regret, and every
workload's regret and optimum.

The fast path: every constraint involves the hardware alone or one workload and the hardware, so
for a fixed hardware design each workload's best schedule is independent of the others and
σ(h) = max_w min_s m_w(s, h) / m*_w is exact (:func:`codesign.kinds.grid.space.workload_values`,
the model's vectorised evaluation). The presolve keeps the hardware designs whose σ(h) is within
``DECOMPOSE_KEEP_RTOL`` of the least (the MIP proves the optimum among them), then drops designs
another dominates (a dominated design has no smaller m_w for any workload: exact for σ too).
The same values are the robust problem's brute force.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from codesign.errors import InputError
from codesign.kinds.base import Assessment, BruteForce, Formulation, Sense
from codesign.kinds.grid.formulation import (
    DECOMPOSE_KEEP_RTOL,
    DECOMPOSE_MAX_PAIRS,
    INTEGER_RESOLUTION,
    Compiled,
    _hardware_ok,
    add_schedule_choice,
    add_workload_constraints,
    compile_form,
    formulation_of,
    hardware_columns,
    nondominated,
)
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.space import build_tables, design_of, workload_values
from codesign.mip import linearize as lin
from codesign.mip.program import MIP
from codesign.model.budgets import parse_budget
from codesign.model.evaluate import OBJECTIVE_METRIC, constraints, workload_forms
from codesign.proof import records
from codesign.proof.driver import solve
from codesign.proof.tolerances import GAP_TOL

#: the record's objective metric of a robust solve
METRIC = "worst_regret"


def regret(sense: str, ratio: float) -> float:
    """A workload's relative regret from ρ = m_w / m*_w (see the module docstring)."""
    if sense == "max":
        return 1.0 - 1.0 / ratio if ratio > 0 else -math.inf
    return ratio - 1.0


@dataclass(frozen=True)
class WorkloadOptimum:
    """One workload's own optimum: the instance with that workload alone, solved by the driver."""

    workload: str
    objective: float | None  # in the instance's metric (tokens/s of that workload, J, s)
    value_SI: float | None  # m*_w: its model form (s/token for tokens/s)
    status: str
    solver: str
    time_s: float
    design: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "value_SI": self.value_SI, "status": self.status, "solver": self.solver,
                "time_s": self.time_s, "design": self.design}


def alone(grid: Grid, workload: str) -> Grid:
    """The instance with one workload: the same hardware space, budgets, objective and that
    workload's SLOs (the baseline, a presentation key, is the kind's default)."""
    data = dict(grid.data)
    data["workloads"] = [w for w in data["workloads"] if w["name"] == workload]
    data.pop("baseline", None)
    data.pop("baseline_description", None)
    data["name"] = f"{grid.name}.{workload}"
    return Grid.from_data(data, source=f"{grid.name} with {workload} alone", calibration=grid.calibration)


def check_robust(grid: Any) -> None:
    """--robust needs a hardware/schedule instance with several workloads and budgets that do not
    name one workload's metrics (the single-workload instances could not state them)."""
    if not isinstance(grid, Grid):
        raise InputError(f"--robust applies to hardware/schedule instances with several workloads; {grid.name} is "
                         f"a {grid.kind} instance", key="--robust", suggestion="leave --robust out")
    names = [w.name for w in grid.inst.workloads]
    if len(names) < 2:
        raise InputError(f"--robust needs several workloads; {grid.name} has one", key="--robust",
                         suggestion="leave --robust out: the optimum is the robust design")
    for b in grid.inst.spec.budgets.custom:
        if any(t.workload is not None for t in parse_budget(b.expr, names).terms):
            raise InputError("--robust takes budgets on hardware metrics only: a budget on one workload's metric "
                             "has no meaning for the others' own optima", key="--budget", value=b.expr,
                             suggestion="state the limit as the workload's SLO in the instance file")


class RobustGrid(Grid):
    """The grid instance with the robust objective: minimise σ = max_w m_w / m*_w (the record
    states the worst regret; :attr:`optima` are the m*_w)."""

    def __init__(self, grid: Grid, optima: dict[str, float]):
        super().__init__(grid.inst)
        self.optima = dict(optima)
        self.form_metric = OBJECTIVE_METRIC[grid.inst.objective.metric]
        self.base_sense = grid.sense

    @property
    def metric(self) -> str:
        return METRIC

    @property
    def sense(self) -> Sense:
        return "min"

    @property
    def content_hash(self) -> str:
        text = f"{super().content_hash} robust {sorted(self.optima.items())!r}"
        return hashlib.sha256(text.encode()).hexdigest()

    def ratios(self, workload_metrics: dict[str, dict[str, float]]) -> dict[str, float]:
        return {w: workload_metrics[w][self.form_metric] / m for w, m in self.optima.items()}

    def assess(self, design: dict[str, Any]) -> Assessment:
        a = super().assess(design)
        ratios = self.ratios(a.detail.workload_metrics)
        worst = max(ratios.values())
        metrics = {**a.metrics, METRIC: regret(self.base_sense, worst),
                   **{f"{w}.regret": regret(self.base_sense, r) for w, r in ratios.items()}}
        return replace(a, objective=regret(self.base_sense, worst), internal=worst, metrics=metrics)

    def to_user(self, internal: float) -> float:
        return regret(self.base_sense, internal)

    @property
    def internal_description(self) -> str:
        word = "1 - 1/it" if self.base_sense == "max" else "it - 1"
        return f"the worst ratio max_w {self.form_metric}_w / (its own optimum): worst regret = {word}"

    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        return formulation_of(build_robust(self.inst, self.optima, integer_grid=solver == "cpsat", decompose=presolve))

    def brute_force(self, *, deadline: float | None = None) -> BruteForce:
        tables = build_tables(self.inst)
        values, args, complete = workload_values(self.inst, tables, deadline=deadline)
        sigma = np.max([values[w] / m for w, m in self.optima.items()], axis=0)
        if not np.isfinite(sigma).any():
            return BruteForce(None, self.space_size(), 0, complete)
        h = int(np.argmin(sigma))
        design = design_of(self.inst, tables, h, {w: int(args[w][h]) for w in args})
        return BruteForce(self.assess(design), self.space_size(), None, complete)  # (feasible points not counted)


def build_robust(inst, optima: dict[str, float], *, integer_grid: bool = False, decompose: bool = True) -> Compiled:
    """The exact MIP of the robust objective (module docstring): the instance's one-hots and
    constraints, and minimise σ with σ >= m_w / m*_w for each workload."""
    tables = build_tables(inst)
    cons = constraints(inst, tables.hw, tables.scheds)
    comp = Compiled(inst, tables, MIP(name=f"{inst.name}-robust"), np.zeros(0, dtype=np.int64),
                    np.zeros(0, dtype=np.int64), {}, {}, 1.0)
    comp.integer_grid = integer_grid
    ok = _hardware_ok(inst, tables, cons)
    comp.pruned["hardware"] = int((~ok).sum())
    rows = np.flatnonzero(ok)
    if decompose:
        rows = robust_presolve(comp, cons, rows, optima)
    costs, gains = hardware_columns(inst, tables, cons)
    hw = tables.hw
    keep = nondominated(np.column_stack([hw.column(c)[rows] for c in costs]) if costs else np.zeros((len(rows), 0)),
                        np.column_stack([hw.column(c)[rows] for c in gains]) if gains else np.zeros((len(rows), 0)))
    comp.pruned["hardware-dominated"] = int(len(rows) - keep.sum())
    comp.hw_rows = rows[keep]
    if len(comp.hw_rows) == 0:
        comp.empty_reason = comp.empty_reason or "no hardware design meets the hardware-only constraints"
        return comp
    comp.x = lin.onehot(comp.mip, "hw", [str(int(r)) for r in comp.hw_rows])
    add_schedule_choice(comp, memory=any(c.name.startswith("memory-capacity") for c in cons))
    if comp.empty_reason:
        return comp
    add_workload_constraints(comp, cons)
    metric = OBJECTIVE_METRIC[inst.objective.metric]
    exprs = []
    for w in inst.workloads:
        form = workload_forms(tables.scheds[w.name], w.precision)[metric]
        exprs.append(compile_form(comp.mip, f"robust[{w.name}]", form, comp, w.name, optima[w.name]))
    ub = max(comp.mip.row_bounds(*e)[1] for e in exprs)
    sigma = lin.epigraph_max(comp.mip, "robust:worst-ratio", exprs, ub, INTEGER_RESOLUTION if integer_grid else None)
    comp.mip.set_objective(*sigma)
    comp.objective_unit = 1.0
    return comp


def robust_presolve(comp: Compiled, cons: list, rows: np.ndarray, optima: dict[str, float]) -> np.ndarray:
    """The hardware designs (of ``rows``, which meet the hardware-only constraints) whose exact
    σ(h) is within ``DECOMPOSE_KEEP_RTOL`` of the least; all of them when the evaluation would
    exceed ``DECOMPOSE_MAX_PAIRS`` pairs or a constraint couples workloads."""
    inst, tables = comp.inst, comp.tables
    names = {w.name for w in inst.workloads}
    if any(c.workload is not None and c.workload not in names for c in cons):
        return rows
    pairs = len(rows) * sum(s.size for s in tables.scheds.values())
    if pairs == 0 or pairs > DECOMPOSE_MAX_PAIRS:
        return rows
    values, _, _ = workload_values(inst, tables, rows, cons=cons, hardware_checked=True)
    sigma = np.max([values[w] / m for w, m in optima.items()], axis=0)
    finite = np.isfinite(sigma)
    if not finite.any():
        comp.empty_reason = "the robust presolve's enumeration finds no feasible design"
        return rows[:0]
    best = float(sigma[finite].min())
    keep = finite & (sigma <= best * (1 + DECOMPOSE_KEEP_RTOL))
    comp.pruned["hardware-robust-bound"] = int(len(rows) - keep.sum())
    comp.presolve_best = best
    return rows[keep]


def workload_optima(grid: Grid, *, solver: str, time_limit: float | None = None,
                    threads: int | None = None) -> dict[str, WorkloadOptimum]:
    """Each workload's own optimum (:func:`alone`), proven by the driver within ``time_limit`` for
    them all; m*_w is the model's value of the proven design. Ctrl-C during one is re-raised."""
    metric = OBJECTIVE_METRIC[grid.inst.objective.metric]
    out: dict[str, WorkloadOptimum] = {}
    t0 = time.perf_counter()
    for w in grid.inst.workloads:
        sub = alone(grid, w.name)
        left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.01)
        sol = solve(sub, solver=solver, time_limit=left, threads=threads)
        if sol.termination.startswith("interrupted"):
            raise KeyboardInterrupt
        value = None
        if sol.design is not None:
            value = sub.assess(sub.parse_design(sol.design)).detail.workload_metrics[w.name][metric]
        out[w.name] = WorkloadOptimum(w.name, sol.objective, value, sol.status, sol.solver, sol.time_s, sol.design)
    return out


def best_among_ties(grid: Grid, problem: RobustGrid, sol: records.Solution, *, solver: str,
                    time_limit: float | None = None, threads: int | None = None) -> records.Solution:
    """A least worst regret is rarely reached by one design only, and the one a solver returns may
    be worse than another for every workload but the worst off (on deepstack-multi-workload it
    was: 5.2 % regret on llama8b where a tied design has none). So a second solve through the
    driver takes, among the designs with every ratio m_w / m*_w at most the proven σ* (per-workload
    budgets), the best of the instance's own weighted sum. Its design replaces the first when the
    model's worst regret of it equals σ*'s within ``GAP_TOL`` (the budgets hold within the model's
    feasibility tolerance, 1e-9); otherwise the first design stays. ``proof["tie_break"]`` says which."""
    sigma = float(sol.proof["internal_objective"])
    texts = [f"{w}.{problem.form_metric} <= {sigma * m!r}" for w, m in problem.optima.items()]
    tied = solve(grid.with_budgets(texts), solver=solver, time_limit=time_limit, threads=threads)
    note = {"status": tied.status, grid.metric: tied.objective, "budgets": texts, "time_s": tied.time_s}
    a = None if tied.status != "optimal" else problem.assess(problem.parse_design(tied.design))
    gap = None if a is None else records.user_gap("min", a.objective, sol.bound)
    if a is None or not a.feasible or gap is None or gap > GAP_TOL:
        sol.proof["tie_break"] = {**note, "used": False}
        return sol
    return records.solution(
        problem, solver=sol.solver, status=sol.status, best=a, bound=sol.bound,
        termination=f"{sol.termination}; among the designs of that worst regret, the best {grid.metric} "
                    f"({tied.status}, {tied.termination})",
        stats=sol.mip, build_s=sol.build_s, solve_s=sol.solve_s + tied.solve_s, time_s=sol.time_s + tied.time_s,
        proof={**sol.proof, "internal_objective": a.internal, "tie_break": {**note, "used": True}},
        solver_version=sol.solver_version, parameters=sol.parameters)


def solve_robust(grid: Grid, *, solver: str = "highs", time_limit: float | None = None, threads: int | None = None,
                 progress: Any = None) -> records.Solution:
    """The robust design's record (module docstring). Its ``proof["robust"]`` holds each workload's
    regret and own optimum. Proven only when every workload's optimum is proven (else the regrets
    are measured against incumbents: the status is at most "feasible" and no bound is stated); a
    workload that is infeasible alone makes the instance infeasible (the weighted solve says so)."""
    check_robust(grid)
    t0 = time.perf_counter()
    optima = workload_optima(grid, solver=solver, time_limit=time_limit, threads=threads)
    if any(o.status == "infeasible" for o in optima.values()):
        return solve(grid, solver=solver, time_limit=time_limit, threads=threads)
    left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.01)
    if any(o.value_SI is None for o in optima.values()):
        missing = [w for w, o in optima.items() if o.value_SI is None]
        raise InputError(f"--robust: no design found for {', '.join(missing)} alone within the time limit",
                         key="--time-limit", value=time_limit, suggestion="a longer --time-limit, or none")
    problem = RobustGrid(grid, {w: o.value_SI for w, o in optima.items()})
    sol = solve(problem, solver=solver, time_limit=left, threads=threads, progress=progress)
    if sol.status == "optimal":
        left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.01)
        sol = best_among_ties(grid, problem, sol, solver=solver, time_limit=left, threads=threads)
    unproven = [w for w, o in optima.items() if o.status != "optimal"]
    if unproven and sol.status == "optimal":
        sol.status, sol.bound, sol.gap = "feasible", None, None
        sol.termination += f"; the own optima of {', '.join(unproven)} are not proven (regrets against incumbents)"
    sol.time_s = time.perf_counter() - t0
    sol.proof["robust"] = {
        "regret": None if sol.metrics is None else {w: sol.metrics[f"{w}.regret"] for w in optima},
        "worst_regret": sol.objective,
        "workload_optima": {w: o.as_dict() for w, o in optima.items()},
        "weighted_objective": grid.metric,
    }
    return sol
