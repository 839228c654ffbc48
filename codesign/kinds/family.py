"""What the mapping-family solves share: run a backend on a compiled MIP, decode, re-check with the
model, report; cross-check two solvers; re-verify a stored solution.

``status`` is "optimal" only when the backend proved its model optimal, the model re-evaluates
the decoded design as feasible, the MIP's objective of that design equals the model's (relative
``OBJECTIVE_RTOL``), and the model's objective is within ``GAP_TOL`` (relative) of the solver's
bound. A design the model rejects, or an objective the model does not reproduce, is a bug and
raises :class:`~codesign.errors.ModelError` (CLI exit 3).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codesign.errors import ModelError
from codesign.proof.driver import (
    GAP_TOL,
    SolveRecord,
    _provenance,
    check_solver,
    cross_check,
    exit_code,
    headline,
    user_gap,
)

#: the MIP's objective of a decoded design and the model's must agree to this (HiGHS meets rows
#: within its feasibility tolerance, 1e-7 absolute on microsecond rows)
OBJECTIVE_RTOL = 1e-6
#: largest integer coefficient of the CP-SAT scaling (the backend's default is 1e9; row
#: activities stay below its MAX_ACTIVITY = 2^61 whatever this is). The period enters the energy
#: objective on a grid of ~1e9 steps: measured objective rounding 1.2e-6 relative with 1e9,
#: 1.2e-9 with 1e12. The rows' coefficient rounding also widens the integer model (a relaxation):
#: on tests/test_mapping.py's tiny3 (H200 + A100) CP-SAT's proven bound was
#: 6.0e-5 from the optimum at 1e12, 1.1e-6 at 1e14 and 3.5e-7 at 1e15, within GAP_TOL
CPSAT_MAX_COEFFICIENT = 1e15
#: CP-SAT workers when the user gives none. The backend's default of 2 (right for the polyhedral
#: instances, SOLVERS.md) stalls on pf-llama405b-mapping-energy since the calibration of
#: VALIDATION.md §5.10: 2 and 4 workers sit at a 36 % gap after 120 s and grow past 20 GB without a
#: limit, 1 worker proves it in 0.9 s but leaves qwen3-235b-fragmented32-energy unproven at 60 s;
#: 8 workers prove all ten named mapping and placement instances (1.1 s and 6.2 s for those two on
#: 2 cores; formulations/mapping.md §3)
CPSAT_WORKERS = 8
#: two solvers' proven optima must agree to this (each is within GAP_TOL of its bound; the named
#: instances' solves polish to 1e-9, these do not)
FAMILY_AGREEMENT_RTOL = 2 * GAP_TOL


def design_or_baseline(inst, design_data: dict[str, Any] | None, source: str) -> tuple[dict[str, Any], str]:
    """The design a command evaluates: the one given (``--design``), else the instance's
    ``[baseline]``; an instance without one is an input error."""
    if design_data is not None:
        return design_data, source
    if inst.spec.baseline is None:
        from codesign.errors import InputError

        raise InputError("the instance has no [baseline]; give --design FILE", file=inst.source)
    return inst.spec.baseline, f"{inst.source} [baseline]"


@dataclass(kw_only=True)
class FamilySolution(SolveRecord):
    """A mapping or placement solve: the record plus the family, the design-space size and the
    cross-check of the second solver."""

    kind: str
    space_size: int
    cross_check: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = super().as_dict()
        d["space_size_log10"] = math.log10(self.space_size) if self.space_size else None
        return d


def solve_compiled(
    inst,
    kind: str,
    compiled,
    *,
    evaluate: Callable[[Any], Any],
    to_user: Callable[[float], float],
    sense: str,
    metric: str,
    space: int,
    solver: str,
    t0: float,
    time_limit: float | None = None,
    threads: int | None = None,
    progress=None,
    verbose: bool = False,
) -> FamilySolution:
    """Solve ``compiled.mip`` (which has ``decode``, ``stats``), re-check the decoded design with
    ``evaluate`` (the model), and report in the user's objective (``to_user`` maps the MIP's)."""
    from codesign.backends import solve as backend_solve

    check_solver(solver)
    build_s = time.perf_counter() - t0
    opts: dict[str, Any] = {"verbose": verbose}
    if time_limit is not None:
        opts["time_limit"] = time_limit
    if threads is not None:
        opts["threads"] = threads
    if progress is not None:

        def _progress(inc, bnd, gap, elapsed):
            progress(None if inc is None else to_user(inc), None if bnd is None else to_user(bnd), gap, elapsed)

        opts["progress"] = _progress
    if solver == "cpsat":
        opts["max_coefficient"] = CPSAT_MAX_COEFFICIENT
        opts.setdefault("threads", CPSAT_WORKERS)
    res = backend_solve(compiled.mip, solver, **opts)
    design = metrics = None
    obj = bound = gap = None
    status = res.status
    if res.bound is not None and res.bound > 0:
        bound = to_user(res.bound)
    if res.x is not None:
        d = compiled.decode(res.x)
        ev = evaluate(d)
        if not ev.feasible:
            raise ModelError(f"{solver} returned a {kind} design the model rejects: {'; '.join(ev.violations)}")
        claimed = to_user(res.objective)
        if abs(claimed - ev.objective) > OBJECTIVE_RTOL * abs(ev.objective):
            raise ModelError(f"{solver} objective {claimed:.12g} differs from the model's {ev.objective:.12g}")
        obj = ev.objective
        design = d.as_dict()
        metrics = ev.as_dict()
        if bound is not None:
            gap = max(user_gap(sense, obj, bound), 0.0)
        proved = res.status == "optimal" or res.termination.upper().startswith("OPTIMAL")
        status = "optimal" if proved and gap is not None and gap <= GAP_TOL else "feasible"
    return FamilySolution(
        instance=inst.name,
        instance_hash=inst.content_hash,
        kind=kind,
        solver=solver,
        status=status,
        sense=sense,
        objective_metric=metric,
        objective=obj,
        bound=bound,
        gap=gap,
        design=design,
        metrics=metrics,
        space_size=space,
        mip=compiled.stats,
        build_s=build_s,
        solve_s=res.wall_time_s,
        time_s=time.perf_counter() - t0,
        nodes=res.nodes,
        termination=res.termination,
        solver_version=res.solver_version,
        parameters={**res.parameters, "verified_gap_tolerance": GAP_TOL, "objective_rtol": OBJECTIVE_RTOL},
        provenance={**_provenance(), "instance_source": str(inst.source) if inst.source else None},
    )


def check_stored(data: dict[str, Any], path: str | Path, *, load: Callable[[str], Any], named: list[str], evaluate_record) -> dict[str, Any]:
    """Re-verify a stored solution without solving: same instance content, the design feasible
    for the model, the same objective. ``evaluate_record(inst, design_dict, source)`` returns
    the model's evaluation (with ``feasible``, ``violations``, ``objective``) and the metric name."""
    name = data["instance"]
    source = (data.get("provenance") or {}).get("instance_source")
    inst = load(name if name in named or not source else source)
    if inst.content_hash != data["instance_hash"]:
        return {"ok": False, "message": f"instance {inst.name} changed since the solution was written (hash differs)"}
    if data.get("design") is None:
        return {"ok": data["status"] == "infeasible", "message": f"no design; status {data['status']}"}
    ev, metric = evaluate_record(inst, data["design"], str(path))
    if not ev.feasible:
        return {"ok": False, "message": "; ".join(ev.violations)}
    rel = abs(ev.objective - data["objective"]) / abs(ev.objective)
    if rel > OBJECTIVE_RTOL:
        return {"ok": False, "message": f"objective {ev.objective!r} differs from the record {data['objective']!r} ({rel:.3g})"}
    return {"ok": True, "message": f"{data['status']} {metric} = {ev.objective:.10g} reproduced by the model", "objective": ev.objective, "status": data["status"]}


DEFAULT_OUT_DIR = Path("solutions") / "mapping"


def solve_command(
    console,
    err,
    inst,
    solve_fn: Callable[..., FamilySolution],
    show_design: Callable[[FamilySolution], None],
    *,
    solver: str,
    time_limit: float | None,
    threads: int | None,
    cross_check_both: bool,
    save: bool,
    out_dir: Path | None,
    as_json: bool,
    emit,
    explain: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """`codesign solve` for a mapping-family instance: live progress, optional cross-check with
    the other solver, atomic save + ledger, report (exit 1 unless a design was found)."""
    import typer

    from codesign.jsonio import write_json_atomic
    from codesign.model.mapping import format_count
    from codesign.proof.driver import write_ledger

    def run(s: str) -> FamilySolution:
        if as_json or not err.is_terminal:
            return solve_fn(inst, solver=s, time_limit=time_limit, threads=threads)
        with err.status(f"{s}: building and solving {inst.name} ...") as status:

            def progress(inc, bnd, gap, elapsed):
                g = "-" if gap is None else f"{100 * gap:.3g}%"
                status.update(f"{s}: incumbent {'-' if inc is None else f'{inc:.6g}'}  bound {'-' if bnd is None else f'{bnd:.6g}'}  gap {g}  {elapsed:.1f}s")

            return solve_fn(inst, solver=s, time_limit=time_limit, threads=threads, progress=progress)

    sol = run(solver)
    record = sol.as_dict()
    if sol.status == "infeasible" and explain is not None:
        record["explanation"] = explain()
    if cross_check_both:
        record["cross_check"] = cross_check(sol, run("cpsat" if solver != "cpsat" else "highs"), FAMILY_AGREEMENT_RTOL)
    if save:
        path = (out_dir or DEFAULT_OUT_DIR) / f"{inst.name}.json"
        write_json_atomic(path, record)
        write_ledger(path.parent)
        if not as_json:
            console.print(f"saved {path}")
    if as_json:
        emit(record)
    else:
        console.print(headline(sol))
        console.print(
            f"[dim]{sol.solver} {sol.solver_version}: {sol.termination}; space {format_count(sol.space_size)} points; "
            f"build {sol.build_s:.2f}s, solve {sol.solve_s:.2f}s, {sol.mip['variables']} variables / {sol.mip['rows']} rows"
            f"{'; verified by the model' if sol.design else ''}[/]"
        )
        if sol.design is not None:
            show_design(sol)
        if cross_check_both:
            cc = record["cross_check"]
            verdict = "agree" if cc["agree"] else f"not compared: {cc.get('note', '')}"
            console.print(f"cross-check {cc['solvers']}: objectives {cc['objectives']} -> {verdict}")
        for c in (record.get("explanation") or {}).get("conflicts", []):
            console.print(f"[red]infeasible[/] because of {c['constraint']}: {c['message']}")
    if code := exit_code(sol):
        raise typer.Exit(code)
