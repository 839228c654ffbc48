"""codesign.backends.result: the result vocabulary — the relative gap and JSON-ready results."""

from __future__ import annotations

import json
import math

import pytest

from codesign.backends import relative_gap, solve

from .models import knapsack


def test_relative_gap_edge_cases() -> None:
    """gap = (objective - bound) / |objective|; 0 when closed; inf at objective 0 with a gap."""
    assert relative_gap(10.0, 9.0) == pytest.approx(0.1)
    assert relative_gap(-10.0, -11.0) == pytest.approx(0.1)
    assert relative_gap(0.0, 0.0) == 0.0
    assert relative_gap(0.0, -1.0) == math.inf
    assert relative_gap(5.0, 6.0) == 0.0
    assert relative_gap(None, 1.0) is None
    assert relative_gap(1.0, None) is None


def test_result_is_json_ready() -> None:
    result = solve(knapsack(), "highs")
    text = json.dumps(result.to_dict())
    assert '"status": "optimal"' in text

