"""codesign.backends (the dispatcher and what every backend promises): HiGHS and CP-SAT on tiny
hand-solved MIPs (models in tests/backends/models.py), time limits, Ctrl-C, and their agreement
on random MIPs. Every test that applies to a backend runs on each (skipped when one is missing).
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codesign.backends import (
    CAPABILITIES,
    LoweringError,
    activity_ranges,
    available_solvers,
    flatten_rows,
    solve,
)
from codesign.backends.result import Rounding
from codesign.errors import InputError
from codesign.mip.program import MIP

from .models import (
    AGREEMENT,
    CPSAT_DETERMINISTIC,
    NOISE,
    SAFETY_LIMIT_S,
    SHORT_LIMIT_S,
    SOLVERS,
    assert_sound,
    close,
    indicator_model,
    knapsack,
    market_split,
    si_model,
)


def test_unknown_solver_is_a_clear_input_error() -> None:
    with pytest.raises(InputError) as err:
        solve(knapsack(), "hihgs")
    assert "did you mean 'highs'" in str(err.value)


def test_capabilities_are_declared() -> None:
    assert CAPABILITIES["highs"].indicators == "big-M"
    assert CAPABILITIES["cpsat"].indicators == "native"
    assert CAPABILITIES["cpsat"].exact_integer_arithmetic
    assert set(available_solvers()) <= set(CAPABILITIES)


def test_activity_ranges_match_mip_row_bounds() -> None:
    """Vectorised interval arithmetic equals MIP.row_bounds row by row (infinite bounds too)."""
    mip = MIP()
    x = mip.add_var("x", -2.0, 5.0)
    y = mip.add_var("y", 0.0, math.inf)
    z = mip.add_binary("z")
    rows = [
        mip.add_row("a", [x, z], [3.0, -1.0], ub=1.0),
        mip.add_row("b", [x, y], [-1.0, 2.0], lb=0.0),
        mip.add_row("c", [y], [-4.0], ub=0.0),
        mip.add_row("empty", [], [], ub=0.0),
    ]
    block = flatten_rows(rows, len(mip.vars))
    lo, hi = activity_ranges(block, mip.lbs, mip.ubs)
    for r, row in enumerate(rows):
        assert (lo[r], hi[r]) == mip.row_bounds(row.idx, row.val)


@pytest.mark.parametrize("solver", SOLVERS)
def test_knapsack_known_optimum(solver: str) -> None:
    """max 4a + 2b + c + 2d + 10e  s.t.  12a + 2b + c + d + 4e <= 15.

    By hand: with a (12), 3 units remain: best b + d (2 + 2), value 8. Without a, b + c + d + e
    weigh 8 <= 15 and are worth 15. Optimum 15 = {b, c, d, e} (objective -15).
    """
    result = solve(knapsack(), solver)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(-15.0)
    assert result.bound == pytest.approx(-15.0)
    np.testing.assert_array_equal(result.x, [0, 1, 1, 1, 1])
    assert result.gap is not None and result.gap <= NOISE
    assert_sound(result)
    assert result.solver == solver and result.solver_version
    assert result.log_tail, "the solver log tail is kept"
    assert result.parameters["mip_rel_gap"] == 0.0
    assert result.parameters["mip_abs_gap"] == 0.0
    assert (result.rounding is None) == (solver == "highs")


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("side", ["ub", "lb", "range"])
@pytest.mark.parametrize("forced", [0, 1, None])
def test_indicator_truth_table(solver: str, side: str, forced: int | None) -> None:
    """Full truth table of one indicator row through a real solve (models in indicator_model)."""
    mip, expected = indicator_model(side, forced)
    result = solve(mip, solver)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(expected, abs=1e-7)
    assert not mip.check(result.x)
    if forced is not None:
        assert result.x[1] == forced
    assert_sound(result)


@pytest.mark.parametrize("solver", SOLVERS)
def test_infeasible_model(solver: str) -> None:
    """b1 + b2 >= 2 (so both are 1) and b1 = 1 => x <= 1 and b2 = 1 => x >= 2, x in [0, 5]."""
    mip = MIP("infeasible")
    x = mip.add_var("x", 0.0, 5.0)
    b1, b2 = mip.add_binary("b1"), mip.add_binary("b2")
    mip.add_row("both", [b1, b2], [1, 1], lb=2)
    mip.add_indicator("low", b1, [x], [1.0], ub=1.0)
    mip.add_indicator("high", b2, [x], [1.0], lb=2.0)
    mip.set_objective([x], [1.0])
    result = solve(mip, solver)
    assert result.status == "infeasible"
    assert result.x is None and result.objective is None


@pytest.mark.parametrize("solver", SOLVERS)
def test_time_limited_hard_model(solver: str) -> None:
    """market_split() for SHORT_LIMIT_S seconds: an incumbent with a valid bound, or a proof."""
    result = solve(market_split(), solver, time_limit=SHORT_LIMIT_S)
    assert result.status in ("feasible", "optimal")
    assert result.bound is not None
    assert_sound(result)
    if result.status == "feasible":
        assert "time limit" in result.termination.lower()
    assert result.parameters["mip_rel_gap"] == 0.0


@pytest.mark.parametrize("solver", SOLVERS)
def test_ctrl_c_returns_the_incumbent(solver: str) -> None:
    """Ctrl-C (SIGINT, sent once the first incumbent exists) stops the solve without raising.

    The handler raises KeyboardInterrupt only while the solve runs, as Python's default does,
    so a late signal cannot abort the test session.
    """
    state = {"solving": False, "sent": False, "late": False}

    def handler(signum: int, frame: object) -> None:
        if state["solving"]:
            raise KeyboardInterrupt
        state["late"] = True

    def progress(
        incumbent: float | None, bound: float | None, gap: float | None, elapsed: float
    ) -> None:
        if incumbent is not None and not state["sent"]:
            state["sent"] = True
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        state["solving"] = True
        result = solve(market_split(), solver, time_limit=SAFETY_LIMIT_S, progress=progress)
        state["solving"] = False
    finally:
        signal.signal(signal.SIGINT, previous)
    assert state["sent"] and not state["late"]
    assert result.status == "feasible"
    assert result.termination.startswith("interrupted")  # the interrupt, not the safety limit, stopped it
    assert_sound(result)


@pytest.mark.parametrize("solver", SOLVERS)
def test_infinite_bound_needed_by_big_m_raises(solver: str) -> None:
    """x in [0, inf), b = 1 => x <= 3: HiGHS needs M = inf - 3; CP-SAT needs finite bounds."""
    mip = MIP()
    x = mip.add_var("x", 0.0, math.inf)
    b = mip.add_binary("b")
    mip.add_indicator("cap", b, [x], [1.0], ub=3.0)
    mip.set_objective([x, b], [-1.0, -1.0])
    with pytest.raises(LoweringError, match="'x'"):
        solve(mip, solver)


@pytest.mark.parametrize("solver", SOLVERS)
def test_si_scaled_rows(solver: str) -> None:
    """si_model(): optimum 3.1e12 / 2.1e15 s; CP-SAT's bound stays valid after its rounding and
    its continuous values are exact after the polishing LP."""
    mip, optimum = si_model()
    result = solve(mip, solver)
    assert result.status == "optimal"
    assert_sound(result)
    assert result.bound <= optimum * (1 + 1e-12)
    np.testing.assert_array_equal(result.x[1:], [0, 1, 1, 0, 0])
    assert result.objective == pytest.approx(optimum, rel=1e-12)
    assert not mip.check(result.x)
    if solver == "cpsat":
        rounding = result.rounding
        assert isinstance(rounding, Rounding)
        timing = [r for r in rounding.rows if r.name.startswith("compute-time")]
        assert max(r.relaxation for r in timing) <= 1e-6 * optimum
        assert rounding.bound_widening <= 1e-6 * optimum
        assert "t" in rounding.variable_resolution
        assert any("5293" in note for note in rounding.notes)
        assert result.parameters["presolve_inclusion_work_limit"] == 0
        assert result.parameters["absolute_gap_limit"] == 0.0
        assert result.parameters["relative_gap_limit"] == 0.0
        assert result.parameters["rounding_gap_tolerance"] > 0
        on_grid = solve(mip, solver, polish_continuous=False)
        assert on_grid.status == "optimal"
        np.testing.assert_array_equal(on_grid.x[1:], result.x[1:])
        slack = max(r.relaxation for r in timing)
        assert on_grid.bound <= on_grid.objective <= optimum + slack


# --- the two backends agree ----------------------------------------------------------------------


@st.composite
def small_mips(draw: Callable) -> MIP:
    """Binaries and bounded continuous variables, integer data, plain and indicator rows.

    Shaped like the formulation: every row holds binaries and at most one continuous variable
    (an auxiliary bounded by indicator rows), and the objective may weigh all of them. Rows
    coupling several fine-grid continuous variables can make CP-SAT 9.15 propagate bounds for
    ever, ignoring its time limit (see run_interruptible); that is a solver limit, not the
    lowering, and the rounding itself is tested on arbitrary rows above.
    """
    mip = MIP("random")
    n_bin = draw(st.integers(1, 4))
    n_cont = draw(st.integers(0, 3))
    binaries = [mip.add_binary(f"b{i}") for i in range(n_bin)]
    conts = []
    for j in range(n_cont):
        lb = draw(st.integers(-5, 0))
        conts.append(mip.add_var(f"x{j}", lb, lb + draw(st.integers(0, 10))))
    coef = st.integers(-4, 4)

    def terms() -> tuple[list[int], list[int]]:
        idx = list(binaries)
        if conts and draw(st.booleans()):
            idx.append(draw(st.sampled_from(conts)))
        return idx, [draw(coef) for _ in idx]

    for r in range(draw(st.integers(1, 4))):
        idx, vals = terms()
        rhs = draw(st.integers(-5, 10))
        lb = -math.inf if draw(st.booleans()) else rhs - draw(st.integers(0, 10))
        mip.add_row(f"row{r}", idx, vals, lb=lb, ub=rhs)
    for k in range(draw(st.integers(0, 3 + n_cont))):
        idx, vals = terms()
        b = draw(st.sampled_from(binaries))
        rhs = draw(st.integers(-5, 10))
        if draw(st.booleans()):
            mip.add_indicator(f"ind{k}", b, idx, vals, ub=rhs)
        else:
            mip.add_indicator(f"ind{k}", b, idx, vals, lb=-rhs)
    all_vars = binaries + conts
    mip.set_objective(
        all_vars, [draw(st.integers(-5, 5)) for _ in all_vars], constant=draw(st.integers(-3, 3))
    )
    return mip


@pytest.mark.skipif(len(available_solvers()) < len(CAPABILITIES), reason="needs both solvers")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mip=small_mips())
def test_backends_agree_on_random_mips(mip: MIP) -> None:
    """HiGHS and CP-SAT: same status, same optimum (to AGREEMENT relative), each bound valid
    for the other's objective, and both solutions satisfy the MIP."""
    h = solve(mip, "highs")
    c = solve(mip, "cpsat", time_limit=SHORT_LIMIT_S * 5, **CPSAT_DETERMINISTIC)
    assert h.status == c.status, (h.summary(), c.summary())
    assert h.status in ("optimal", "infeasible")
    if h.status == "optimal":
        assert close(h.objective, c.objective), (h.summary(), c.summary())
        assert h.bound <= c.objective + AGREEMENT * max(1.0, abs(c.objective))
        assert c.bound <= h.objective + AGREEMENT * max(1.0, abs(h.objective))
        assert not mip.check(h.x)
        assert not mip.check(c.x)
        assert_sound(h)
        assert_sound(c)
