"""codesign.proof.driver's checks around a solve: cross_check of two solvers' records, the
solver name (check_solver, other_solver, auto's choice per kind) and the limits (check_limits)."""

from __future__ import annotations

import math

import pytest

from codesign.errors import InputError, ModelError
from codesign.kinds.registry import load
from codesign.proof import driver
from codesign.proof.driver import check_limits, check_solver, cross_check, solve
from codesign.proof.tolerances import AGREEMENT_RTOL

# --------------------------------------------------------------------------------------------------
# cross_check, the solver name and the limits
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_records():
    p = load("tiny-3d-llama8b")
    return solve(p, solver="highs"), solve(p, solver="cpsat")


def test_cross_check_agrees_on_the_same_optimum(two_records):
    a, b = two_records
    cc = cross_check(a, b)
    assert cc["agree"] is True and cc["solvers"] == ["highs", "cpsat"]
    assert cc["relative_difference"] <= AGREEMENT_RTOL


def test_cross_check_raises_when_the_optima_disagree(two_records):
    a, b = two_records
    off = b.model_copy(update={"objective": b.objective * (1 + 3 * AGREEMENT_RTOL)})
    with pytest.raises(ModelError, match="disagree"):
        cross_check(a, off)
    within = b.model_copy(update={"objective": b.objective * (1 + 0.5 * AGREEMENT_RTOL)})
    assert cross_check(a, within)["agree"] is True


def test_cross_check_raises_when_feasibility_disagrees(two_records):
    a, b = two_records
    with pytest.raises(ModelError, match="feasibility"):
        cross_check(a, b.model_copy(update={"status": "infeasible", "design": None, "objective": None}))
    both = b.model_copy(update={"status": "infeasible", "design": None, "objective": None})
    assert cross_check(both, both)["agree"] is True


def test_cross_check_compares_nothing_without_two_proofs(two_records):
    a, b = two_records
    cc = cross_check(a, b.model_copy(update={"status": "feasible"}))
    assert cc["agree"] is None and "not both proven" in cc["note"]


@pytest.mark.parametrize("solver", ["gurobi", "pyomo:", "HIGHS"])
def test_an_unknown_solver_is_bad_input(solver):
    with pytest.raises(InputError):
        check_solver(solver)


def test_known_solvers_pass():
    for solver in ("highs", "cpsat", "pyomo:highs", "pyomo:cbc"):
        check_solver(solver)


@pytest.mark.parametrize(("time_limit", "threads"), [(0.0, None), (-1.0, None), (math.inf, None), (math.nan, None), (None, -1),
                                                    (None, 100_000)])
def test_limits_are_checked(time_limit, threads):
    with pytest.raises(InputError):
        check_limits(time_limit, threads)
    check_limits(1.0, 0)


def test_other_solver():
    assert [driver.other_solver(s) for s in ("highs", "cpsat", "pyomo:highs")] == ["cpsat", "highs", "cpsat"]


def test_auto_is_each_kinds_default_solver(named):
    # HiGHS for hardware/schedule grids, CP-SAT for the assignment MIPs of mappings and placements
    assert driver.choose_solver(named("tiny-3d-llama8b"), "auto") == "highs"
    assert driver.choose_solver(named("tiny-pf-mapping"), "auto") == "cpsat"
    assert driver.choose_solver(named("tiny-placement-mixtral"), "auto") == "cpsat"
    # training: HiGHS (a one-hot over the layouts); DLRM placements: CP-SAT (BENCHMARKS.md §2)
    assert driver.choose_solver(named("tiny-pf-train"), "auto") == "highs"
    assert driver.choose_solver(named("pf-dlrm-paper"), "auto") == "cpsat"
    assert driver.choose_solver(named("tiny-placement-mixtral"), "highs") == "highs"
    assert driver.choose_solver(named("tiny-placement-mixtral"), "pyomo:highs") == "pyomo:highs"
    assert driver.solve(named("tiny-pf-mapping")).solver == "cpsat"
    # a mapping under a metric budget: HiGHS (CP-SAT stalled on the budget's epigraph row)
    assert driver.choose_solver(named("tiny-pf-mapping").with_budgets(["tokens_per_s >= 7000"]), "auto") == "highs"


def test_threads_up_to_eight_per_core_and_at_least_64_are_accepted():
    check_limits(None, 0)
    check_limits(None, 64)  # a CP-SAT portfolio of 64 workers, whatever the machine
    with pytest.raises(InputError, match="per core"):
        check_limits(None, max(64, driver.THREADS_PER_CORE * driver.cores()) + 1)
