"""What the exactness tests of :mod:`codesign.proof.driver` share: the solvers, the tolerances
an optimum must meet against brute force, and the checks of a solve's record against the
enumerated optimum (tests/proof/test_driver_exact_grid.py, test_driver_exact_assignment.py,
test_driver.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codesign.kinds.base import Assessment
from codesign.kinds.grid.problem import Grid
from codesign.proof.driver import solve
from codesign.proof.tolerances import CONFIRM_RTOL, GAP_TOL

DATA = Path(__file__).resolve().parent.parent / "data"
SOLVERS = ("highs", "cpsat")
#: optima agree with brute force to this (grids: the same model arithmetic on both sides)
RTOL = 1e-9
#: mapping and placement optima: the MIP's rows meet the model to ~1e-9 relative, and ties closer
#: than the confirming solve's CONFIRM_RTOL are ties
MAPPING_RTOL = 1e-6
PLACEMENT_RTOL = 1e-7


def better(sense: str, a: float, b: float, rtol: float) -> bool:
    """``a`` beats ``b`` by more than ``rtol`` (relative)."""
    margin = rtol * max(abs(a), abs(b))
    return a > b + margin if sense == "max" else a < b - margin


def check_solution_against(p, sol, best: Assessment | None, rtol: float) -> None:
    """A solve's record against the enumerated optimum ``best`` (None: no feasible design): the
    status, the objective, the model's own verdict on the design, the bound's validity, the gap."""
    if best is None:
        assert sol.status == "infeasible", (sol.solver, sol.status, sol.objective, sol.termination)
        assert sol.design is None and sol.bound is None
        return
    assert sol.status == "optimal", (sol.solver, sol.status, sol.gap, sol.termination)
    assert sol.objective == pytest.approx(best.objective, rel=rtol), (sol.solver, sol.objective, best.objective)
    a = p.assess(p.parse_design(sol.design))  # the record's design is one of the optimal ones
    assert a.feasible and sol.feasible is True
    assert a.objective == pytest.approx(sol.objective, rel=1e-12)
    assert not better(p.sense, best.objective, sol.bound, CONFIRM_RTOL)  # the bound holds for the optimum
    assert sol.gap is not None and abs(sol.gap) <= GAP_TOL
    assert sol.proof["rounds"] >= 1


def check_exact(p, best: Assessment | None, rtol: float = RTOL, solvers=SOLVERS):
    sols = []
    for solver in solvers:
        sol = solve(p, solver=solver)
        check_solution_against(p, sol, best, rtol)
        sols.append(sol)
    return sols


def check_claims(p, best: Assessment | None, *, require_highs_optimal: bool = True) -> None:
    """Every solver's claim against brute force: no "optimal" at another value, no "infeasible"
    with a feasible design, no design where none is feasible, no bound that excludes the
    optimum. HiGHS proves every feasible draw optimal; CP-SAT may stop at "feasible" (its integer
    lowering rounds the stage rows and the energy objective too coarsely to close a 1e-6 gap on
    some draws), but whatever it claims must hold."""
    for solver in SOLVERS:
        sol = solve(p, solver=solver)
        if best is None:
            assert sol.status == "infeasible", (solver, sol.status, sol.objective)
            continue
        assert sol.status != "infeasible", (solver, best.objective)
        if sol.objective is not None:
            assert not better(p.sense, sol.objective, best.objective, MAPPING_RTOL), (solver, sol.objective, best.objective)
            assert p.assess(sol.design).feasible
            if sol.status == "optimal":
                assert sol.objective == pytest.approx(best.objective, rel=MAPPING_RTOL), solver
        if sol.bound is not None:
            assert not better(p.sense, best.objective, sol.bound, MAPPING_RTOL), (solver, sol.bound, best.objective)
        if solver == "highs" and require_highs_optimal:
            assert sol.status == "optimal", (sol.status, sol.termination)


def fuzz(n: int) -> Grid:
    raw = json.loads((DATA / "fuzz" / f"case_{n}.json").read_text())
    return Grid.from_data(raw.get("instance", raw), source=f"fuzz case {n}")
