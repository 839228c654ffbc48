"""Every committed solution reproduces: same instance content, the model re-evaluates its design
to the recorded objective, and the ledger lists it; both solvers agreed when it was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codesign.kinds.grid.spec import list_instances
from codesign.proof.driver import check_solution

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
FILES = sorted(SOLUTIONS.glob("*.json"))


def test_every_named_instance_has_a_solution():
    assert {f.stem for f in FILES} >= set(list_instances())


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_stored_solution_reproduces(path):
    report = check_solution(path)
    assert report["ok"], report["message"]
    data = json.loads(path.read_text())
    assert data["status"] == "optimal"
    assert data["cross_check"]["agree"] is True
    ledger = (SOLUTIONS / "ledger.solu").read_text()
    assert f"=opt= {data['instance']} " in ledger
