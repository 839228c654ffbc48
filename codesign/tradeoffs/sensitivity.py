"""How the proven optimum moves with a budget or a parameter: values, breakpoints, marginal values.

``--vary 'EXPR <= LO..HI step S'`` (or ``>=``) solves the instance with the budget ``EXPR <= v``
at each value v; ``--vary 'path.to.key=LO..HI step S'`` sets a numeric field of the instance (for
example ``system.pooled_bandwidth_GBps_per_device``). Every point is a proven solve through the one
driver, so each point equals ``solve --budget`` at that value.

Breakpoints: where the optimal design at one value is no longer optimal at the next (infeasible
there, or beaten beyond the tie tolerance), bisection (each step a proven solve) narrows the
interval in which it changes to :data:`BREAKPOINT_RTOL` of the range, then searches the rest of
the interval for further changes; each breakpoint states the optimal designs on either side. (A
solver may return another of several tied designs at another value, and a parameter may move the
optimum while the optimal design stays: neither is a breakpoint.) Marginal values are the change of the optimum per unit of the varied quantity between
neighbouring proven points (MIP duals mean nothing here: the optimum is a step function of a
budget on a finite space, and a difference quotient of proven optima is what it is worth).

The values of the range are independent solves: with ``workers`` they run side by side on a local
dask cluster through the sweep's :class:`~codesign.sweep.executor.Executor`; the bisections that
follow depend on each other and run here.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codesign.errors import InputError, ModelError
from codesign.kinds.base import Problem
from codesign.kinds.registry import from_data
from codesign.proof.driver import AUTO, solve
from codesign.proof.tolerances import CONFIRM_RTOL, MIN_ROUND_TIME_S
from codesign.sweep.job import Job, Outcome

#: a breakpoint is located to this fraction of the varied range
BREAKPOINT_RTOL = 1e-3
#: at most this many values (the grid, before bisection)
MAX_VALUES = 200
#: at most this many breakpoints are located
MAX_BREAKPOINTS = 100

_RANGE = r"(?P<lo>[-+0-9.eE]+)\s*\.\.\s*(?P<hi>[-+0-9.eE]+)(?:\s+step\s+(?P<step>[-+0-9.eE]+))?"
_BUDGET = re.compile(rf"^(?P<expr>.+?)\s*(?P<op><=|>=)\s*{_RANGE}\s*$")
_PARAM = re.compile(rf"^(?P<path>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)\s*=\s*{_RANGE}\s*$")


@dataclass(frozen=True)
class Vary:
    """What is varied: a budget (``expr``, ``op``) or an instance field (``path``), over values."""

    text: str
    values: tuple[float, ...]
    expr: str | None = None
    op: str | None = None
    path: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        return f"{self.expr} {self.op} v" if self.expr else f"{'.'.join(self.path or ())} = v"

    def apply(self, problem: Problem, v: float) -> Problem:
        if self.expr is not None:
            return problem.with_budgets([f"{self.expr} {self.op} {v!r}"])
        data = copy.deepcopy(problem.data)
        node = data
        for key in self.path[:-1]:  # type: ignore[index]
            node = node[key]
        node[self.path[-1]] = v  # type: ignore[index]
        return from_data(data, source=f"{problem.name} with {'.'.join(self.path)} = {v!r}", calibration=problem.calibration)  # type: ignore[arg-type]


def parse_vary(text: str, problem: Problem) -> Vary:
    """``EXPR <= LO..HI step S`` (or ``>=``) or ``a.b.c=LO..HI step S``; InputError otherwise."""
    expected = "'EXPR <= LO..HI step S' (a budget; >= also) or 'path.to.key=LO..HI step S' (a numeric instance field)"
    m = _BUDGET.match(text) or _PARAM.match(text)
    if m is None:
        raise InputError("not a range to vary", key="--vary", value=text, expected=expected)
    try:
        lo, hi = float(m["lo"]), float(m["hi"])
        step = float(m["step"]) if m["step"] else (hi - lo) / 10 if hi != lo else 1.0
    except ValueError:
        raise InputError("a range of numbers", key="--vary", value=text, expected=expected) from None
    if not all(math.isfinite(v) for v in (lo, hi, step)) or step <= 0 or hi < lo:
        raise InputError("a range LO..HI with LO <= HI and a positive step", key="--vary", value=text, expected=expected)
    count = math.floor((hi - lo) / step + 1e-9) + 1
    if count > MAX_VALUES:
        raise InputError(f"{count} values: at most {MAX_VALUES}", key="--vary", value=text, suggestion="a larger step")
    values = tuple(lo + i * step for i in range(count)) + (() if math.isclose(lo + (count - 1) * step, hi) else (hi,))
    if "expr" in m.groupdict() and m.groupdict().get("expr") is not None:
        if not problem.takes_budgets:
            raise InputError(f"--vary a budget: {problem.kind} instances take no budgets", key="--vary", value=text)
        try:  # the kind's own budget rules (a mapping's differ from a grid's)
            problem.with_budgets([f"{m['expr'].strip()} {m['op']} 1"])
        except InputError as exc:
            raise InputError(exc.message, key="--vary", value=text, expected=exc.expected,
                             suggestion=exc.suggestion) from None
        return Vary(text, values, expr=m["expr"].strip(), op=m["op"])
    path = tuple(m["path"].split("."))
    node: Any = problem.data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            raise InputError("the instance has no such field", key="--vary", value=m["path"],
                             expected="a numeric field of the instance (`codesign show NAME --json`)")
        node = node[key]
    if isinstance(node, bool) or not (node is None or isinstance(node, int | float)):
        raise InputError("the field is not a number", key="--vary", value=m["path"], expected="a numeric field")
    return Vary(text, values, path=path)


@dataclass
class Point:
    value: float
    status: str
    objective: float | None
    design: dict[str, Any] | None
    problem: Problem | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "status": self.status, "objective": self.objective, "design": self.design}


@dataclass
class Sensitivity:
    instance: str
    vary: str
    metric: str
    sense: str
    points: list[Point]
    breakpoints: list[dict[str, Any]]
    marginal: list[dict[str, Any]]
    solves: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    #: every value of the range solved and every breakpoint between them located (False: the time
    #: limit stopped it; what is listed holds)
    complete: bool = True
    #: Ctrl-C stopped it: the values and breakpoints are those proven before
    interrupted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "vary": self.vary, "objective_metric": self.metric, "sense": self.sense,
                "points": [p.as_dict() for p in self.points], "breakpoints": self.breakpoints,
                "marginal": self.marginal, "solves": self.solves, "seconds": self.seconds,
                "breakpoint_rtol": BREAKPOINT_RTOL, "complete": self.complete, "interrupted": self.interrupted,
                "notes": self.notes}


class _OutOfTime(Exception):
    """The run's time limit is spent."""


def sensitivity(
    problem: Problem,
    vary: str,
    *,
    solver: str = AUTO,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int | None = None,
) -> Sensitivity:
    """The proven optimum at each value, the breakpoints and the marginal values (module docstring).
    ``time_limit`` covers the whole run: each solve gets what is left, and when it is spent the
    values and breakpoints found so far are returned (``complete`` False; on a cluster each value's
    solve gets the whole limit). ``workers`` (>= 1): the range's values on a local dask cluster of
    that many workers (None or 0: one after another here)."""
    v = parse_vary(vary, problem)
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    solves = 0

    def point(value: float, p: Problem, status: str, objective: float | None, design: dict[str, Any] | None) -> Point:
        nonlocal solves
        solves += 1
        if progress is not None:
            progress(f"{solves} solves; {v.label} at v = {value:.6g}: {status}")
        optimal = status == "optimal"
        return Point(value, status, objective if optimal else None, design if optimal else None, p)

    def at(value: float) -> Point:
        p = v.apply(problem, value)
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            if solves:
                raise _OutOfTime
            left = MIN_ROUND_TIME_S  # the first value always gets its solve, as a solve's first round
        sol = solve(p, solver=solver, time_limit=left)
        if sol.termination.startswith("interrupted"):
            raise KeyboardInterrupt
        return point(value, p, sol.status, sol.objective, sol.design)

    if workers:
        on_grid = {i: (x, v.apply(problem, x)) for i, x in enumerate(v.values)}
        done = {}
        for o in _on_cluster(on_grid, workers, solver, time_limit):
            value, p = on_grid[int(o.job.key)]
            done[int(o.job.key)] = point(value, p, o.record["status"], o.record["objective"], o.record["design"])
        points = [done[i] for i in sorted(done)]
    notes: list[str] = []
    if not workers:
        points = []
        try:
            for x in v.values:
                points.append(at(x))
        except (_OutOfTime, KeyboardInterrupt) as exc:
            why = "time limit" if isinstance(exc, _OutOfTime) else "interrupted (Ctrl-C)"
            notes.append(f"{why}: {len(points)} of the range's {len(v.values)} values solved")
    breakpoints = []
    span = (v.values[-1] - v.values[0]) or 1.0
    try:
        for a, b in itertools.pairwise(points if not any(n.startswith("interrupted") for n in notes) else []):
            # every change between a and b: bisect to the first, then search what is left of (a, b)
            while not _same(a, b):
                if len(breakpoints) >= MAX_BREAKPOINTS:
                    notes.append(f"stopped after {MAX_BREAKPOINTS} breakpoints (a finer --vary range shows the rest)")
                    break
                lo, hi = a, b
                while hi.value - lo.value > BREAKPOINT_RTOL * span:
                    mid = at((lo.value + hi.value) / 2)
                    lo, hi = (mid, hi) if _same(mid, lo) else (lo, mid)
                breakpoints.append({"between": [lo.value, hi.value], "objective": [lo.objective, hi.objective],
                                    "design_before": lo.design, "design_after": hi.design,
                                    "changed": _changed(lo.design, hi.design)})
                a = hi
            if len(breakpoints) >= MAX_BREAKPOINTS:
                break
    except (_OutOfTime, KeyboardInterrupt) as exc:
        why = "time limit" if isinstance(exc, _OutOfTime) else "interrupted (Ctrl-C)"
        notes.append(f"{why}: the breakpoint search stopped after {len(breakpoints)} breakpoints")
    marginal = []
    for a, b in itertools.pairwise(points):
        if a.objective is None or b.objective is None:
            continue
        marginal.append({"from": a.value, "to": b.value, "per_unit": (b.objective - a.objective) / (b.value - a.value),
                         "unit": f"{problem.metric} per unit of {v.expr or '.'.join(v.path or ())}"})
    interrupted = any(n.startswith("interrupted") for n in notes)
    complete = not interrupted and not any(n.startswith("time limit") for n in notes)
    return Sensitivity(problem.name, vary, problem.metric, problem.sense, points, breakpoints, marginal, solves,
                       time.perf_counter() - t0, notes=notes, complete=complete, interrupted=interrupted)


def _on_cluster(problems: dict[int, tuple[float, Problem]], workers: int, solver: str,
                time_limit: float | None) -> list[Outcome]:
    """The problems solved on a local dask cluster of ``workers`` workers: each outcome with a
    record, or the error its solve raised here."""
    # dask.distributed adds ~0.5 s of CPU to a command's start: loaded only when asked for
    from codesign.sweep.executor import Executor

    jobs = []
    for i, (_, p) in problems.items():
        cal = p.calibration
        jobs.append(Job(key=str(i), instance=p.data, source=p.name, calibration=None if cal.shipped else str(cal.path),
                        calibration_sha256=cal.sha256, solver=solver, time_limit=time_limit))
    with Executor(workers) as ex:
        outcomes = list(ex.map(jobs))
    for o in outcomes:
        if o.error_kind == "input":
            raise InputError(o.error or "a point of the range is not valid", key="--vary")
        if o.error_kind == "check":
            raise ModelError(o.error)
        if not o.ok:
            raise RuntimeError(f"a point of the range failed on the cluster ({o.error_kind}): {o.error}")
    return outcomes


def _same(a: Point, b: Point) -> bool:
    """No breakpoint between a and b: the same status and a's optimal design still optimal at b's
    value (feasible there, with b's optimum within the tie tolerance). A solver may return another
    of several tied designs at another value (no breakpoint), and a parameter may move the optimum
    continuously while the optimal design stays (no breakpoint either)."""
    if a.status != b.status:
        return False
    if a.design is None or b.design is None or b.problem is None:
        return a.design is None and b.design is None
    at_b = b.problem.assess(b.problem.parse_design(a.design))
    return at_b.feasible and abs(at_b.objective - b.objective) <= CONFIRM_RTOL * max(abs(b.objective), 1e-300)


def _changed(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, list[Any]]:
    """The decisions that differ between two designs (value before, value after)."""
    if a is None or b is None:
        return {}
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
