"""codesign.backends.cpsat_scaling: real rows scaled onto integer rows, sides rounded outward,
so that every integer point that satisfies a real row satisfies its scaled row."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.backends import flatten_rows
from codesign.mip.program import MIP


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    terms=st.integers(1, 6),
)
def test_cpsat_rounding_keeps_feasible_points(data: st.DataObject, terms: int) -> None:
    """For any real row L <= Σ c_j·x_j <= U satisfied by an integer point x, the scaled integer
    row lb_int <= Σ k_j·x_j <= ub_int holds at x too (sides rounded outward)."""
    from codesign.backends.cpsat_scaling import build_grid, scale_rows

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

