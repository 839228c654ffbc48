"""codesign.mip.program: the solver-neutral MIP — building, merged terms, interval bounds, the
checker, and checkpoint/restore (what the driver's added rows are undone with)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codesign.backends import solve
from codesign.mip import linearize as lin
from codesign.mip.program import MIP, merge_terms


def test_repeated_terms_are_summed_and_zeros_dropped():
    idx, val = merge_terms([3, 1, 3, 2, 2], [1.0, 2.0, 4.0, 1.0, -1.0])
    assert idx.tolist() == [1, 3] and val.tolist() == [2.0, 5.0]


def test_names_and_bounds_are_checked():
    mip = MIP()
    mip.add_var("x", 0, 1)
    with pytest.raises(ValueError, match="duplicate"):
        mip.add_var("x", 0, 1)
    with pytest.raises(ValueError, match="lb 2"):
        mip.add_var("y", 2, 1)
    c = mip.add_var("c", 0, 5)
    with pytest.raises(ValueError, match="not binary"):
        mip.add_indicator("ind", c, [c], [1.0], ub=1.0)
    assert mip.index("c") == c


def test_row_bounds_by_interval_arithmetic():
    """x in [-2, 5], y in [0, inf): 3x - y ranges over [-6 - inf, 15]; a zero coefficient on an
    infinite variable contributes nothing (0·inf = 0)."""
    mip = MIP()
    x = mip.add_var("x", -2, 5)
    y = mip.add_var("y", 0, math.inf)
    assert mip.row_bounds(np.array([x, y]), np.array([3.0, -1.0])) == (-math.inf, 15.0)
    assert mip.row_bounds(np.array([x, y]), np.array([3.0, 0.0])) == (-6.0, 15.0)


def test_check_names_what_a_point_violates():
    mip = MIP()
    x = mip.add_var("x", 0, 4, integer=True)
    b = mip.add_binary("b")
    mip.add_row("cap", [x], [1.0], ub=3.0)
    mip.add_indicator("on", b, [x], [1.0], lb=2.0)
    assert mip.check(np.array([2.0, 1.0])) == []
    assert mip.check(np.array([3.5, 0.0])) == ["integrality x", "cap"]
    assert mip.check(np.array([1.0, 1.0])) == ["on"]
    assert mip.check(np.array([5.0, 0.0])) == ["bound x", "cap"]


def test_objective_value_and_stats():
    mip = MIP()
    x = mip.add_var("x", 0, 4)
    b = mip.add_binary("b")
    mip.add_row("r", [x, b], [1.0, 1.0], ub=3.0)
    mip.add_indicator("i", b, [x], [1.0], ub=1.0)
    mip.set_objective([x, b], [2.0, -1.0], constant=0.5)
    assert mip.objective_value(np.array([1.5, 1.0])) == 2.5
    assert mip.stats() == {"variables": 2, "binaries": 1, "rows": 1, "indicators": 1, "nonzeros": 3}


def test_restore_removes_what_was_added_since_the_checkpoint():
    mip = MIP()
    z = lin.onehot(mip, "z", ["a", "b", "c"])
    mip.set_objective(z, [3.0, 1.0, 2.0])
    mark = mip.checkpoint()
    assert mark == (3, 1, 0)
    lin.nogood(mip, "cut", z, np.array([0.0, 1.0, 0.0]), onehot=True)
    n = mip.add_var("n", 0, 3, integer=True)
    lin.nogood(mip, "cut2", np.array([n]), np.array([1.0]))  # adds two indicator binaries
    assert mip.checkpoint() != mark
    mip.restore(mark)
    assert mip.checkpoint() == mark
    assert [v.name for v in mip.vars] == ["z[a]", "z[b]", "z[c]"]
    mip.add_var("n", 0, 3, integer=True)  # its name is free again
    res = solve(mip, "highs")
    assert res.objective == 1.0  # the cut that excluded b is gone


def test_a_checkpoint_restored_twice_is_the_same_model():
    mip = MIP()
    x = mip.add_binary("x")
    mip.set_objective([x], [1.0])
    mark = mip.checkpoint()
    for k in range(2):
        mip.add_row(f"force[{k}]", [x], [1.0], lb=1.0)
        assert solve(mip, "highs").objective == 1.0
        mip.restore(mark)
        assert solve(mip, "highs").objective == 0.0
