"""codesign.backends.cpsat: CP-SAT on its integer lowering; a resolution too coarse for the
optimum is reported as such, never as optimal."""

from __future__ import annotations

import pytest

from codesign.backends import solve
from codesign.mip.program import MIP


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

