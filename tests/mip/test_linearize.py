"""codesign.mip.linearize: exhaustive truth tables of every linearization, each through a real
solve (HiGHS and CP-SAT).

For one-hot y (schedule side, values a_s) and one-hot x (hardware side, values h_j), the
product expression u must equal a_s·h_j/unit at *every* pair, from below and from above: we fix
the pair by variable bounds and both minimise and maximise u. A relaxation that only bounded u
from one side would pass one direction and fail the other.

A no-good (the driver's exclusion of a design) must make exactly its assignment infeasible: every
assignment of small domains is fixed by bounds in turn, and only the excluded one has no solution.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from codesign.backends import available_solvers, solve
from codesign.mip import linearize as lin
from codesign.mip.program import MIP

SOLVERS = available_solvers()


def _pair_model(a, h, unit=1.0):
    mip = MIP()
    y = lin.onehot(mip, "y", [str(i) for i in range(len(a))])
    x = lin.onehot(mip, "x", [str(j) for j in range(len(h))])
    idx, val = lin.product(mip, "p", np.array(a, float), y, np.array(h, float), x, unit)
    with np.errstate(invalid="ignore"):
        finite = [v for v in np.outer(a, h).ravel() if math.isfinite(v)]
    u = mip.add_var("u", 0.0, 2 * max([*finite, 1.0]) / unit)
    mip.add_row("u-def", np.append(idx, u), np.append(val, -1.0), 0.0, 0.0)
    return mip, y, x, u


def _solve_fixed(mip, fixed_on, u, direction, solver):
    for i in fixed_on:
        mip.vars[i].lb = 1.0
    mip.set_objective([u], [direction])
    res = solve(mip, solver)
    for i in fixed_on:
        mip.vars[i].lb = 0.0
    return res


PRODUCT_CASES = [
    ([0.0, 1.5, 4.0], [2.0, 3.0]),  # disaggregation over the schedule side (fewer distinct a)
    ([1.0, 2.0], [0.5, 0.5, 7.0, 3.0]),  # repeated hardware values share a group
    ([0.0, 2.0, 3.0, 5.0, 8.0], [1.0, 10.0]),  # more distinct a than h: hardware side
    ([3.0, 3.0], [1.0, 2.0, 4.0]),  # constant schedule factor: linear in x
    ([1.0, 2.0, 9.0], [6.0, 6.0]),  # constant hardware factor: linear in y
]
#: CP-SAT solves an integer model whose rows are rounded outward (codesign/backends/cpsat.py):
#: its truth tables use dyadic data (a/max a and every coefficient exact on a power-of-two grid)
#: so that the lowering is exact and the test checks the linearization, not the rounding.
DYADIC_CASES = [
    ([0.0, 1.0, 2.0, 4.0], [1.0, 3.0]),  # schedule side disaggregated
    ([1.0, 2.0], [0.5, 0.5, 2.0, 3.0]),  # hardware side, a repeated value
    ([0.0, 1.0, 2.0, 4.0, 8.0], [1.0, 2.0]),
]


@pytest.mark.parametrize(
    "solver,a,h",
    [("highs", a, h) for a, h in PRODUCT_CASES if "highs" in SOLVERS]
    + [(s, a, h) for s in SOLVERS for a, h in DYADIC_CASES],
)
def test_product_truth_table(solver, a, h):
    """u = (Σ a_s y_s)(Σ h_j x_j) exactly at every (s, j), minimised and maximised."""
    mip, y, x, u = _pair_model(a, h)
    for s, j in itertools.product(range(len(a)), range(len(h))):
        want = a[s] * h[j]
        lo = _solve_fixed(mip, [y[s], x[j]], u, 1.0, solver)
        hi = _solve_fixed(mip, [y[s], x[j]], u, -1.0, solver)
        # CP-SAT calls a proven-optimal integer model "feasible" when the rounding allowance
        # keeps a relative gap open (here: objective 0); its termination says it proved it
        assert all(r.status == "optimal" or r.termination == "OPTIMAL" for r in (lo, hi)), (s, j)
        assert lo.x[u] == pytest.approx(want, rel=1e-7, abs=1e-7), (s, j)
        assert hi.x[u] == pytest.approx(want, rel=1e-7, abs=1e-7), (s, j)


@pytest.mark.parametrize("solver", SOLVERS)
def test_product_infinite_hardware_value(solver):  # data dyadic: exact for CP-SAT too
    """h = inf: the pair is impossible when a > 0 and costs 0 when a = 0 (0·inf := 0)."""
    a, h = [0.0, 2.0], [1.0, math.inf]
    mip, y, x, u = _pair_model(a, h)
    assert _solve_fixed(mip, [y[1], x[1]], u, 1.0, solver).status == "infeasible"
    res = _solve_fixed(mip, [y[0], x[1]], u, -1.0, solver)
    assert res.status == "optimal"
    assert res.x[u] == pytest.approx(0.0, abs=1e-9)
    res = _solve_fixed(mip, [y[1], x[0]], u, -1.0, solver)
    assert res.x[u] == pytest.approx(2.0, rel=1e-7)


@pytest.mark.parametrize("solver", SOLVERS)
def test_epigraph_max_truth_table(solver):
    """min t s.t. t >= e_k for each k returns max_k e_k at every one-hot choice."""
    vals = [[1.0, 5.0, 2.0], [4.0, 0.5, 3.0]]  # e_k = Σ_s vals[k][s] y_s
    for s in range(3):
        mip = MIP()
        y = lin.onehot(mip, "y", ["0", "1", "2"])
        exprs = [(y, np.array(v)) for v in vals]
        tidx, tval = lin.epigraph_max(mip, "t", exprs, ub=10.0)
        mip.vars[y[s]].lb = 1.0
        mip.set_objective(tidx, tval)
        res = solve(mip, solver)
        assert res.status == "optimal"
        assert res.objective == pytest.approx(max(v[s] for v in vals), rel=1e-9)


@pytest.mark.parametrize("solver", SOLVERS)
def test_onehot_picks_exactly_one(solver):
    """Σ z = 1: minimising Σ c_i z_i picks the cheapest value; forbidding all is infeasible."""
    mip = MIP()
    z = lin.onehot(mip, "z", ["a", "b", "c"])
    mip.set_objective(z, [3.0, 1.0, 2.0])
    res = solve(mip, solver)
    assert res.status == "optimal" and res.x[z[1]] == pytest.approx(1.0)
    for i in z:
        mip.vars[i].ub = 0.0
    assert solve(mip, solver).status == "infeasible"


def test_groups_merge_equal_values():
    reps, gid = lin.groups(np.array([3.0, 1.0, 3.0, math.inf, 1.0]))
    assert list(reps[:2]) == [1.0, 3.0] and math.isinf(reps[2])
    assert list(gid) == [1, 0, 1, 2, 0]


def test_negative_factor_rejected():
    mip = MIP()
    y = lin.onehot(mip, "y", ["0"])
    with pytest.raises(ValueError, match="non-negative"):
        lin.product(mip, "p", np.array([-1.0]), y, np.array([1.0]), y, 1.0)


# --------------------------------------------------------------------------------------------------
# no-goods: exactly the excluded assignment is cut off
# --------------------------------------------------------------------------------------------------


def _feasible_with(mip: MIP, fixed: dict[int, float], solver: str) -> bool:
    """Fix variables by their bounds, solve the feasibility problem, restore the bounds."""
    saved = {i: (mip.vars[i].lb, mip.vars[i].ub) for i in fixed}
    for i, v in fixed.items():
        mip.vars[i].lb = mip.vars[i].ub = float(v)
    try:
        res = solve(mip, solver)
    finally:
        for i, (lo, hi) in saved.items():
            mip.vars[i].lb, mip.vars[i].ub = lo, hi
    assert res.status in ("optimal", "infeasible", "feasible"), res.status
    return res.status != "infeasible"


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("excluded", [(1, 0, 1), (0, 0, 0), (1, 1, 1)])
def test_nogood_over_binaries_truth_table(solver, excluded):
    mip = MIP()
    b = np.array([mip.add_binary(f"b{i}") for i in range(3)])
    mip.set_objective([], [])
    lin.nogood(mip, "cut", b, np.array(excluded, dtype=float))
    for values in itertools.product((0, 1), repeat=3):
        assert _feasible_with(mip, dict(zip(b.tolist(), values, strict=True)), solver) == (values != excluded), values


@pytest.mark.parametrize("solver", SOLVERS)
def test_nogood_over_one_hot_groups_truth_table(solver):
    """Two one-hot groups (a hardware choice of 4, a schedule choice of 3): excluding the pair
    (2, 1) leaves the other 11 pairs, and every one of them stays feasible."""
    mip = MIP()
    x = lin.onehot(mip, "x", ["0", "1", "2", "3"])
    y = lin.onehot(mip, "y", ["0", "1", "2"])
    mip.set_objective([], [])
    chosen = np.zeros(len(mip.vars))
    chosen[[x[2], y[1]]] = 1.0
    idx = np.concatenate([x, y])
    lin.nogood(mip, "cut", idx, chosen[idx], onehot=True)
    for i, j in itertools.product(range(4), range(3)):
        fixed = {int(v): float(v in (x[i], y[j])) for v in idx}
        assert _feasible_with(mip, fixed, solver) == ((i, j) != (2, 1)), (i, j)


def test_nogood_over_one_hot_needs_binaries():
    mip = MIP()
    n = mip.add_var("n", 0, 3, integer=True)
    with pytest.raises(ValueError, match="non-binary"):
        lin.nogood(mip, "cut", np.array([n]), np.array([1.0]), onehot=True)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("excluded", [(2, -1, 1), (0, 1, 0), (3, 0, 1)])
def test_nogood_over_general_integers_truth_table(solver, excluded):
    """n in 0..3, m in -1..1 and a binary b: the excluded assignment (at a bound or inside) is
    the only one of the 24 cut off; values within 1e-6 of an integer count as it."""
    mip = MIP()
    n = mip.add_var("n", 0, 3, integer=True)
    m = mip.add_var("m", -1, 1, integer=True)
    b = mip.add_binary("b")
    mip.set_objective([], [])
    noisy = np.array(excluded, dtype=float) + np.array([1e-7, -1e-7, 0.0])
    lin.nogood(mip, "cut", np.array([n, m, b]), noisy)
    for values in itertools.product(range(4), range(-1, 2), (0, 1)):
        fixed = {n: values[0], m: values[1], b: values[2]}
        assert _feasible_with(mip, fixed, solver) == (values != excluded), values


@pytest.mark.parametrize("solver", SOLVERS)
def test_successive_nogoods_walk_the_assignments_in_order(solver):
    """min 2n + 3b over n in 0..2, b binary, excluding each optimum in turn: 0, 2, 3, 4, 5, 7,
    then nothing is left."""
    mip = MIP()
    n = mip.add_var("n", 0, 2, integer=True)
    b = mip.add_binary("b")
    mip.set_objective([n, b], [2.0, 3.0])
    seen = []
    for k in range(7):
        res = solve(mip, solver)
        if res.status == "infeasible":
            break
        seen.append(round(res.objective))
        lin.nogood(mip, f"cut{k}", np.array([n, b]), res.x[[n, b]])
    assert seen == [0, 2, 3, 4, 5, 7]
