"""Pyomo backend: the same MIP as a Pyomo model, for any solver Pyomo drives (``pyomo:<name>``).

``solve(mip, solver_name="highs")`` builds a ``ConcreteModel`` (indicator rows as big-M rows
with M from the variables' bounds, exactly as the HiGHS backend does), hands it to
``SolverFactory(solver_name)`` and reads back values, objective and — where the solver reports
one — the bound. Pyomo solver interfaces differ in what they report; a missing bound is None,
so the result is never called optimal on a solver's word alone without a bound. (This module is
imported only when a ``pyomo:<name>`` solve runs: Pyomo takes a second to import.)
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import pyomo.environ as pyo
from pyomo.version import version as PYOMO_VERSION

from codesign.backends.result import LoweringError, SolveResult, relative_gap
from codesign.errors import InputError
from codesign.mip.program import MIP


def _big_m_rows(mip: MIP) -> list[tuple[str, np.ndarray, np.ndarray, float, float]]:
    """Rows of the MIP plus each indicator lowered to big-M rows (M from interval bounds)."""
    rows = [(r.name, r.idx, r.val, r.lb, r.ub) for r in mip.rows]
    for ind in mip.indicators:
        r = ind.row
        lo, hi = mip.row_bounds(r.idx, r.val)
        b = ind.binary
        if math.isfinite(r.ub) and hi > r.ub:
            if not math.isfinite(hi):
                raise LoweringError(f"indicator {ind.name}: its row has no finite upper range for big-M")
            # a·x + (hi - ub)·b <= hi
            rows.append((f"{ind.name}-ub", np.append(r.idx, b), np.append(r.val, hi - r.ub), -math.inf, hi))
        if math.isfinite(r.lb) and lo < r.lb:
            if not math.isfinite(lo):
                raise LoweringError(f"indicator {ind.name}: its row has no finite lower range for big-M")
            # a·x + (lo - lb)·b >= lo
            rows.append((f"{ind.name}-lb", np.append(r.idx, b), np.append(r.val, lo - r.lb), lo, math.inf))
    return rows


def to_pyomo(mip: MIP):
    """A Pyomo ConcreteModel equivalent to ``mip`` (variables x[i], constraints c[k], objective)."""
    m = pyo.ConcreteModel(name=mip.name)
    n = len(mip.vars)
    m.I = pyo.RangeSet(0, n - 1)

    def bounds(_m, i):
        v = mip.vars[i]
        return (None if v.lb == -math.inf else v.lb, None if v.ub == math.inf else v.ub)

    def domain(_m, i):
        v = mip.vars[i]
        if v.integer and v.lb >= 0 and v.ub <= 1:
            return pyo.Binary
        return pyo.Integers if v.integer else pyo.Reals

    m.x = pyo.Var(m.I, bounds=bounds, domain=domain)
    rows = _big_m_rows(mip)
    m.K = pyo.RangeSet(0, len(rows) - 1) if rows else pyo.Set(initialize=[])

    def con(_m, k):
        _, idx, val, lb, ub = rows[k]
        expr = sum(float(a) * _m.x[int(i)] for i, a in zip(idx, val, strict=True))
        return (None if lb == -math.inf else lb, expr, None if ub == math.inf else ub)

    m.c = pyo.Constraint(m.K, rule=con)
    m.obj = pyo.Objective(
        expr=sum(float(a) * m.x[int(i)] for i, a in zip(mip.obj_idx, mip.obj_val, strict=True)) + mip.obj_constant,
        sense=pyo.minimize,
    )
    m._row_names = [r[0] for r in rows]
    return m


def _pyomo_version() -> str:
    """Pyomo's version (``pyomo.version.version``; ``pyomo.environ`` no longer re-exports it)."""
    return f"pyomo {PYOMO_VERSION}"


def solve(mip: MIP, solver_name: str = "highs", *, time_limit: float | None = None, **_: Any) -> SolveResult:
    """Solve through ``pyomo.environ.SolverFactory(solver_name)``."""
    # Pyomo logs its own traceback when a name is no solver it knows; the message below says it
    pyomo_log = logging.getLogger("pyomo")
    level = pyomo_log.level
    pyomo_log.setLevel(logging.CRITICAL)
    try:
        opt = pyo.SolverFactory(solver_name)
        found = opt is not None and opt.available(exception_flag=False)
    finally:
        pyomo_log.setLevel(level)
    if not found:
        raise InputError(
            f"Pyomo cannot find solver {solver_name!r}",
            expected="a solver Pyomo drives that is installed (e.g. pyomo:highs, pyomo:cbc, pyomo:glpk)",
        )
    t0 = time.perf_counter()
    model = to_pyomo(mip)
    options: dict[str, Any] = {}
    if solver_name in ("highs", "appsi_highs"):
        options = {"mip_rel_gap": 0.0, "mip_abs_gap": 0.0}
        if time_limit is not None:
            options["time_limit"] = time_limit
    res = opt.solve(model, load_solutions=False, options=options) if options else opt.solve(model, load_solutions=False)
    elapsed = time.perf_counter() - t0
    tc = str(res.solver.termination_condition)
    status = "error"
    x = objective = bound = None
    if tc in ("optimal", "maxTimeLimit", "feasible", "maxIterations"):
        try:
            model.solutions.load_from(res)
            x = np.array([pyo.value(model.x[i]) if model.x[i].value is not None else 0.0 for i in range(len(mip.vars))])
            objective = float(pyo.value(model.obj))
        except (ValueError, AttributeError):
            x = None
    if tc in ("infeasible", "infeasibleOrUnbounded"):
        status = "infeasible"
    elif x is not None:
        lb = getattr(res.problem, "lower_bound", None)
        bound = float(lb) if lb is not None and math.isfinite(float(lb)) else None
        status = "optimal" if tc == "optimal" and bound is not None else "feasible"
    elif tc == "maxTimeLimit":
        status = "no_solution"
    return SolveResult(
        status=status,
        termination=tc,
        objective=objective,
        bound=bound,
        gap=relative_gap(objective, bound),
        x=x,
        wall_time_s=elapsed,
        nodes=None,
        solver=f"pyomo:{solver_name}",
        solver_version=_pyomo_version(),
        parameters={"mip_rel_gap": 0.0, "mip_abs_gap": 0.0, **options},
    )
