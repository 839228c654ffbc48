"""Gap certificates for a chosen design: "no feasible design beats yours by more than G %".

``certify(problem, design)`` evaluates the design with the model (feasibility, every constraint,
the objective) and takes a proven bound on the best objective of any feasible design — from a
stored solution of the same instance content (and calibration), or by solving:

    minimise:  G = (f(d) - f_lb) / |f(d)|        maximise:  G = (f_ub - f(d)) / |f(d)|

A bound from an optimal solve carries its *witness*, the optimal design: the bound is the model's
objective of it, so :func:`codesign.proof.check.check_certificate` re-derives it without solving.
A time-limited solve gives a valid, looser certificate without a witness.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from codesign.errors import InputError, ModelError
from codesign.kinds.base import Assessment, Problem
from codesign.proof import records
from codesign.proof.driver import AUTO, solve
from codesign.proof.tolerances import CONFIRM_RTOL, GAP_TOL


def stored_solution(problem: Problem, directory: Path) -> tuple[records.Solution, Path, str] | None:
    """The stored solution of this very problem in ``directory`` (same content hash), with its path
    and the sha256 of its bytes; None when there is none or it proves nothing."""
    path = Path(directory) / f"{problem.name}.json"
    if not path.is_file():
        return None
    try:
        rec = records.read_record(path, expected=records.Solution)
    except InputError:
        return None
    if rec.instance_hash != problem.content_hash or rec.bound is None or rec.status not in ("optimal", "feasible"):
        return None
    return rec, path, hashlib.sha256(path.read_bytes()).hexdigest()  # type: ignore[return-value]


def bound_source(sol: records.Solution, source: str, solution_hash: str | None = None) -> records.BoundSource:
    return records.BoundSource(
        source=source, status=sol.status, solver=sol.solver, solver_version=sol.solver_version,
        solution_hash=solution_hash, witness=sol.design if sol.status == "optimal" else None, optimum=sol.objective,
    )


def certify(
    problem: Problem,
    design: dict[str, Any],
    *,
    solver: str = AUTO,
    time_limit: float | None = None,
    solutions: Path | None = None,
    source: str = "design",
    progress: Any = None,
) -> records.Certificate:
    """The certificate of ``design`` (a possibly partial design; missing decisions keep the
    baseline's values where the kind has such values)."""
    full = problem.parse_design(design, source=source)
    a = problem.assess(full)
    found = stored_solution(problem, solutions) if solutions is not None else None
    if found is not None:
        sol, path, digest = found
        src = bound_source(sol, f"stored solution {path}", digest)
    else:
        sol = solve(problem, solver=solver, time_limit=time_limit, progress=progress)
        if sol.termination.startswith("interrupted"):
            raise KeyboardInterrupt
        src = bound_source(sol, "solve")
    return build(problem, a, sol.bound if sol.status in ("optimal", "feasible") else None, src)


def build(problem: Problem, a: Assessment, bound: float | None, src: records.BoundSource) -> records.Certificate:
    """The certificate of the assessed design ``a`` against ``bound`` (also what the check
    re-derives a certificate with)."""
    gap = records.user_gap(problem.sense, a.objective, bound) if a.feasible and bound is not None else None
    if gap is not None and gap < 0:
        if -gap > CONFIRM_RTOL:
            raise ModelError(f"the design's {problem.metric} {a.objective!r} beats the proven bound {bound!r}: "
                             f"the bound ({src.source}) is wrong")
        gap = 0.0  # a tie within the tolerance the bound was proved to
    if not a.feasible:
        statement = "the design is infeasible: " + "; ".join(a.violations)
    elif gap is None:
        statement = "no bound is available (the solve found none within its limits)"
    elif gap <= GAP_TOL:
        statement = f"the design is optimal: no feasible design beats it (gap {gap:.2e} <= {GAP_TOL:g})"
    else:
        better = "lower" if problem.sense == "min" else "higher"
        statement = f"no feasible design beats this one by more than {100 * gap:.4g} % ({better} is better; bound {bound:.10g})"
    fields = records.evaluation(problem, a).model_dump(exclude={"record", "schema_version"})
    return records.Certificate(**fields, bound=bound, gap=gap, statement=statement, bound_source=src,
                               provenance=records.provenance())
