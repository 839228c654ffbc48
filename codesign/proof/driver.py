"""Solve an instance: build the exact MIP, run a backend, decode, verify with the model, report.

The result speaks in the user's objective (tokens/s is maximised; the MIP minimises the
weighted time per token, its reciprocal). ``status`` is "optimal" only when the solver proved
optimality, the model re-check passed, and the verified gap is within ``GAP_TOL``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codesign import __version__
from codesign.errors import InputError, ModelError
from codesign.kinds.grid.spec import Instance
from codesign.model.evaluate import objective_from_internal

#: a result is called optimal when the verified relative gap is at most this
GAP_TOL = 1e-6

SOLVERS = ("highs", "cpsat")


def check_solver(solver: str) -> None:
    """``highs``, ``cpsat`` or ``pyomo:<name>`` (any solver Pyomo drives)."""
    if solver in SOLVERS or (solver.startswith("pyomo:") and len(solver) > len("pyomo:")):
        return
    from codesign.errors import did_you_mean

    raise InputError(
        "unknown solver",
        key="--solver",
        value=solver,
        expected="highs | cpsat | pyomo:<name> (e.g. pyomo:highs, pyomo:cbc)",
        suggestion=did_you_mean(solver, SOLVERS),
    )


def exit_code(sol: Any) -> int:
    """What ``solve`` exits with after printing (and saving) a solution: 1 without a design
    (infeasible, no solution), 130 when Ctrl-C ended the run (the incumbent and its bound are
    kept), else 0."""
    if sol.status not in ("optimal", "feasible"):
        return 1
    return 130 if str(sol.termination).startswith("interrupted") else 0


def check_limits(time_limit: float | None, threads: int | None) -> None:
    """A time limit is a positive finite number of seconds; threads a count, 0 for the solver's
    own choice."""
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise InputError("a time limit is a positive number of seconds", key="--time-limit", value=time_limit,
                         expected="> 0 and finite", suggestion="leave it out to solve to proven optimality")
    if threads is not None and threads < 0:
        raise InputError("threads is a count", key="--threads", value=threads,
                         expected=">= 1, or 0 for the solver's own choice")


def backend_solve(mip, solver: str, **opts):
    """Dispatch to a native backend or to Pyomo (``pyomo:<name>``)."""
    from codesign import backends

    if solver.startswith("pyomo:"):
        from codesign.backends import pyomo as pyomo_backend

        return pyomo_backend.solve(mip, solver.split(":", 1)[1], time_limit=opts.get("time_limit"))
    return backends.solve(mip, solver, **opts)


@dataclass(kw_only=True)
class SolveRecord:
    """What every solve reports, whichever family (named instances: :class:`Solution`; mapping and
    placement: :class:`codesign.kinds.family.FamilySolution`): the verified design, the
    objective in the user's metric, the solver's bound and the gap, the solver's own record."""

    instance: str
    instance_hash: str
    solver: str
    status: str
    sense: str
    objective_metric: str
    objective: float | None
    bound: float | None
    gap: float | None
    design: dict[str, Any] | None
    metrics: dict[str, Any] | None
    mip: dict[str, Any]
    build_s: float
    solve_s: float
    time_s: float
    nodes: int | None
    termination: str
    solver_version: str
    parameters: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(kw_only=True)
class Solution(SolveRecord):
    """A named instance's solve: the record plus the model's per-workload metrics, the
    verification loop's account, the internal objective and bound, and the constraint audit."""

    workload_metrics: dict[str, dict[str, float]] | None
    verification: dict[str, Any] | None
    internal_objective: float | None = None
    internal_bound: float | None = None
    rounding: dict[str, Any] | None = None
    reason: str | None = None
    budgets: list[dict[str, str]] = field(default_factory=list)
    audit: list[dict[str, Any]] | None = None


def user_gap(sense: str, objective: float | None, bound: float | None) -> float | None:
    """Relative gap in the user's objective: (f - lb)/|f| for min, (ub - f)/|f| for max."""
    if objective is None or bound is None:
        return None
    if objective == 0:
        return 0.0 if bound == 0 else float("inf")
    diff = (objective - bound) if sense == "min" else (bound - objective)
    return diff / abs(objective)


def headline(sol: Any, number: Callable[[float], str] = lambda x: f"{x:.10g}") -> str:
    """The first line a solve prints (rich markup): status, sense, metric, objective, bound, gap.
    Any solution record with those fields (``Solution``, the mapping family's ``FamilySolution``)."""
    color = {"optimal": "green", "feasible": "yellow"}.get(sol.status, "red")
    head = f"[{color}]{sol.status}[/] {sol.sense} {sol.objective_metric}"
    if sol.objective is not None:
        head += f" = {number(sol.objective)}"
    if sol.bound is not None:
        head += f"   bound {number(sol.bound)}"
    if sol.gap is not None:
        head += f"   gap {sol.gap:.2e}"
    return head


@functools.lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The repository's HEAD commit (asked once per process: one ``git`` subprocess, not one
    per solve)."""
    here = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def solve_instance(
    inst: Instance,
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    threads: int | None = None,
    progress=None,
    verbose: bool = False,
    decompose: bool = True,
) -> Solution:
    """Build, solve, decode and verify (raises ModelError if the model disagrees with the solver).

    ``decompose`` False skips the decomposed bound presolve (the MIP then sees every
    non-dominated hardware design; for benchmarks and tests of the formulation)."""
    from codesign.kinds.grid.formulation import build

    check_solver(solver)
    t0 = time.perf_counter()
    comp = build(inst, integer_grid=solver == "cpsat", decompose=decompose)
    build_s = time.perf_counter() - t0
    sense = inst.objective.resolved_sense
    base = dict(
        instance=inst.name,
        instance_hash=inst.content_hash,
        sense=sense,
        objective_metric=inst.objective.metric,
        solver=solver,
        mip={**comp.mip.stats(), "pruned": comp.pruned},
        build_s=build_s,
        provenance={**_provenance(), "instance_source": str(inst.source) if inst.source else None},
        budgets=[b.model_dump() for b in inst.spec.budgets.custom],
    )
    if comp.empty_reason:
        return Solution(
            **base, status="infeasible", objective=None, bound=None, gap=None, design=None, metrics=None,
            workload_metrics=None, solver_version="", termination="presolve", parameters={},
            time_s=time.perf_counter() - t0, solve_s=0.0, nodes=0, verification=None, reason=comp.empty_reason,
        )
    opts: dict[str, Any] = {"verbose": verbose}
    if time_limit is not None:
        opts["time_limit"] = time_limit
    if threads is not None:
        opts["threads"] = threads
    if progress is not None:
        unit = comp.objective_unit

        def _progress(inc, bnd, gap, elapsed):
            to_user = lambda v: None if v is None else objective_from_internal(inst, v * unit)  # noqa: E731
            progress(to_user(inc), to_user(bnd), gap, elapsed)

        opts["progress"] = _progress
    run = solve_exact(inst, comp, solver, opts, time_limit)
    res = run.last
    design = metrics = wmetrics = ver = None
    obj = bound = gap = internal = internal_bound = None
    status = run.status
    if run.bound is not None:
        internal_bound = run.bound
        bound = objective_from_internal(inst, internal_bound) if internal_bound > 0 else (
            float("inf") if sense == "max" else internal_bound
        )
    if run.best is not None:
        design, v = run.best
        ver = {**v.as_dict(), "rounds": run.rounds, "rejected_by_model": run.rejected}
        internal = v.objective_model
        obj = objective_from_internal(inst, internal)
        metrics = v.evaluation.metrics
        wmetrics = v.evaluation.workload_metrics
        gap = user_gap(sense, obj, bound)
        if status == "optimal" and (gap is None or abs(gap) > GAP_TOL):
            status = "feasible"
    elif status == "optimal":
        status = "no_solution"
    termination = res.termination
    if run.timed_out:
        termination = f"time limit reached before the optimum was confirmed (the last round: {res.termination})"
    elif run.best is not None and res.status == "infeasible":
        # the exclude-and-resolve loop's last round found nothing better: that is the proof
        termination = (f"proved in {run.rounds} rounds (the last, {res.termination}: no design beats the best "
                       "verified one)")
    return Solution(
        **base, status=status, objective=obj, bound=bound, gap=gap, design=design, metrics=metrics,
        workload_metrics=wmetrics, solver_version=res.solver_version, termination=termination,
        parameters={**res.parameters, "verified_gap_tolerance": GAP_TOL, "polish_rtol": POLISH_RTOL},
        time_s=time.perf_counter() - t0, solve_s=run.seconds, nodes=run.nodes, verification=ver,
        internal_objective=internal, internal_bound=internal_bound, rounding=_rounding_dict(res),
        audit=None if run.best is None else [
            {"name": a.name, "value": a.value, "limit": a.limit, "slack": a.slack, "ok": a.ok, "unit": a.unit}
            for a in run.best[1].evaluation.audit
        ],
        reason="the MIP is infeasible" if status == "infeasible" else None,
    )


#: the loop stops when the solver's bound on the designs not yet seen is within this relative
#: distance of the best design the model has verified (ties closer than this are not enumerated)
POLISH_RTOL = 1e-9
#: designs within this relative distance of the best verified one are ties: the confirming solve
#: asks only for designs better than that (a solver meets rows within ~1e-7 of their scale)
CONFIRM_RTOL = 1e-7
#: the least time a round is given under --time-limit (the first round runs whatever is left)
MIN_ROUND_TIME_S = 0.01
#: at most this many solver rounds (each excludes one more design)
MAX_ROUNDS = 200


@dataclass
class ExactRun:
    status: str
    best: tuple[dict[str, Any], Any] | None
    bound: float | None  # internal (minimised) lower bound valid for every design
    rounds: int
    rejected: int
    seconds: float
    nodes: int | None
    last: Any
    #: the time limit ended the run between rounds (before a confirming solve)
    timed_out: bool = False


def solve_exact(inst: Instance, comp, solver: str, opts: dict[str, Any], time_limit: float | None) -> ExactRun:
    """Solve, verify with the model, and exclude-and-resolve until the optimum is proven exactly.

    A backend may answer a slightly relaxed model (CP-SAT rounds coefficients outward; HiGHS
    meets rows within its tolerances), so its design is re-evaluated with the model. Each round
    adds a no-good cut on the design's binaries and a cutoff ``objective <= best``; every design
    strictly better than the best verified one has a relaxed objective below the cutoff, so it
    is still in the model. The run stops when the solver's bound on the remaining designs reaches
    the best verified objective (within POLISH_RTOL) or the model becomes infeasible: then the
    best design is optimal for the exact model. Rows added here are removed before returning.
    """
    from codesign.kinds.grid.verify import verify, with_claim
    from codesign.mip import linearize as lin

    mip = comp.mip
    unit = comp.objective_unit
    rows0 = len(mip.rows)
    t0 = time.perf_counter()
    best: tuple[dict[str, Any], Any] | None = None
    best_f = float("inf")
    rounds = rejected = 0
    nodes = 0
    status = "no_solution"
    bound = None
    res = None
    confirmed = None  # the best value a strict cutoff has been asked to beat
    timed_out = False
    try:
        while rounds < MAX_ROUNDS:
            rounds += 1
            o = dict(opts)
            if time_limit is not None:
                left = time_limit - (time.perf_counter() - t0)
                if left <= 0 and res is not None:
                    status = "feasible" if best else "no_solution"
                    timed_out = True
                    break
                o["time_limit"] = max(left, MIN_ROUND_TIME_S)  # the first round always runs
            res = backend_solve(mip, solver, **o)
            nodes += res.nodes or 0
            if res.status == "infeasible":
                if best is None and solver == "cpsat":
                    left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), MIN_ROUND_TIME_S)
                    _confirm_infeasible(inst, comp, {**o, "time_limit": left} if left is not None else o)
                # nothing left at or below the cutoff: the best verified design is optimal
                status = "optimal" if best else "infeasible"
                bound = best_f if best else None
                break
            if res.bound is not None:
                # a bound over the designs not yet excluded; the excluded ones are worse than the
                # best or rejected, so min(best, it) bounds every design. A round stopped early
                # (the confirming one under a time limit) may prove less: keep the best proven.
                round_bound = res.bound * unit if best is None else min(best_f, res.bound * unit)
                bound = round_bound if bound is None else max(bound, round_bound)
            x = res.x if res.x is not None else res.raw_x
            if x is None:
                status = "feasible" if best else res.status
                break
            design = comp.decode(x)
            claimed = res.objective * unit if res.objective is not None else None
            v = verify(inst, design, None)
            # a design the model accepts is priced by the model, whether or not the solver's own
            # final step kept it (CP-SAT's re-solve after unrounding may drop a design it found)
            if v.evaluation is not None and v.ok:
                f = v.objective_model
                if res.x is not None and claimed is not None and abs(f - claimed) > 1e-6 * abs(f) and res.rounding is None:
                    raise ModelError(
                        f"{solver} objective {claimed:.12g} differs from the model's {f:.12g} for design {design}"
                    )
                if f < best_f:
                    # an integer-grid model under-estimates each product by < one step, so its
                    # objective is compared with the model only by the loop's bound, not here
                    # the design's one evaluation by the model, judged against the claim
                    best_f, best = f, (design, with_claim(v, None if comp.integer_grid else claimed))
            else:
                rejected += 1
            proved = _proved(res)
            reached = best is not None and res.bound is not None and res.bound * unit >= best_f * (1 - POLISH_RTOL)
            if reached and not proved:
                status, bound = "feasible", min(best_f, res.bound * unit)
                break
            if reached and confirmed == best_f:
                # the strict cutoff below found nothing better either: optimal
                status, bound = "optimal", best_f
                break
            if not proved and res.x is not None:
                status = "feasible" if best else res.status
                break
            # (a round whose design the solver could not keep proves nothing: exclude and go on)
            # exclude this design; keep only designs that could beat the best verified one. When
            # the solver's bound already reaches the best, that bound is not taken as the proof
            # (HiGHS has called designs 1e-6 to 2e-5 worse optimal with gap 0 on multi-workload
            # mixes): one more solve asks for a design better by more than CONFIRM_RTOL, and only
            # an empty model (or a bound above that cutoff) ends the run as optimal.
            exclude_design(comp, x, f"polish-nogood[{rounds}]")
            if best is not None:
                margin = CONFIRM_RTOL * abs(best_f) if reached else 0.0
                confirmed = best_f if reached else None
                idx, val = lin.add((mip.obj_idx, mip.obj_val))
                mip.add_row(f"polish-cutoff[{rounds}]", idx, val, ub=(best_f - margin) / unit - mip.obj_constant)
    finally:
        del mip.rows[rows0:]
    if best is not None and bound is not None and bound > best_f:
        bound = best_f
    return ExactRun(status, best, bound, rounds, rejected, time.perf_counter() - t0, nodes, res, timed_out)


def _confirm_infeasible(inst: Instance, comp, opts: dict[str, Any]) -> None:
    """CP-SAT's word that no design is feasible, checked by HiGHS on the instance's MIP: CP-SAT has
    called a feasible instance infeasible (an appliance, a chip domain and two loose budgets; a
    fuzzing of brute force against both solvers found it). A design HiGHS finds and the model
    accepts is a solver disagreement (ModelError), never an "infeasible" answer."""
    from codesign.kinds.grid.formulation import build
    from codesign.kinds.grid.verify import verify

    plain = comp if not comp.integer_grid else build(inst, comp.tables)  # HiGHS takes the real-valued MIP
    if plain.empty_reason:
        return
    res = backend_solve(plain.mip, "highs", **{k: v for k, v in opts.items() if k in ("time_limit", "threads")})
    if res.x is None:
        return
    design = plain.decode(res.x)
    if verify(inst, design, None).ok:
        raise ModelError(f"CP-SAT says no design of {inst.name} is feasible, but HiGHS finds {design}, which "
                         "the model accepts: a CP-SAT wrong answer; solve with --solver highs")


def exclude_design(comp, x: np.ndarray, name: str) -> None:
    """Add a no-good row to ``comp``'s MIP: the design ``x`` selects (its hardware row and each
    workload's schedule) is not chosen again."""
    chosen = np.concatenate([[comp.x[_on(x[comp.x])]]] + [[y[_on(x[y])]] for y in comp.y.values()])
    comp.mip.add_row(name, chosen, np.ones(len(chosen)), ub=len(chosen) - 1)


def _proved(res) -> bool:
    """The solver proved its (possibly rounded) model optimal: its bound is then valid for the
    designs left, and the loop can go on. CP-SAT reports "feasible" when only the rounding
    allowance keeps the gap open, with termination "OPTIMAL"."""
    return res.status == "optimal" or str(res.termination).upper().startswith("OPTIMAL")


def _on(vals: np.ndarray) -> int:
    from codesign.kinds.grid.formulation import BINARY_ON

    return int(np.flatnonzero(vals > BINARY_ON)[0])


def _rounding_dict(res) -> dict[str, Any] | None:
    r = getattr(res, "rounding", None)
    if r is None:
        return None
    if hasattr(r, "to_dict"):
        return r.to_dict()
    if hasattr(r, "__dataclass_fields__"):
        from dataclasses import asdict

        d = asdict(r)
        d.pop("rows", None)
        return d
    return None


def _provenance() -> dict[str, Any]:
    import platform

    from codesign.model.hardware import (
        calibration_path,
        calibration_sha256,
        shipped_calibration_path,
    )

    cal = calibration_path()
    return {
        "codesign_version": __version__,
        # the calibration the model used (`codesign --calibration FILE` swaps it): a stored
        # solution re-checks only under the same one
        "calibration": "shipped" if cal == shipped_calibration_path() else str(cal),
        "calibration_sha256": calibration_sha256(),
        "git_revision": git_revision(),
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


#: two solvers agree when the model's objectives of their designs differ by at most this
AGREEMENT_RTOL = 1e-9


def cross_check(a: SolveRecord, b: SolveRecord, rtol: float = AGREEMENT_RTOL) -> dict[str, Any]:
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
        raise ModelError(
            f"{a.solver} and {b.solver} disagree on {a.instance}: {a.objective!r} vs {b.objective!r} (relative {rel:.3g})"
        )
    return {**info, "agree": True, "relative_difference": rel, "times_s": [a.time_s, b.time_s]}


def check_solution(path: str | Path) -> dict[str, Any]:
    """Re-verify a stored solution: same instance content, feasible design, same objective."""
    from codesign.jsonio import read_json
    from codesign.kinds.grid.spec import load_instance
    from codesign.kinds.grid.verify import verify

    data = read_json(path)
    for key in ("instance", "instance_hash", "status", "design", "internal_objective"):
        if key not in data:
            raise InputError("not a solution file: key missing", file=path, key=key)
    from codesign.kinds.grid.spec import list_instances, with_budgets

    source = (data.get("provenance") or {}).get("instance_source")
    named = data["instance"] in list_instances()
    inst = load_instance(data["instance"] if named or not source or not Path(source).exists() else source)
    inst = with_budgets(inst, [b["expr"] for b in data.get("budgets", []) if b["name"].startswith("cli-")])
    if inst.content_hash != data["instance_hash"]:
        return {"ok": False, "message": f"instance {inst.name} changed since the solution was written (hash differs)"}
    if data["design"] is None:
        return {"ok": data["status"] == "infeasible", "message": f"no design; status {data['status']}"}
    v = verify(inst, data["design"], data["internal_objective"])
    prov = data.get("provenance") or {}
    if not v.ok:
        return {"ok": False, "message": "; ".join(v.problems) + _other_calibration(prov), "verification": v.as_dict()}
    if v.relative_difference is not None and v.relative_difference > AGREEMENT_RTOL:
        return {"ok": False, "message": f"objective differs from the record by {v.relative_difference:.3g}"
                                        f"{_other_calibration(prov)}"}
    obj = objective_from_internal(inst, v.objective_model)
    return {
        "ok": True,
        "message": f"{data['status']} {inst.objective.metric} = {obj:.10g} reproduced by the model",
        "objective": obj,
        "status": data["status"],
        "verification": v.as_dict(),
    }


def _other_calibration(provenance: dict[str, Any]) -> str:
    """A note when the solution was solved under another calibration than the one in use."""
    from codesign.model.hardware import calibration_sha256

    recorded = provenance.get("calibration_sha256")
    if recorded is None or recorded == calibration_sha256():
        return ""
    return (f" (it was solved under calibration {provenance.get('calibration', '?')} "
            f"sha256 {recorded[:12]}, not the one in use; `codesign --calibration FILE check-solution` checks it under its own)")


def write_ledger(directory: str | Path) -> Path:
    """Rewrite ``<dir>/ledger.solu`` from every solution file in ``dir``.

    One line per instance in the SCIP ``.solu`` style: ``=opt=`` proven optimum, ``=best=`` best
    known with its gap, ``=inf=`` proven infeasible; the value is the user's objective.
    """
    from codesign.jsonio import read_json

    directory = Path(directory)
    lines = ["# instance ledger: =opt= proven optimal (verified gap <= 1e-6), =best= feasible, =inf= infeasible"]
    for f in sorted(directory.glob("*.json")):
        d = read_json(f)
        if not isinstance(d, dict) or "status" not in d or "instance" not in d:
            continue
        tag = {"optimal": "=opt=", "feasible": "=best=", "infeasible": "=inf="}.get(d["status"])
        if tag is None:
            continue
        value = "" if d.get("objective") is None else f"{d['objective']:.12g}"
        extra = f"  # {d['sense']} {d['objective_metric']}, {d['solver']}"
        if d["status"] == "feasible" and d.get("gap") is not None:
            extra += f", gap {d['gap']:.3g}"
        lines.append(f"{tag} {d['instance']} {value}{extra}".rstrip())
    path = directory / "ledger.solu"
    tmp = path.with_suffix(".solu.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path
