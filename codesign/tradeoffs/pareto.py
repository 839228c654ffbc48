"""The exact Pareto frontier between two metrics, each point a proven optimum.

ε-constraint on a finite design space: optimise one metric (the *driver*, an objective the
instance kind can optimise) subject to a budget on the other (the *bound* metric), tighten the
budget strictly past the point just found, and solve again until no design is left:

    point k = argopt { driver(d) : bound(d) better than bound(point k-1) by more than δ }

Each point is a proven optimum of its own solve (the one driver, :func:`codesign.proof.driver.solve`),
so every point is on the frontier or weakly dominated by a tie the next solve finds (ties are
dropped at the end). On a finite space the loop ends, and then the frontier is *complete*: a
non-dominated design whose bound metric lies between two consecutive points would have been the
optimum of the solve between them. δ is :data:`STEP_RTOL` relative (with :data:`STEP_ATOL` near 0):
points closer than that in the bound metric are one point.

Ties: many designs may share the driver's optimum (a mapping's tokens/s set by one stage, a grid's
by the same layout on several chips); each of them would cost one solve that finds a weakly
dominated point. Once two consecutive points tie in the driver metric (within δ), and when the
bound metric is an objective of the instance too, each ε-solve is followed by a *tie-breaking*
solve: optimise the bound metric under the same budget and a budget keeping the driver within δ
of the optimum just proven. Its optimum is the point of that tie level on the frontier (proven
like any other); when it improves nothing (no tie), the plain loop resumes until the next tie.
Where the bound metric is a hardware metric of a grid (power, area: no objective), the kind's
exact enumeration (:mod:`codesign.kinds.grid.tiebreak`) gives the least one under the same two
budgets instead of a solve.

With ``max_points`` (or a time limit) the loop stops early; what is proven then: every design
whose bound metric is better than the last point's is no better in the driver metric than the last
ε-solve's optimum (it satisfied that solve's budget too) — stated in the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codesign.errors import InputError, ModelError, did_you_mean
from codesign.kinds.base import Problem
from codesign.kinds.grid.tiebreak import NotApplicable
from codesign.model.budgets import DECISION_METRICS, HARDWARE_METRICS, WORKLOAD_METRICS
from codesign.proof.driver import AUTO, solve

#: the bound metric must improve by more than this (relative) from one point to the next; above the
#: model's feasibility tolerance (1e-9: a budget holds within it), so a budget tightened by it
#: excludes the point just found
STEP_RTOL = 1e-7
#: ... and by more than this (absolute, in the metric's unit) when it is near zero
STEP_ATOL = 1e-12
#: where a metric's value sits in a record's metrics when its name differs there
METRIC_KEY = {"memory_used_B": "memory_local_B"}


def sense_of(metric: str) -> str:
    """Throughput is maximised, everything else (time, energy, power, area, memory) minimised."""
    return "max" if metric == "tokens_per_s" else "min"


def known_metrics() -> list[str]:
    return [*HARDWARE_METRICS, *DECISION_METRICS, *WORKLOAD_METRICS]


def value_of(metric: str, metrics: dict[str, Any]) -> float:
    return float(metrics[METRIC_KEY.get(metric, metric)])


@dataclass
class Point:
    x: float
    y: float
    status: str
    objective: float
    design: dict[str, Any]
    metrics: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y, "status": self.status, "design": self.design, "metrics": self.metrics}


@dataclass
class Frontier:
    instance: str
    x: str
    y: str
    driver: str
    points: list[Point]
    complete: bool
    statement: str
    solves: int
    seconds: float
    step_rtol: float = STEP_RTOL
    dominated_dropped: int = 0
    #: solves (or a grid's enumerations) that found the best bounded metric among the designs tied
    #: with an optimum
    tiebreak_solves: int = 0
    notes: list[str] = field(default_factory=list)
    #: Ctrl-C stopped it: the points are those proven before
    interrupted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance, "x": self.x, "y": self.y, "x_sense": sense_of(self.x),
            "y_sense": sense_of(self.y), "optimised": self.driver, "points": [p.as_dict() for p in self.points],
            "complete": self.complete, "statement": self.statement, "solves": self.solves,
            "seconds": self.seconds, "step_rtol": self.step_rtol, "dominated_dropped": self.dominated_dropped,
            "tiebreak_solves": self.tiebreak_solves, "interrupted": self.interrupted,
            "notes": self.notes,
        }


def _check(problem: Problem, x: str, y: str) -> str:
    """The metric the solves optimise (the other is the budgeted one)."""
    for m, key in ((x, "--x"), (y, "--y")):
        if m not in known_metrics():
            raise InputError("not a metric", key=key, value=m, expected="a name `codesign metrics` lists",
                             suggestion=did_you_mean(m, known_metrics()))
    if x == y:
        raise InputError("a frontier needs two different metrics", key="--y", value=y)
    if not problem.takes_budgets:
        raise InputError(f"pareto needs budgets on a metric, which {problem.kind} instances do not take yet",
                         value=problem.name, expected="a hardware/schedule or mapping instance")
    budgetable = getattr(problem, "budget_metrics", None)  # None: every metric `codesign metrics` lists
    for m, key in ((x, "--x"), (y, "--y")):
        if budgetable is not None and m not in budgetable:
            raise InputError(f"not a metric of {problem.kind} instances", key=key, value=m,
                             expected=", ".join(budgetable), suggestion=did_you_mean(m, budgetable))
    drivable = [m for m in (x, y) if m in problem.objectives]
    if len(drivable) == 2 and "tokens_per_s" in drivable:
        # the other is optimised under a throughput budget (a bound on the time per token; on a
        # mapping, on the period variable itself), and optima tie less often in energy or latency
        # than in throughput: hetero-pipeline-405b drove energy to 54 points in 89 s, tokens/s to
        # 25 points (48 solves, tie-breaking ones included) in 150 s
        return next(m for m in drivable if m != "tokens_per_s")
    if drivable:
        return drivable[0]
    raise InputError("neither metric is one the instance can optimise", key="--x", value=f"{x}, {y}",
                     expected=f"one of them in {', '.join(problem.objectives)}")


def _tightened(metric: str, value: float) -> str:
    """The budget that keeps only designs strictly better than ``value`` in ``metric`` (by δ)."""
    step = max(STEP_RTOL * abs(value), STEP_ATOL)
    if sense_of(metric) == "max":
        return f"{metric} >= {value + step!r}"
    return f"{metric} <= {value - step!r}"


def _stated(metrics: dict[str, Any], design: dict[str, Any], *names: str) -> dict[str, Any]:
    """A record's metrics with the decisions among ``names`` (``dram_layers``, ...) from its design."""
    extra = {m: design[m] for m in names if METRIC_KEY.get(m, m) not in metrics and m in design}
    return {**metrics, **extra} if extra else metrics


def _within(metric: str, value: float) -> str:
    """The budget that keeps the designs no worse than ``value`` in ``metric`` by more than δ."""
    step = max(STEP_RTOL * abs(value), STEP_ATOL)
    if sense_of(metric) == "max":
        return f"{metric} >= {value - step!r}"
    return f"{metric} <= {value + step!r}"


def _close(u: float, v: float) -> bool:
    """Equal within the step tolerance (one point)."""
    return abs(u - v) <= max(STEP_RTOL * max(abs(u), abs(v)), STEP_ATOL)


def _strictly_better(metric: str, new: float, old: float) -> bool:
    return new > old if sense_of(metric) == "max" else new < old


def _dominates(a: Point, b: Point, x: str, y: str) -> bool:
    """a is at least as good as b in both metrics (within the step tolerance) and a different point."""
    def at_least(m: str, u: float, v: float) -> bool:
        tol = max(STEP_RTOL * max(abs(u), abs(v)), STEP_ATOL)
        return u >= v - tol if sense_of(m) == "max" else u <= v + tol
    return a is not b and at_least(x, a.x, b.x) and at_least(y, a.y, b.y)


def frontier(
    problem: Problem,
    x: str,
    y: str,
    *,
    solver: str = AUTO,
    max_points: int | None = None,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Frontier:
    """The exact frontier of ``problem`` between metrics ``x`` and ``y`` (module docstring)."""
    if max_points is not None and max_points < 1:
        raise InputError("--max-points is a positive count", key="--max-points", value=max_points)
    driver = _check(problem, x, y)
    # (--solver auto: each ε-solve carries a budget, and a budgeted mapping is solved by HiGHS)
    bounded = y if driver == x else x
    base = problem.with_objective(driver)
    # ties in the driven metric: once one shows, the best bounded metric among the designs tied with
    # each optimum is asked for directly (where the bounded metric is an objective too)
    tiebreak = problem.with_objective(bounded) if bounded in problem.objectives else None
    # ... or, for a hardware metric of a grid, by the kind's exact enumeration (no solve)
    least = getattr(problem, "least_hardware_metric", None) if tiebreak is None else None
    t0 = time.perf_counter()
    found: list[Point] = []
    budget: str | None = None
    solves = tiebreaks = 0
    tied = False
    complete, stopped = False, ""
    interrupted = False
    try:
        while True:
            if max_points is not None and len(found) >= max_points:
                stopped = f"--max-points {max_points}"
                break
            left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
            if left is not None and left <= 0:
                stopped = "the time limit"
                break
            p = base.with_budgets([budget]) if budget else base
            sol = solve(p, solver=solver, time_limit=left)
            solves += 1
            if sol.termination.startswith("interrupted"):
                raise KeyboardInterrupt
            if sol.status == "infeasible":
                complete = True
                break
            if sol.status != "optimal" or sol.metrics is None:
                stopped = f"a solve that ended {sol.status} ({sol.termination})"
                break
            status, metrics, design = sol.status, _stated(sol.metrics, sol.design, x, y), sol.design
            if found and not tied and (tiebreak is not None or least is not None):
                tied = _close(value_of(driver, found[-1].metrics), value_of(driver, metrics))
            objective, untied = sol.objective, value_of(bounded, metrics)
            if tied and least is not None:
                within = _within(driver, value_of(driver, metrics))
                try:
                    a = base.with_budgets([b for b in (budget, within) if b]).least_hardware_metric(bounded)
                except NotApplicable:
                    a, least, tied = None, None, False
                if a is not None:
                    tiebreaks += 1
                    metrics, design = _stated(a.metrics, a.design, x, y), a.design
                    tied = not _close(untied, value_of(bounded, metrics))
            elif tied:
                left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
                if left is not None and left <= 0:
                    stopped = "the time limit"
                    break
                within = _within(driver, value_of(driver, metrics))
                sol = solve(tiebreak.with_budgets([b for b in (budget, within) if b]), solver=solver, time_limit=left)
                solves += 1
                tiebreaks += 1
                if sol.termination.startswith("interrupted"):
                    raise KeyboardInterrupt
                if sol.status != "optimal" or sol.metrics is None:
                    stopped = f"a tie-breaking solve that ended {sol.status} ({sol.termination})"
                    break
                status, metrics, design = sol.status, _stated(sol.metrics, sol.design, x, y), sol.design
                # nothing tied with the optimum was better in the bounded metric: back to plain ε-solves
                tied = not _close(untied, value_of(bounded, metrics))
            point = Point(value_of(x, metrics), value_of(y, metrics), status, objective, design, metrics)
            if found and not _strictly_better(bounded, value_of(bounded, metrics), value_of(bounded, found[-1].metrics)):
                raise ModelError(f"pareto: the solve under {budget!r} returned {bounded} = "
                                 f"{value_of(bounded, metrics)!r}, not better than the last point's")
            found.append(point)
            if progress is not None:
                progress(f"{len(found)} points; last {x} = {point.x:.6g}, {y} = {point.y:.6g}")
            budget = _tightened(bounded, value_of(bounded, metrics))
    except KeyboardInterrupt:  # Ctrl-C: the points proven so far are the answer, incomplete
        stopped, interrupted = "Ctrl-C", True
    kept = [p for p in found if not any(_dominates(q, p, x, y) for q in found)]
    kept.sort(key=lambda p: p.x, reverse=sense_of(x) == "max")
    if complete:
        statement = (f"complete: {len(kept)} non-dominated points; no design is better in both {x} and {y} than "
                     f"one of them (points closer than {STEP_RTOL:g} relative in {bounded} are one)")
    elif found:
        last = found[-1]
        best = "at most" if sense_of(driver) == "max" else "at least"
        statement = (f"incomplete, stopped by {stopped}: each point found is proven optimal for its budget, and every "
                     f"design whose {bounded} is better than {value_of(bounded, last.metrics):.6g} (not explored) has "
                     f"{driver} {best} {last.objective:.6g}")
    else:
        statement = f"no point: stopped by {stopped}"
    return Frontier(problem.name, x, y, driver, kept, complete, statement, solves, time.perf_counter() - t0,
                    dominated_dropped=len(found) - len(kept), tiebreak_solves=tiebreaks, interrupted=interrupted)

