"""Tiny MIPs with optima worked out by hand, shared by the backend tests (each model's
docstring states it and its optimum)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codesign.backends import CAPABILITIES, SolveResult, available_solvers, relative_gap
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

