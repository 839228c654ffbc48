"""Re-checking records without trusting them: ``check-solution`` and ``check-certificate``.

A record states its instance (``instance_data``), the calibration it was evaluated under, a design
and what follows from them. The check rebuilds the problem from the record alone (so it runs from
any directory), confirms the content hash, re-evaluates the design with the model and re-derives
every field the record states; any field that differs — design, objective, metrics, audit, bound,
gap, statement, objective name or sense, instance — fails the check. A certificate's bound is the
model's objective of its witness (the optimal design of the solve that proved it), and that the
witness is optimal is proved again by one solve that asks for a better design; a bound without a
witness (a time-limited solve) is re-derived by solving.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from codesign.errors import InputError, ModelError
from codesign.jsonio import jsonable, read_json
from codesign.kinds.base import Problem
from codesign.kinds.registry import from_data, load, named_paths
from codesign.model.calibration import SHIPPED_NAME, CalibrationSet, load_calibration
from codesign.proof import certify as certify_mod
from codesign.proof import records
from codesign.proof.driver import AUTO, choose_solver, confirm_optimal, solve
from codesign.proof.tolerances import CONFIRM_RTOL, RECHECK_RTOL
from codesign.schema import is_file

#: fields a re-check does not compare (when and where the record was made)
UNCHECKED = frozenset({"provenance", "time_s", "build_s", "solve_s", "instance_source"})


def problem_of(rec: records.Record, path: Path | str) -> Problem:
    """The problem a record answers, from the record alone; InputError when its calibration is a
    file that is not here, ValueError-like InputError when its content was edited."""
    calibration = _calibration_of(rec, path)
    problem = from_data(rec.instance_data, source=f"{path} (instance_data)", calibration=calibration)
    if problem.content_hash != rec.instance_hash:
        if calibration.sha256 != rec.calibration_sha256:
            raise _Edited(f"the calibration {rec.calibration} is not the one the record was made under (sha256 "
                          f"{calibration.sha256[:12]}, the record states {rec.calibration_sha256[:12]}): re-create the "
                          "record under this calibration, or check it where that one is")
        raise _Edited("the instance content does not match its hash (instance_data or instance_hash was edited)")
    return problem


def _opened(path: Path, cls: type[records.Record]) -> tuple[dict[str, Any], Any, Problem]:
    """The record at ``path`` as written (for the field-by-field comparison), validated, and the
    problem it answers (_Edited when its instance content was edited)."""
    raw = read_json(path)
    rec = records.read_record(path, expected=cls)
    return raw, rec, problem_of(rec, path)


class _Edited(Exception):
    """A record field that cannot be what the record says."""


def _calibration_of(rec: records.Record, path: Path | str) -> CalibrationSet:
    if rec.calibration == SHIPPED_NAME:
        return load_calibration(None)
    cal = Path(rec.calibration)
    if not is_file(cal):
        raise InputError("the record was made under a calibration file that is not here", file=path,
                         key="calibration", value=rec.calibration,
                         suggestion="copy that file to the path, or re-create the record")
    return load_calibration(cal)


def differences(stated: Any, derived: Any, where: str = "") -> list[str]:
    """Where two JSON values differ (floats to RECHECK_RTOL relative; NaN equals nothing)."""
    if isinstance(stated, dict) and isinstance(derived, dict):
        out = []
        for k in sorted(set(stated) | set(derived)):
            if where == "" and k in UNCHECKED:
                continue
            key = f"{where}.{k}" if where else str(k)
            if k not in stated or k not in derived:
                out.append(f"{key}: {'missing' if k not in stated else 'not derived'}")
            else:
                out += differences(stated[k], derived[k], key)
        return out
    if isinstance(stated, list) and isinstance(derived, list):
        if len(stated) != len(derived):
            return [f"{where}: {len(stated)} entries, {len(derived)} derived"]
        return [d for i, (a, b) in enumerate(zip(stated, derived, strict=True)) for d in differences(a, b, f"{where}[{i}]")]
    if _number(stated) and _number(derived):
        a, b = float(stated), float(derived)
        if a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= RECHECK_RTOL * max(abs(a), abs(b))):
            return []
        return [f"{where}: stated {stated!r}, derived {derived!r}"]
    return [] if stated == derived and type(stated) is type(derived) else [f"{where}: stated {stated!r}, derived {derived!r}"]


def _number(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int | float):
        return True
    return isinstance(x, str) and x in ("inf", "-inf")


def check_solution(path: str | Path, *, prove: bool = False, solver: str = AUTO,
                   time_limit: float | None = None) -> dict[str, Any]:
    """Re-verify a stored solution: its instance, its design with the model, every stated field; an
    optimal solution's bound is its verified objective. With ``prove`` the bound is proved again by
    solving (optimal: no design beats it by more than CONFIRM_RTOL; feasible: a new solve's bound
    must hold it); an infeasible verdict is proved again too. Also reports whether the named
    instance of the same name still has this content."""
    path = Path(path)
    try:
        raw, rec, problem = _opened(path, records.Solution)
    except _Edited as exc:
        return _report(False, [str(exc)], "")
    problems: list[str] = []
    if rec.design is not None:
        try:
            a = problem.assess(problem.parse_design(rec.design, source=str(path)))
        except InputError as exc:
            return _report(False, [f"not a design of the instance: {exc}"], "")
        derived = records.evaluation(problem, a).as_dict()
        stated = {k: raw.get(k) for k in derived if k not in ("record",)}
        problems += differences(stated, {k: v for k, v in derived.items() if k != "record"})
        if rec.status == "optimal" and (rec.bound is None or not _ties(rec.bound, a.objective)):
            problems.append(f"bound: an optimal solution's bound is its verified objective {a.objective!r}, stated {rec.bound!r}")
        if rec.status in ("optimal", "feasible") and not a.feasible:
            problems.append("the design is infeasible for the model")
        gap = records.user_gap(problem.sense, a.objective, rec.bound)
        problems += differences({"gap": raw.get("gap")}, jsonable({"gap": gap}))
    elif rec.status not in ("infeasible", "no_solution", "error"):
        problems.append(f"status {rec.status} without a design")
    how = ""
    if prove and not problems:
        problems_, how = _prove_solution(rec, problem, solver, time_limit)
        problems += problems_
    named = named_paths().get(rec.instance)
    drift = ""
    if named is not None:
        # the named instance with the record's own --budget and --objective
        current = load(named, calibration=problem.calibration).with_budgets(problem.budget_texts())
        if current.metric != problem.metric:
            current = current.with_objective(problem.metric)
        if current.content_hash != rec.instance_hash:
            problems.append(f"the named instance {rec.instance} ({named}) has changed since the solution was written")
        drift = f" (the named instance {rec.instance} is unchanged)" if current.content_hash == rec.instance_hash else ""
    what = f"{rec.status} {rec.objective_metric} = {rec.objective!r}" if rec.objective is not None else rec.status
    return _report(not problems, problems, f"{what} reproduced by the model{how}{drift}", objective=rec.objective,
                   status=rec.status)


def _prove_solution(rec: records.Solution, problem: Problem, solver: str, time_limit: float | None) -> tuple[list[str], str]:
    """(problems, words for the report) of proving a solution's verdict again."""
    solver = choose_solver(problem, solver)
    if rec.status == "optimal" and rec.design is not None:
        internal = problem.assess(problem.parse_design(rec.design)).internal
        r = confirm_optimal(problem, internal, solver=solver, time_limit=time_limit)
        if r.interrupted:
            raise KeyboardInterrupt
        if r.best is not None:
            return [f"bound: a design beats the stated optimum ({problem.metric} {r.best.objective!r}): {r.best.design}"], ""
        if r.status != "infeasible":
            return [f"bound: not re-proved ({r.status}: {r.termination}); give more --time-limit"], ""
        return [], f"; proved optimal again by {solver}"
    sol = solve(problem, solver=solver, time_limit=time_limit)
    if sol.termination.startswith("interrupted"):
        raise KeyboardInterrupt
    if rec.status == "infeasible":
        if sol.status == "infeasible":
            return [], f"; proved infeasible again by {solver}"
        if sol.design is not None:
            return [f"status: infeasible, but {solver} finds {sol.design}, which the model accepts"], ""
        return [f"status: infeasibility not re-proved ({sol.status}: {sol.termination})"], ""
    holds = _bound_holds(problem.sense, rec.bound, sol)
    if holds is False:
        return [f"bound: stated {rec.bound!r}, but {solver} finds {problem.metric} {sol.objective!r}"], ""
    if holds is None:
        return [f"bound: not re-proved ({sol.status}: {sol.termination}); give more --time-limit"], ""
    return [], f"; its bound proved again by {solver}"


def _ties(bound: float, objective: float) -> bool:
    return abs(bound - objective) <= CONFIRM_RTOL * max(abs(objective), 1e-300) or bound == objective


def check_certificate(path: str | Path, *, prove: bool = True, solver: str = AUTO,
                      time_limit: float | None = None) -> dict[str, Any]:
    """Re-derive a certificate (module docstring). With ``prove`` (the default) the bound is
    proved again: a solve asks for a design better than the witness (a certificate without a
    witness is re-solved and its bound must hold); without it, only what the model derives is
    checked and the report says the optimality was not re-proved."""
    path = Path(path)
    try:
        raw, rec, problem = _opened(path, records.Certificate)
    except _Edited as exc:
        return _report(False, [str(exc)], "")
    problems: list[str] = []
    try:
        a = problem.assess(problem.parse_design(rec.design or {}, source=str(path)))
        w = None if rec.bound_source.witness is None else problem.assess(
            problem.parse_design(rec.bound_source.witness, source=f"{path} bound_source.witness"))
    except InputError as exc:  # a design that is not one of the instance's: an edited record
        return _report(False, [f"not a design of the instance: {exc}"], "")
    src = rec.bound_source
    bound: float | None = None
    if w is not None:
        if not w.feasible:
            problems.append("bound_source.witness: the witness design is infeasible")
        bound = w.objective
        if src.optimum is None or not _ties(src.optimum, w.objective):
            problems.append(f"bound_source.optimum: stated {src.optimum!r}, the witness's objective is {w.objective!r}")
        how = "the bound is the model's objective of its witness"
        if prove and not problems:
            r = confirm_optimal(problem, w.internal, solver=solver, time_limit=time_limit)
            if r.interrupted:
                raise KeyboardInterrupt
            if r.best is not None:
                problems.append(f"bound: a design beats the witness ({problem.metric} {r.best.objective!r} against "
                                f"{w.objective!r}): {r.best.design}")
            elif r.status != "infeasible":
                problems.append(f"bound: not re-proved ({r.status}: {r.termination}); give more --time-limit")
            else:
                how += f", proved again by {solver} (no design beats it by more than {CONFIRM_RTOL:g})"
        elif not prove:
            how += "; its optimality was not re-proved (--no-prove)"
    else:
        if not prove:
            return _report(False, ["bound: a bound without a witness can be re-derived only by solving (drop --no-prove)"], "")
        sol = solve(problem, solver=solver, time_limit=time_limit)
        if sol.termination.startswith("interrupted"):
            raise KeyboardInterrupt
        stated = rec.bound
        holds = _bound_holds(problem.sense, stated, sol)
        if holds is False:
            problems.append(f"bound: stated {stated!r}, but {solver} finds {problem.metric} {sol.objective!r}")
        elif holds is None:
            problems.append(f"bound: not re-proved ({sol.status}: {sol.termination}); give more --time-limit")
        bound = stated
        how = f"the bound has no witness; re-solved by {solver} ({sol.status}): it holds"
    try:
        derived = certify_mod.build(problem, a, bound, src)
    except ModelError as exc:  # the design beats the re-derived bound: a forged witness
        return _report(False, [str(exc)], "")
    derived_dict = derived.as_dict()
    problems += differences({k: raw.get(k) for k in derived_dict}, derived_dict)
    problems += [f"{k}: not a certificate field" for k in sorted(set(raw) - set(derived_dict))]
    message = f"certificate re-derived ({how}): {derived.statement}" if not problems else ""
    return _report(not problems, problems, message, gap=derived.gap, bound=bound)


def _bound_holds(sense: str, stated: float | None, sol: records.Solution) -> bool | None:
    """Does a stated bound hold, given a new solve? False when a verified design beats it, True
    when the solve's proven bound is at least as tight, None when the solve could not tell."""
    if stated is None:
        return None
    better = (lambda x, y: x > y * (1 + CONFIRM_RTOL)) if sense == "max" else (lambda x, y: x < y * (1 - CONFIRM_RTOL))
    if sol.objective is not None and better(sol.objective, stated):
        return False
    if sol.bound is not None and not better(sol.bound, stated):
        return True
    return None


def _report(ok: bool, problems: list[str], message: str, **extra: Any) -> dict[str, Any]:
    return {"ok": ok, "problems": problems,
            "message": message if ok else "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""),
            **extra}
