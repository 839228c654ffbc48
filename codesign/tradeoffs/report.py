"""What ``codesign report`` states about an instance, gathered from the one solve driver and the
trade-off functions (the HTML is :mod:`codesign.tradeoffs.report_html`):

- the instance and its lints;
- the optimum and its proof (a :class:`~codesign.proof.records.Solution`);
- the baseline's certificate against that solve's bound (what ``certify`` builds, from the same
  proven bound: :func:`codesign.proof.certify.build`);
- which budgets bind at the optimum: a budget binds when the proven optimum without it is better
  (one more solve each), and the sensitivity of the optimum to each binding budget
  (:func:`codesign.tradeoffs.sensitivity.sensitivity`, the budget varied around its limit);
- the Pareto frontier between two metrics (:func:`codesign.tradeoffs.pareto.frontier`, bounded by a
  number of points and a time limit);
- the breakdown of the baseline and of the optimum (:mod:`codesign.tradeoffs.breakdown`).

A part that does not apply to the instance's kind (no metric budgets yet, for instance) is stated
as such (its ``note``), not an error.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from codesign.errors import InputError
from codesign.kinds.base import Problem
from codesign.kinds.registry import from_data
from codesign.proof import records
from codesign.proof.certify import bound_source, build
from codesign.proof.driver import solve
from codesign.proof.tolerances import CONFIRM_RTOL
from codesign.tradeoffs.breakdown import Breakdown, breakdown
from codesign.tradeoffs.pareto import Frontier, frontier
from codesign.tradeoffs.sensitivity import Sensitivity, sensitivity

#: the instance's own budget fields, by the name of the constraint they make
BUDGET_FIELDS = {"budget-power": "power_W", "budget-temperature": "temperature_C", "budget-area": "area_mm2",
                 "budget-system-power": "system_power_W", "budget-energy-per-token": "energy_per_token_J"}
#: a custom budget the sensitivity can vary: 'EXPR <= number' or 'EXPR >= number'
_CUSTOM = re.compile(r"^(?P<expr>.+?)\s*(?P<op><=|>=)\s*(?P<rhs>[-+0-9.eE]+)\s*$")
#: the varied range of a binding budget: this fraction of its limit up to the larger of
#: HIGH x its limit and its value at the optimum without it (at most CAP x the limit)
LOW, HIGH, CAP = 0.5, 1.5, 4.0
#: at most this many binding budgets get a sensitivity (the rest are listed)
MAX_SENSITIVITIES = 3


@dataclass
class Options:
    """What the report was asked for (stated in it)."""

    solver: str = "auto"
    time_limit: float | None = None
    x: str = "tokens_per_s"
    y: str | None = None  # energy_per_token_J; power_W when the instance has several workloads
    max_points: int = 12
    pareto_time_limit: float | None = 120.0
    sensitivity_points: int = 5
    sensitivity_time_limit: float | None = 60.0
    budgets: list[str] = field(default_factory=list)

    def check(self) -> None:
        if self.max_points < 1:
            raise InputError("--max-points is a positive count", key="--max-points", value=self.max_points)
        if not 2 <= self.sensitivity_points <= 50:
            raise InputError("--sensitivity-points is 2..50", key="--sensitivity-points", value=self.sensitivity_points)
        for key, v in (("--time-limit", self.time_limit), ("--pareto-time-limit", self.pareto_time_limit),
                       ("--sensitivity-time-limit", self.sensitivity_time_limit)):
            if v is not None and not v > 0:
                raise InputError("a time limit is a positive number of seconds", key=key, value=v)


@dataclass
class Binding:
    """One budget at the optimum: its audit entry, the proven optimum without it, and whether it binds."""

    name: str
    entry: records.AuditEntry
    without: records.Solution | None
    binds: bool | None
    vary: str | None = None
    sensitivity: Sensitivity | None = None
    note: str = ""


@dataclass
class Report:
    problem: Problem
    options: Options
    optimum: records.Solution
    baseline: records.Evaluation
    certificate: records.Certificate
    breakdown: Breakdown
    bindings: list[Binding]
    binding_note: str
    frontier: Frontier | None
    frontier_note: str
    seconds: float
    solves: int = 0


class Clock:
    """The report's one deadline (``--time-limit`` covers the whole report): each part gets what is left."""

    def __init__(self, time_limit: float | None):
        self.t0 = time.perf_counter()
        self.deadline = None if time_limit is None else self.t0 + time_limit

    def left(self, cap: float | None = None) -> float | None:
        """Seconds left for a part (at most ``cap``, its own limit); None: no limit."""
        left = None if self.deadline is None else max(0.0, self.deadline - time.perf_counter())
        return cap if left is None else left if cap is None else min(cap, left)

    def spent(self) -> bool:
        return self.left() == 0.0

    def seconds(self) -> float:
        return time.perf_counter() - self.t0


#: what a part of the page says when the report's time limit left it no time
OUT_OF_TIME = "not computed: the report's --time-limit was spent before it"


def build_report(problem: Problem, options: Options, *, progress: Callable[[str], None] | None = None) -> Report:
    """Everything the report states (module docstring); every number from a record or a solve."""
    options.check()
    if options.y is None:  # a mix's energy per token is no budget metric: its workloads' are
        options.y = "power_W" if len(problem.data.get("workloads", [])) > 1 else "energy_per_token_J"
    say = progress or (lambda _msg: None)
    clock = Clock(options.time_limit)
    say("solving")
    sol = _solve(problem, options, clock.left())
    base = records.evaluation(problem, problem.assess(problem.parse_design(problem.baseline(), source="the baseline")))
    a = problem.assess(problem.parse_design(problem.baseline(), source="the baseline"))
    bound = sol.bound if sol.status in ("optimal", "feasible") else None
    cert = build(problem, a, bound, bound_source(sol, "the report's solve"))
    designs = {"baseline": problem.baseline()}
    if sol.design is not None:
        designs["optimum" if sol.status == "optimal" else "best found"] = sol.design
    say("breakdown")
    parts = breakdown(problem, designs)
    say("binding budgets")
    bindings, binding_note, solves = _bindings(problem, sol, options, say, clock)
    say("pareto frontier")
    front, front_note = None, ""
    if clock.spent():
        front_note = OUT_OF_TIME
    else:
        try:
            front = frontier(problem, options.x, options.y, solver=options.solver, max_points=options.max_points,
                             time_limit=clock.left(options.pareto_time_limit), progress=lambda m: say(f"pareto: {m}"))
        except InputError as exc:
            front_note = f"not available for this instance: {exc.message}"
    if front is not None:
        solves += front.solves
    return Report(problem, options, sol, base, cert, parts, bindings, binding_note, front, front_note,
                  clock.seconds(), solves + 1)


def _solve(problem: Problem, options: Options, time_limit: float | None) -> records.Solution:
    # the first solve always runs (a solve's first round gets the driver's floor when none is left)
    sol = solve(problem, solver=options.solver, time_limit=None if time_limit is None else max(time_limit, 1e-3))
    if sol.termination.startswith("interrupted"):
        raise KeyboardInterrupt
    return sol


def _better(sense: str, new: float, old: float) -> bool:
    """``new`` beats ``old`` by more than the tie tolerance."""
    tol = CONFIRM_RTOL * max(abs(old), 1e-300)
    return new > old + tol if sense == "max" else new < old - tol


def _without(problem: Problem, name: str) -> tuple[Problem, str | None, str | None]:
    """The problem without the budget ``name`` (an audit entry's name), the instance field that
    sets it (``budgets.<field>``) or else its custom expression ('EXPR <= rhs')."""
    data = copy.deepcopy(problem.data)
    budgets = data.get("budgets", {})
    head = name.split("[", 1)[0]
    if head in BUDGET_FIELDS:
        key = BUDGET_FIELDS[head]
        budgets.pop(key, None)
        path = f"budgets.{key}"
        text = None
    elif name.startswith("budget[") and name.endswith("]"):
        label = name[len("budget["):-1]
        custom = budgets.get("custom", [])
        index = next((i for i, b in enumerate(custom) if (b.get("name") or f"budgets.custom[{i}]") == label), None)
        if index is None:
            raise InputError("no such budget in the instance", value=name)
        text = custom.pop(index)["expr"]
        path = None
    else:
        raise InputError("not a budget of the instance", value=name)
    return from_data(data, source=f"{problem.name} without {name}", calibration=problem.calibration), path, text


def _bindings(problem: Problem, sol: records.Solution, options: Options, say: Callable[[str], None],
              clock: Clock) -> tuple[list[Binding], str, int]:
    if not problem.takes_budgets:
        return [], (f"{problem.kind} instances take no metric budgets yet: there is no budget to bind and no "
                    "sensitivity to one"), 0
    if sol.status != "optimal" or sol.objective is None:
        return [], f"the optimum is not proven ({sol.status}): which budgets bind is not stated", 0
    entries = [e for e in sol.audit if e.name.startswith("budget")]
    if not entries:
        return [], "the instance has no budget (add one with --budget 'EXPR <= VALUE')", 0
    out, solves = [], 0
    for e in entries:
        if clock.spent():
            out.append(Binding(e.name, e, None, None, note=f"whether it binds is {OUT_OF_TIME}"))
            continue
        say(f"is {e.name} binding?")
        try:
            free, path, text = _without(problem, e.name)
        except InputError as exc:
            out.append(Binding(e.name, e, None, None, note=exc.message))
            continue
        other = _solve(free, options, clock.left())
        solves += 1
        if other.status != "optimal" or other.objective is None:
            out.append(Binding(e.name, e, other, None, note=f"the solve without it ended {other.status}"))
            continue
        b = Binding(e.name, e, other, _better(problem.sense, other.objective, sol.objective))
        if b.binds:
            b.vary, b.note = _vary(path, text, e, other, options.sensitivity_points)
        out.append(b)
    varied = [b for b in out if b.binds and b.vary]
    for b in varied[:MAX_SENSITIVITIES]:
        if clock.spent():
            b.note = f"binding; its sensitivity is {OUT_OF_TIME}: {_command(problem, b)} computes it"
            continue
        say(f"sensitivity to {b.name}")
        base = problem if b.vary.startswith("budgets.") else _without(problem, b.name)[0]
        try:
            b.sensitivity = sensitivity(base, b.vary, solver=options.solver,
                                        time_limit=clock.left(options.sensitivity_time_limit),
                                        progress=lambda m, n=b.name: say(f"sensitivity to {n}: {m}"))
        except InputError as exc:
            b.note = f"sensitivity not available: {exc.message}"
        if b.sensitivity is not None:
            solves += b.sensitivity.solves
            if b.sensitivity.interrupted:
                raise KeyboardInterrupt
            if not b.sensitivity.complete:
                b.note = (f"binding; its sensitivity stopped at its time limit (--sensitivity-time-limit, or the "
                          f"report's --time-limit), what it proved is shown: {_command(problem, b)} computes all of it")
    for b in varied[MAX_SENSITIVITIES:]:
        b.note = f"binding; only the first {MAX_SENSITIVITIES} binding budgets are varied"
    binding = [b for b in out if b.binds]
    note = ("no budget binds at the optimum: without any one of them the proven optimum is the same"
            if not binding else f"{len(binding)} of {len(out)} budgets bind at the optimum")
    return out, note, solves


def _command(problem: Problem, b: Binding) -> str:
    """The ``codesign sensitivity`` command that varies the binding budget ``b`` on its own."""
    own = b.name[len("budget[cli-"):-1] if b.name.startswith("budget[cli-") else None
    texts = [t for i, t in enumerate(problem.budget_texts(), 1) if own is None or str(i) != own]
    if b.name.startswith("budget[") and own is None:
        return f"`codesign sensitivity --vary '{b.vary}'` on the instance without {b.name}"
    budgets = "".join(f" --budget '{t}'" for t in texts)
    return f"`codesign sensitivity {problem.name}{budgets} --vary '{b.vary}'`"


def _vary(path: str | None, text: str | None, e: records.AuditEntry, free: records.Solution,
          points: int) -> tuple[str | None, str]:
    """The --vary range of a binding budget around its limit (and a note when there is none): up to
    its metric's value at the optimum without it, where the budget stops mattering."""
    metric = None if path is None else path.split(".", 1)[1]
    free_value = None if metric is None else (free.metrics or {}).get(metric)
    m = None
    if path is not None:
        limit = e.limit
        what = path
    else:
        m = _CUSTOM.match(text or "")
        if m is None:
            return None, f"binding, but its expression {text!r} is not 'EXPR <= number': not varied"
        limit = float(m["rhs"])
        what = f"{m['expr']} {m['op']}"
    if not limit > 0:
        return None, "binding, but its limit is not positive: not varied"
    lo = LOW * limit
    hi = HIGH * limit
    if m is not None:  # a custom budget: an upper limit on one metric has a value at the free optimum
        free_value = (free.metrics or {}).get(m["expr"].strip()) if m["op"] == "<=" else None
    if isinstance(free_value, int | float) and not isinstance(free_value, bool):
        hi = min(max(hi, 1.05 * free_value), CAP * limit)
    step = (hi - lo) / (points - 1)
    sep = "=" if path is not None else " "
    return f"{what}{sep}{lo:.6g}..{hi:.6g} step {step:.6g}", ""
