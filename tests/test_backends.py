"""Tests of codesign.backends: HiGHS and CP-SAT on tiny hand-solved MIPs, and their agreement.

Every model is written in its test's docstring; expected optima are worked out by hand there.
Both backends run every test that applies to them (parametrised by name, skipped when the
solver package is missing).
"""

from __future__ import annotations

import json
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
    SolveResult,
    activity_ranges,
    available_solvers,
    flatten_rows,
    relative_gap,
    solve,
)
from codesign.backends.result import Rounding
from codesign.errors import InputError
from codesign.mip.program import MIP

SOLVERS = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(name not in available_solvers(), reason=f"{name} not installed"),
    )
    for name in CAPABILITIES
]
#: relative agreement required between the two backends (objectives of the same optimum)
AGREEMENT = 1e-6
#: float noise allowed when comparing a bound with an objective
NOISE = 1e-9
#: seconds for time-limited solves of the hard model
SHORT_LIMIT_S = 1.0
#: safety limit for solves that a test interrupts
SAFETY_LIMIT_S = 30.0
#: a reproducible CP-SAT set-up: one worker, fixed seed, and binary search on the objective
#: (one worker alone can improve a fine-grid objective one unit at a time, for ever)
CPSAT_DETERMINISTIC = {
    "threads": 1,
    "random_seed": 0,
    "options": {"binary_search_num_conflicts": 100},
}


def close(a: float, b: float, rel: float = AGREEMENT) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def assert_sound(result: SolveResult) -> None:
    """Bound <= objective, gap consistent, x present exactly when a solution is claimed."""
    if result.status in ("optimal", "feasible"):
        assert result.x is not None and result.objective is not None
        if result.bound is not None:
            assert result.bound <= result.objective + NOISE * max(1.0, abs(result.objective))
            assert result.gap == relative_gap(result.objective, result.bound)
    else:
        assert result.x is None


# --- tiny models -------------------------------------------------------------------------------


def knapsack() -> MIP:
    """max 4a + 2b + c + 2d + 10e  s.t.  12a + 2b + c + d + 4e <= 15, binaries (as a minimisation)."""
    mip = MIP("knapsack")
    items = [mip.add_binary(f"take[{i}]") for i in range(5)]
    mip.add_row("capacity", items, [12, 2, 1, 1, 4], ub=15)
    mip.set_objective(items, [-4, -2, -1, -2, -10])
    return mip


def market_split() -> MIP:
    """A hard 4 x 30 market-split instance (Cornuéjols-Dawande style).

    min Σ_i (p_i + m_i)  s.t.  Σ_j a_ij·x_j + p_i - m_i = d_i,  x binary,  p, m in [0, 3000].
    """
    a = [
        [
            47,
            51,
            75,
            95,
            3,
            14,
            82,
            94,
            24,
            31,
            86,
            42,
            27,
            82,
            25,
            40,
            64,
            54,
            8,
            2,
            86,
            75,
            83,
            53,
            81,
            32,
            45,
            78,
            12,
            30,
        ],
        [
            12,
            45,
            97,
            13,
            38,
            40,
            90,
            20,
            50,
            26,
            1,
            75,
            6,
            28,
            49,
            48,
            11,
            98,
            74,
            96,
            9,
            72,
            29,
            54,
            92,
            27,
            72,
            16,
            32,
            96,
        ],
        [
            42,
            51,
            29,
            11,
            42,
            62,
            45,
            77,
            36,
            61,
            77,
            91,
            42,
            3,
            71,
            52,
            87,
            45,
            36,
            6,
            45,
            64,
            77,
            85,
            21,
            59,
            80,
            26,
            34,
            83,
        ],
        [
            58,
            50,
            67,
            51,
            98,
            75,
            5,
            14,
            54,
            81,
            6,
            68,
            75,
            78,
            87,
            19,
            55,
            80,
            35,
            19,
            47,
            8,
            21,
            85,
            66,
            86,
            84,
            87,
            31,
            47,
        ],
    ]
    d = [760, 708, 770, 818]
    slack_ub = 3000.0
    mip = MIP("market-split")
    x = [mip.add_binary(f"x[{j}]") for j in range(len(a[0]))]
    slack = []
    for i, (row, rhs) in enumerate(zip(a, d, strict=True)):
        p = mip.add_var(f"p[{i}]", 0.0, slack_ub, integer=True)
        m = mip.add_var(f"m[{i}]", 0.0, slack_ub, integer=True)
        mip.add_row(f"split[{i}]", [*x, p, m], [*row, 1, -1], lb=rhs, ub=rhs)
        slack += [p, m]
    mip.set_objective(slack, np.ones(len(slack)))
    return mip


# --- result vocabulary ---------------------------------------------------------------------------


def test_relative_gap_edge_cases() -> None:
    """gap = (objective - bound) / |objective|; 0 when closed; inf at objective 0 with a gap."""
    assert relative_gap(10.0, 9.0) == pytest.approx(0.1)
    assert relative_gap(-10.0, -11.0) == pytest.approx(0.1)
    assert relative_gap(0.0, 0.0) == 0.0
    assert relative_gap(0.0, -1.0) == math.inf
    assert relative_gap(5.0, 6.0) == 0.0
    assert relative_gap(None, 1.0) is None
    assert relative_gap(1.0, None) is None


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


# --- known optima --------------------------------------------------------------------------------


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


def indicator_model(side: str, forced: int | None) -> tuple[MIP, float]:
    """x in [0, 10], b binary (optionally fixed to ``forced`` by its bounds); returns (MIP, optimum).

    side "ub":    b = 1 => x <= 3;       min -x - 4b.  b=0: x=10 -> -10;  b=1: x=3 -> -7.
    side "lb":    b = 1 => x >= 6;       min  x - 8b.  b=0: x=0 ->   0;  b=1: x=6 -> -2.
    side "range": b = 1 => 2 <= x <= 4;  min -x - 7b.  b=0: x=10 -> -10; b=1: x=4 -> -11.
    Free b takes the better of the two.
    """
    table = {
        "ub": (-math.inf, 3.0, [-1.0, -4.0], {0: -10.0, 1: -7.0}),
        "lb": (6.0, math.inf, [1.0, -8.0], {0: 0.0, 1: -2.0}),
        "range": (2.0, 4.0, [-1.0, -7.0], {0: -10.0, 1: -11.0}),
    }
    lb, ub, cost, optimum = table[side]
    mip = MIP(f"indicator-{side}")
    x = mip.add_var("x", 0.0, 10.0)
    b = mip.add_var(
        "b", 0.0 if forced is None else forced, 1.0 if forced is None else forced, integer=True
    )
    mip.add_indicator("b-implies-row", b, [x], [1.0], lb=lb, ub=ub)
    mip.set_objective([x, b], cost)
    expected = min(optimum.values()) if forced is None else optimum[forced]
    return mip, expected


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
    assert result.termination.startswith("interrupted")
    assert result.wall_time_s < SAFETY_LIMIT_S / 2
    assert_sound(result)


# --- big-M from bounds (HiGHS) and integer scaling (CP-SAT) --------------------------------------


def test_big_m_comes_from_bounds() -> None:
    """x in [0, 10], b = 1 => x <= 3 lowers to x + (10 - 3)·b <= 10 (times a power of two)."""
    from codesign.backends.highs import lower

    mip = MIP()
    x = mip.add_var("x", 0.0, 10.0)
    b = mip.add_binary("b")
    mip.add_indicator("cap", b, [x], [1.0], ub=3.0)
    model = lower(mip)
    assert model.row_names == ["cap.ub"]
    scale = model.row_scale[0]
    np.testing.assert_array_equal(model.index, [x, b])
    np.testing.assert_allclose(model.value / scale, [1.0, 7.0])
    assert model.row_upper[0] / scale == 10.0 and model.row_lower[0] == -math.inf
    assert model.big_m_max == 7.0


def test_big_m_not_needed_is_skipped() -> None:
    """x in [0, 2], b = 1 => x <= 3 always holds: no row at all."""
    from codesign.backends.highs import lower

    mip = MIP()
    x = mip.add_var("x", 0.0, 2.0)
    b = mip.add_binary("b")
    mip.add_indicator("slack", b, [x], [1.0], ub=3.0)
    assert lower(mip).num_row == 0


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


def test_big_m_only_for_the_needed_side() -> None:
    """x in [0, inf), b = 1 => x >= 3: only the lower side needs an M (0 - 3), which is finite."""
    from codesign.backends.highs import lower

    mip = MIP()
    x = mip.add_var("x", 0.0, math.inf)
    b = mip.add_binary("b")
    mip.add_indicator("floor", b, [x], [1.0], lb=3.0)
    model = lower(mip)
    assert model.row_names == ["floor.lb"]
    np.testing.assert_allclose(model.value / model.row_scale[0], [1.0, -3.0])


def si_model() -> tuple[MIP, float]:
    """Compute time in SI units, the kind of row the formulation builds.

    t in [0, 1e-2] s;  one-hot chip z_i (F = 1.3e15, 2.1e15 FLOP/s);  one-hot batch y_j
    (W = 3.1e12, 5.3e12, 2.7e12 FLOP; B = 8e10, 4e10, 9e10 bytes);  Σ_j B_j·y_j <= 8.5e10 B
    (rules out y_3);  z_i = 1 => t - Σ_j (W_j / F_i)·y_j >= 0;  min t.
    By hand: the fastest allowed pair is W_1 / F_2 = 3.1e12 / 2.1e15 s.
    """
    flops = [1.3e15, 2.1e15]
    work = [3.1e12, 5.3e12, 2.7e12]
    size = [8e10, 4e10, 9e10]
    mip = MIP("si")
    t = mip.add_var("t", 0.0, 1e-2)
    z = [mip.add_binary(f"z[{i}]") for i in range(len(flops))]
    y = [mip.add_binary(f"y[{j}]") for j in range(len(work))]
    mip.add_row("one-chip", z, np.ones(len(z)), lb=1, ub=1)
    mip.add_row("one-batch", y, np.ones(len(y)), lb=1, ub=1)
    mip.add_row("memory-capacity-upper", y, size, ub=8.5e10)
    for i, f in enumerate(flops):
        mip.add_indicator(
            f"compute-time[{i}]", z[i], [t, *y], [1.0, *(-w / f for w in work)], lb=0.0
        )
    mip.set_objective([t], [1.0])
    return mip, 3.1e12 / 2.1e15


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


def test_cpsat_coarse_resolution_is_reported_honestly() -> None:
    """x in [0, 1] at resolution 0.25,  3x <= 1,  min -x.  Optimum -1/3 lies between grid
    points: the integer model (rows relaxed by the snapping distance) reaches x = 0.5, so its
    bound -0.5 is valid but 50 % below; the polished design gives -1/3. Not "optimal"."""
    mip = MIP("coarse")
    x = mip.add_var("x", 0.0, 1.0, resolution=0.25)
    mip.add_row("cap", [x], [3.0], ub=1.0)
    mip.set_objective([x], [-1.0])
    result = solve(mip, "cpsat")
    assert result.status == "feasible"
    assert result.objective == pytest.approx(-1 / 3)
    assert result.bound <= -1 / 3
    assert result.gap > result.parameters["rounding_gap_tolerance"]
    assert result.rounding.variable_resolution == {"x": 0.25}


def test_result_is_json_ready() -> None:
    result = solve(knapsack(), "highs")
    text = json.dumps(result.to_dict())
    assert '"status": "optimal"' in text


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    terms=st.integers(1, 6),
)
def test_cpsat_rounding_keeps_feasible_points(data: st.DataObject, terms: int) -> None:
    """For any real row L <= Σ c_j·x_j <= U satisfied by an integer point x, the scaled integer
    row lb_int <= Σ k_j·x_j <= ub_int holds at x too (sides rounded outward)."""
    from codesign.backends.cpsat import build_grid, scale_rows

    mip = MIP()
    top = 1000
    xs = [mip.add_var(f"x{j}", -top, top, integer=True) for j in range(terms)]
    magnitude = st.floats(-15, 12)
    coefs = [data.draw(st.sampled_from([-1, 1])) * 10 ** data.draw(magnitude) for _ in xs]
    point = np.array([data.draw(st.integers(-top, top)) for _ in xs], dtype=float)
    activity = float(np.dot(coefs, point))
    row = mip.add_row("r", xs, coefs, lb=activity, ub=activity)
    block = flatten_rows([row], len(mip.vars))
    scaled = scale_rows(block, build_grid(mip))
    value = int(np.dot(scaled.k, point.astype(np.int64)))
    assert scaled.lb_int[0] <= value <= scaled.ub_int[0]
    assert np.abs(scaled.k).max() <= 1e9


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
