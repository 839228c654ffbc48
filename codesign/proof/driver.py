"""The one exact solve driver: solve, verify with the model, exclude, confirm — for every kind.

A backend answers the MIP it was given, within its own tolerances (HiGHS meets rows to ~1e-7,
CP-SAT rounds coefficients onto integer grids), and both have returned wrong answers (see
``docs/architecture.md``). So its word is never the result. :func:`run` takes a
:class:`~codesign.kinds.base.Formulation` and a *judge* (the model's verdict on a design) and:

1. solves; decodes the design; the judge evaluates it with the model;
2. excludes the design (a no-good over the formulation's design variables) and asks for a
   design better than the best verified one (a cutoff row on the objective), and solves again;
3. once the solver's bound reaches the best verified design (within ``GAP_TOL``), one more
   solve asks for a design better by more than ``CONFIRM_RTOL``; only an empty model (or a
   proven bound above that cutoff) ends the run as *optimal*. The bound then stated is the best
   verified value: "no design is better by more than the tie tolerance".

With ``objective_bound=True`` (off by default) HiGHS is handed each cutoff twice: as
the row, and as HiGHS's ``objective_bound`` option, which starts its search as if a design of the
cutoff's value were known, so that it prunes every node whose LP bound reaches the cutoff (a
round without an incumbent otherwise explores nodes an incumbent would have cut). Its "no
solution below the objective bound" is then the round's "infeasible"
(:func:`codesign.backends.highs.solve`); a design it kept at or above the bound is still judged
by the model.

A solve that a time limit or Ctrl-C stops keeps its best verified design and the best bound a
round proved. A CP-SAT "infeasible" is checked by HiGHS on the real-valued MIP (CP-SAT has
called a feasible instance infeasible). Rows and variables the run adds are removed after it.

:func:`solve` wraps :func:`run` for a :class:`~codesign.kinds.base.Problem` and returns the
:class:`~codesign.proof.records.Solution` record; :func:`cross_check` compares two of them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codesign.backends import brute
from codesign.backends import solve as native_solve
from codesign.backends.result import SolveResult
from codesign.errors import InputError, ModelError, did_you_mean
from codesign.kinds.base import Assessment, Formulation, Problem
from codesign.mip import linearize as lin
from codesign.proof import records
from codesign.proof.tolerances import (
    AGREEMENT_RTOL,
    CONFIRM_RTOL,
    GAP_TOL,
    MAX_ROUNDS,
    MIN_ROUND_TIME_S,
    OBJECTIVE_RTOL,
    SOLVER_GAPS,
)

#: the native backends; ``pyomo:<name>`` reaches any solver Pyomo drives
SOLVERS = ("highs", "cpsat")
#: ``--solver auto``: the problem's kind chooses (:func:`choose_solver`)
AUTO = "auto"
#: ``--threads`` is at most this many per core (and at least 64 is allowed)
THREADS_PER_CORE = 8

#: a round a backend answers with an error is solved once more with these options
RETRY_OPTIONS: dict[str, dict[str, Any]] = {"highs": {"options": {"presolve": "off"}}}

#: progress(incumbent, bound, gap, elapsed_s) in the user's metric (any of the first three None)
Progress = Callable[[float | None, float | None, float | None, float], None]
#: judge(design) -> the model's verdict: (accepted, internal objective, assessment or None)
Judge = Callable[[dict[str, Any]], tuple[bool, float, Assessment | None]]


def check_solver(solver: str) -> None:
    """``auto``, ``highs``, ``cpsat``, ``brute`` (enumeration: :func:`solve` only) or ``pyomo:<name>``
    (any solver Pyomo drives)."""
    if solver in (AUTO, *SOLVERS, brute.NAME) or (solver.startswith("pyomo:") and len(solver) > len("pyomo:")):
        return
    raise InputError("unknown solver", key="--solver", value=solver,
                     expected="auto | highs | cpsat | brute | pyomo:<name> (e.g. pyomo:highs, pyomo:cbc)",
                     suggestion=did_you_mean(solver, (AUTO, *SOLVERS, brute.NAME)))


def choose_solver(problem: Problem, solver: str) -> str:
    """The backend that solves ``problem``: ``auto`` is the kind's :attr:`Problem.default_solver`
    (HiGHS for hardware/schedule grids, CP-SAT for mappings and placements); any other name is
    itself."""
    return problem.default_solver if solver == AUTO else solver


def check_limits(time_limit: float | None, threads: int | None = None) -> None:
    """A time limit is a positive finite number of seconds; threads a count, 0 for the solver's
    own choice."""
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise InputError("a time limit is a positive number of seconds", key="--time-limit", value=time_limit,
                         expected="> 0 and finite", suggestion="leave it out to solve to proven optimality")
    if threads is not None and threads < 0:
        raise InputError("threads is a count", key="--threads", value=threads,
                         expected=">= 1, or 0 for the solver's own choice")
    if threads is not None and threads > (n := max(64, THREADS_PER_CORE * cores())):
        # CP-SAT's portfolio may gain from a few workers per core; 100000 started 100000 threads
        raise InputError(f"more solver threads than {THREADS_PER_CORE} per core ({cores()} cores here)",
                         key="--threads", value=threads, expected=f"0 (the solver's choice) to {n}")


def cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not Linux)
        return max(1, os.cpu_count() or 1)


def backend_solve(mip, solver: str, **opts: Any) -> SolveResult:
    """One solve of ``mip`` by a native backend or through Pyomo (``pyomo:<name>``), with the
    solvers' gap tolerances at zero."""
    if solver == brute.NAME:
        raise InputError("--solver brute enumerates a whole space: it answers solve, pareto and sensitivity, not "
                         "this question", key="--solver", value=solver, expected="highs | cpsat")
    if solver.startswith("pyomo:"):
        from codesign.backends import pyomo  # Pyomo is imported only when asked for

        return pyomo.solve(mip, solver.split(":", 1)[1], time_limit=opts.get("time_limit"))
    return native_solve(mip, solver, **{**SOLVER_GAPS, **opts})


@dataclass
class Run:
    """How :func:`run` ended.

    Attributes:
        status: optimal | feasible | infeasible | no_solution | error.
        best: the best design the judge accepted, with its assessment (None: none).
        best_internal: its internal objective.
        bound: internal lower bound valid for every design (None: none proved).
        rounds: solver calls; rejected: designs the judge refused.
        termination: why the run stopped, in words.
        interrupted: Ctrl-C ended it; timed_out: the time limit ended it.
    """

    status: str
    best: Assessment | None
    best_internal: float
    bound: float | None
    rounds: int
    rejected: int
    seconds: float
    nodes: int
    last: SolveResult | None
    termination: str
    interrupted: bool = False
    timed_out: bool = False


def _proved(res: SolveResult) -> bool:
    """The solver proved its (possibly rounded) model optimal: its bound holds for the designs
    left. CP-SAT reports "feasible" when only its rounding allowance keeps the gap open."""
    return res.status == "optimal" or str(res.termination).upper().startswith("OPTIMAL")


def run(
    form: Formulation,
    judge: Judge,
    solver: str,
    *,
    time_limit: float | None = None,
    threads: int | None = None,
    progress: Callable[[float | None, float | None, float | None, float], None] | None = None,
    verbose: bool = False,
    abs_tol: float = 0.0,
    confirm_infeasible: Callable[[float | None], None] | None = None,
    cutoff: float | None = None,
    objective_bound: bool = False,
) -> Run:
    """Solve ``form`` exactly (module docstring). ``judge`` is the model's verdict on a design;
    ``abs_tol`` floors the tie tolerances for objectives near zero (a violation to minimise);
    ``progress`` receives internal values; ``confirm_infeasible(time_left)`` is called when the
    first round says infeasible (it raises ModelError if another solver finds a design);
    ``cutoff`` (internal) keeps only designs whose objective is at most it: with it, "infeasible"
    proves that no design is that good. ``objective_bound`` also hands HiGHS each cutoff as its
    ``objective_bound`` option (module docstring); off by default: it cut pf-dense1t-joint's
    confirming round to a median 482 nodes from 589 (5 seeds), but HiGHS 1.16.0 with random_seed 12
    loops at the root of that round, deaf to its time limit and to interrupts."""
    mip, unit = form.mip, form.objective_unit
    feasibility_only = len(mip.obj_idx) == 0
    mark = mip.checkpoint()
    # the objective (MIP units, constant included) a design must be below to be sought; HiGHS's
    # objective_bound is strict, so a given cutoff ("at most") is the next float up
    bar: float | None = None
    if cutoff is not None:
        idx, val = lin.add((mip.obj_idx, mip.obj_val))
        mip.add_row("driver-cutoff[given]", idx, val, ub=cutoff / unit - mip.obj_constant)
        bar = math.nextafter(cutoff / unit, math.inf)
    opts: dict[str, Any] = {**form.backend_options.get(solver, {}), "verbose": verbose}
    if threads is not None:
        opts["threads"] = threads
    if progress is not None:
        opts["progress"] = lambda inc, bnd, gap, el: progress(
            None if inc is None else inc * unit, None if bnd is None else bnd * unit, gap, el)
    t0 = time.perf_counter()
    best: Assessment | None = None
    best_f = math.inf
    bound: float | None = None
    rounds = rejected = nodes = 0
    status, termination = "no_solution", ""
    res: SolveResult | None = None
    confirmed: float | None = None  # the best value a strict cutoff has been asked to beat
    interrupted = timed_out = False

    def tie(value: float, rtol: float) -> float:
        return max(rtol * abs(value), abs_tol)

    def exclude(x: Any, reached: bool) -> None:
        """Exclude design ``x`` and ask for one that beats the best verified (once the bound
        reaches it, by more than the tie tolerance): a no-good, a cutoff row, HiGHS's bound."""
        nonlocal bar, confirmed
        lin.nogood(mip, f"driver-nogood[{rounds}]", form.design_vars, x[form.design_vars], onehot=form.onehot)
        if best is not None:
            margin = tie(best_f, CONFIRM_RTOL) if reached else 0.0
            confirmed = best_f if reached else None
            idx, val = lin.add((mip.obj_idx, mip.obj_val))
            mip.add_row(f"driver-cutoff[{rounds}]", idx, val, ub=(best_f - margin) / unit - mip.obj_constant)
            bar = (best_f - margin) / unit

    try:
        while rounds < MAX_ROUNDS:
            o = dict(opts)
            if bar is not None and objective_bound and solver == "highs":
                o["objective_bound"] = bar
            if time_limit is not None:
                left = time_limit - (time.perf_counter() - t0)
                if left <= 0 and res is not None:
                    status, timed_out = ("feasible" if best else "no_solution"), True
                    termination = f"time limit reached after {rounds} rounds, before the optimum was confirmed"
                    break
                o["time_limit"] = max(left, MIN_ROUND_TIME_S)  # the first round always runs
            rounds += 1
            res = backend_solve(mip, solver, **o)
            if res.status == "error" and solver in RETRY_OPTIONS:
                # HiGHS's presolve has emptied a confirming model and then failed ("Solve error");
                # the same round without presolve answers it
                first = res.termination
                res = backend_solve(mip, solver, **{**o, **RETRY_OPTIONS[solver]})
                res.termination = f"{res.termination} (retried without presolve after: {first})"
            nodes += res.nodes or 0
            termination = res.termination
            interrupted = str(res.termination).startswith("interrupted")
            if res.status == "infeasible" and res.x is not None and bar is not None and not interrupted:
                # HiGHS kept a design at or above the objective bound, and none below it: the
                # model prices it too; one it puts below the cutoff is the best, to be confirmed
                accepted, f, assessment = judge(form.decode(res.x))
                if accepted and f < bar * unit and f < best_f and (cutoff is None or f <= cutoff):
                    best_f, best, bound = f, assessment, f  # nothing else is below the bound
                    exclude(res.x, reached=True)
                    continue
            if res.status == "infeasible":
                if best is None and confirm_infeasible is not None and not interrupted:
                    confirm_infeasible(None if time_limit is None else
                                       max(time_limit - (time.perf_counter() - t0), MIN_ROUND_TIME_S))
                status, bound = ("optimal", best_f) if best else ("infeasible", None)
                if best:
                    termination = (f"proved in {rounds} rounds (the last, {res.termination}: no design beats "
                                   "the best verified one)")
                break
            if res.bound is not None and math.isfinite(res.bound):
                # a bound over the designs not yet excluded; the excluded ones are worse than the best
                # or rejected, so min(best, it) bounds every design; a round stopped early may prove
                # less than an earlier one: keep the best proven
                round_bound = res.bound * unit if best is None else min(best_f, res.bound * unit)
                bound = round_bound if bound is None else max(bound, round_bound)
            x = res.x if res.x is not None else res.raw_x
            if x is None:
                status = "feasible" if best else res.status
                break
            accepted, f, assessment = judge(form.decode(x))
            # a solver meets the cutoff row within its tolerance; the model decides
            accepted = accepted and (cutoff is None or f <= cutoff)
            if accepted:
                claimed = res.objective * unit if res.objective is not None and res.x is not None else None
                if claimed is not None and not form.integer_grid and res.rounding is None:
                    _check_claim(f, claimed, _proved(res), tie(f, OBJECTIVE_RTOL), solver, assessment)
                if f < best_f:
                    best_f, best = f, assessment
            else:
                rejected += 1
            if interrupted:
                status = "feasible" if best else "no_solution"
                break
            if feasibility_only and best is not None:
                status, bound = "optimal", best_f
                termination = f"a design the model accepts, found in {rounds} rounds"
                break
            proved = _proved(res)
            reached = best is not None and res.bound is not None and res.bound * unit >= best_f - tie(best_f, GAP_TOL)
            if reached and not proved:
                status, bound = "feasible", min(best_f, res.bound * unit)
                break
            if reached and confirmed == best_f:
                status, bound = "optimal", best_f  # the strict cutoff found nothing better either
                termination = f"proved in {rounds} rounds (the last bound reaches the best verified design)"
                break
            if not proved and res.x is not None:
                status = "feasible" if best else res.status
                break
            # exclude this design and ask for one that beats the best verified; once the bound
            # reaches it, ask for one better by more than the tie tolerance (a solver's bound alone
            # is not the proof: HiGHS has called designs 1e-6 to 2e-5 worse optimal with gap 0)
            exclude(x, reached)
        else:
            status = "feasible" if best else "no_solution"
            termination = f"stopped after {MAX_ROUNDS} rounds"
    except KeyboardInterrupt:
        interrupted = True
        status = "feasible" if best else "no_solution"
    finally:
        mip.restore(mark)
    if interrupted:
        termination = f"interrupted after {rounds} rounds" + (f" ({termination})" if termination else "")
    elif (status in ("feasible", "no_solution") and time_limit is not None and not timed_out
          and time.perf_counter() - t0 >= time_limit and "time limit" not in str(termination).lower()):
        # a round the limit stopped, in the solver's words (CP-SAT says only FEASIBLE or UNKNOWN)
        timed_out = True
        termination = f"time limit reached in round {rounds}, before the optimum was confirmed ({termination})"
    if best is not None and bound is not None and bound > best_f:
        bound = best_f
    return Run(status, best, best_f, bound, rounds, rejected, time.perf_counter() - t0, nodes, res,
               termination, interrupted, timed_out)


def _check_claim(model: float, claimed: float, proved: bool, tol: float, solver: str, a: Assessment | None) -> None:
    """The MIP is exact: a design's MIP objective equals the model's. An incumbent's epigraph may
    sit above its maxima (the MIP then over-states the objective), never below; at a proven
    optimum they are equal."""
    if model > claimed + tol or (proved and claimed > model + tol):
        design = None if a is None else a.design
        raise ModelError(f"{solver} objective {claimed:.12g} differs from the model's {model:.12g} for design {design}")


def judge_problem(problem: Problem) -> Judge:
    """The model's verdict as :func:`solve` judges: feasible designs, by their internal objective."""

    def judge(design: dict[str, Any]) -> tuple[bool, float, Assessment | None]:
        a = problem.assess(design)
        return a.feasible, a.internal, a

    return judge


def confirm_with_highs(problem: Problem, cutoff: float | None = None) -> Callable[[float | None], None]:
    """CP-SAT's word that nothing is feasible (nothing at most ``cutoff``, internal), checked by
    HiGHS on the real-valued MIP: a design HiGHS finds and the model accepts (within the cutoff)
    makes it a solver disagreement (ModelError)."""

    def confirm(time_left: float | None) -> None:
        plain = problem.formulate("highs")
        if plain.empty_reason:
            return
        mip = plain.mip
        if cutoff is not None:
            idx, val = lin.add((mip.obj_idx, mip.obj_val))
            mip.add_row("cpsat-check-cutoff", idx, val, ub=cutoff / plain.objective_unit - mip.obj_constant)
        res = backend_solve(mip, "highs", **({} if time_left is None else {"time_limit": time_left}))
        if res.x is None:
            return
        design = plain.decode(res.x)
        a = problem.assess(design)
        if a.feasible and (cutoff is None or a.internal <= cutoff):
            raise ModelError(f"CP-SAT says no design of {problem.name} is feasible{'' if cutoff is None else ' within the cutoff'}, "
                             f"but HiGHS finds {design}, which the model accepts: a CP-SAT wrong answer; solve with "
                             "--solver highs")

    return confirm


def solve(
    problem: Problem,
    *,
    solver: str = AUTO,
    time_limit: float | None = None,
    threads: int | None = None,
    progress: Progress | None = None,
    verbose: bool = False,
) -> records.Solution:
    """The proven optimum of ``problem`` (or the best design and bound within the limits), as the
    record ``solve --save`` writes. ``time_limit`` covers building the MIP too (the first solver
    round always runs). Raises ModelError when the model and a solver disagree."""
    check_solver(solver)
    check_limits(time_limit, threads)
    if solver != brute.NAME and (searched := problem.own_search(solver, time_limit)) is not None:
        return searched
    solver = choose_solver(problem, solver)
    if solver == brute.NAME:
        return _enumerated(problem, time_limit)
    t0 = time.perf_counter()
    form = problem.formulate(solver)
    build_s = time.perf_counter() - t0
    left = None if time_limit is None else max(time_limit - build_s, MIN_ROUND_TIME_S)
    if form.empty_reason:
        return records.solution(problem, solver=solver, status="infeasible", best=None, bound=None,
                                termination=f"presolve: {form.empty_reason}", stats=form.stats, build_s=build_s,
                                solve_s=0.0, time_s=time.perf_counter() - t0, proof={"reason": form.empty_reason})
    to_user = _to_user(problem)
    user_progress = None
    if progress is not None:
        def user_progress(inc, bnd, gap, elapsed):
            progress(to_user(inc), to_user(bnd), gap, elapsed)

    r = run(form, judge_problem(problem), solver, time_limit=left, threads=threads, progress=user_progress,
            verbose=verbose, confirm_infeasible=confirm_with_highs(problem) if solver == "cpsat" else None)
    status = r.status
    bound = to_user(r.bound)
    if bound is not None and not math.isfinite(bound):
        bound = None  # (a bound of 0 on a time per token: no finite bound on tokens/s was proved)
    if r.best is not None:
        gap = records.user_gap(problem.sense, r.best.objective, bound)
        if status == "optimal" and (gap is None or abs(gap) > GAP_TOL):
            status = "feasible"
    elif status == "optimal":
        status = "no_solution"
    last = r.last
    proof = {"rounds": r.rounds, "rejected_by_model": r.rejected, "nodes": r.nodes,
             "internal_objective": None if r.best is None else r.best_internal, "internal_bound": r.bound,
             "objective_unit": form.objective_unit}
    if last is not None and last.rounding is not None:
        proof["rounding"] = last.rounding.to_dict()
    return records.solution(
        problem, solver=solver, status=status, best=r.best, bound=bound, termination=r.termination,
        stats=form.stats, build_s=build_s, solve_s=r.seconds, time_s=time.perf_counter() - t0, proof=proof,
        solver_version="" if last is None else last.solver_version,
        parameters={} if last is None else dict(last.parameters),
    )


def _enumerated(problem: Problem, time_limit: float | None) -> records.Solution:
    """``--solver brute``: the problem's own enumeration (:mod:`codesign.backends.brute`) as a record.
    A finished one proves its best design optimal (the bound is its objective, gap 0) or that no
    design is feasible; one a time limit stopped keeps its best design and claims no bound."""
    e = brute.enumerate_space(problem, time_limit)
    if e.complete:
        status, bound = ("optimal", e.best.objective) if e.best is not None else ("infeasible", None)
    else:
        status, bound = ("feasible" if e.best is not None else "no_solution"), None
    proof = {"enumerated": "all" if e.complete else "part", "points": e.points, "feasible_points": e.feasible_points,
             "internal_objective": None if e.best is None else e.best.internal}
    return records.solution(problem, solver=brute.NAME, status=status, best=e.best, bound=bound,
                            termination=e.termination, stats={"points": e.points}, build_s=0.0, solve_s=e.seconds,
                            time_s=e.seconds, proof=proof)


def _to_user(problem: Problem) -> Callable[[float | None], float | None]:
    """Internal (minimised) objective -> the user's metric; a bound of 0 on a time per token is an
    infinite throughput."""

    def convert(v: float | None) -> float | None:
        if v is None:
            return None
        if v <= 0 and problem.sense == "max":
            return math.inf
        return problem.to_user(v)

    return convert


def confirm_optimal(problem: Problem, internal: float, *, solver: str = AUTO,
                    time_limit: float | None = None) -> Run:
    """Is ``internal`` (a design's internal objective) the optimum? One solve for a design better
    by more than ``CONFIRM_RTOL``, judged by the model: status "infeasible" proves it is (ties
    within the tolerance aside); a best design refutes it; anything else leaves it open."""
    solver = choose_solver(problem, solver)
    form = problem.formulate(solver)
    if form.empty_reason:
        return Run("infeasible", None, math.inf, None, 0, 0, 0.0, 0, None, f"presolve: {form.empty_reason}")
    margin = max(CONFIRM_RTOL * abs(internal), 0.0)
    return run(form, judge_problem(problem), solver, time_limit=time_limit, cutoff=internal - margin,
               confirm_infeasible=confirm_with_highs(problem, internal - margin) if solver == "cpsat" else None)


def cross_check(a: records.Solution, b: records.Solution, rtol: float = AGREEMENT_RTOL) -> dict[str, Any]:
    """Both solvers must reach the same verified optimum (within ``rtol``; their designs may differ
    on ties): disagreeing on feasibility or on a proven optimum raises ModelError."""
    info = {"solvers": [a.solver, b.solver], "statuses": [a.status, b.status], "objectives": [a.objective, b.objective]}
    if "infeasible" in (a.status, b.status):
        if a.status != b.status:
            raise ModelError(f"solvers disagree on feasibility: {a.solver} {a.status}, {b.solver} {b.status}")
        return {**info, "agree": True}
    if a.status != "optimal" or b.status != "optimal":
        return {**info, "agree": None, "note": "not both proven optimal; nothing to compare"}
    rel = abs(a.objective - b.objective) / max(abs(a.objective), 1e-300)
    if rel > rtol:
        raise ModelError(f"{a.solver} and {b.solver} disagree on {a.instance}: {a.objective!r} vs {b.objective!r} "
                         f"(relative {rel:.3g})")
    return {**info, "agree": True, "relative_difference": rel, "times_s": [a.time_s, b.time_s]}


def other_solver(solver: str) -> str:
    """The solver ``--cross-check`` compares with: highs <-> cpsat (pyomo:* -> cpsat)."""
    return "highs" if solver == "cpsat" else "cpsat"


