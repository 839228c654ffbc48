"""Shared test helpers."""

from __future__ import annotations

import pytest


@pytest.fixture
def solvers_match_brute_force():
    """A check of exactness on an enumerable instance: brute force finds a feasible optimum, HiGHS
    and CP-SAT both prove it (to 1e-9 relative), and the model gives each returned design that
    objective. Returns the brute-force result."""
    from codesign.kinds.grid.space import brute_force
    from codesign.model.evaluate import evaluate
    from codesign.proof.driver import solve_instance

    def check(inst):
        bf = brute_force(inst)
        assert bf.feasible
        for solver in ("highs", "cpsat"):
            sol = solve_instance(inst, solver=solver)
            assert sol.status == "optimal", (solver, sol.status)
            assert sol.objective == pytest.approx(bf.objective, rel=1e-9), solver
            ev = evaluate(inst, sol.design)
            assert ev.feasible and ev.objective == pytest.approx(bf.objective, rel=1e-9), solver
        return bf

    return check
