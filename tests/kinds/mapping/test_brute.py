"""codesign.kinds.mapping.brute: every design of a tiny mapping enumerated with the model (the
reference the MIP is tested against in tests/proof/test_driver_exact_assignment.py)."""

from __future__ import annotations

import pytest

from codesign.kinds.mapping.brute import brute_force_mapping, compositions
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.spec import mapping_from_data
from codesign.model.mapping import evaluate_mapping, space_size
from codesign.model.mapping_build import build_problem

#: one module for three devices, at most two of them attached
SHARED = dict(devices=3, modules=1, layers=5, ports=1, batch_per_stage=32, weights=("local", "pool"), kv=("local", "pool"),
              max_devices_per_module=2)
#: a tpot budget that removes designs
BUDGETED = dict(devices=3, modules=2, layers=4, ports=1, weights=("local", "pool"), kv=("local",), tpot_s=0.0112)


def problem(**kw):
    return build_problem(mapping_from_data(generate_mapping(**kw)))


def test_compositions_by_hand():
    assert list(compositions(4, 2)) == [(1, 3), (2, 2), (3, 1)]
    assert list(compositions(3, 3)) == [(1, 1, 1)]
    assert len(list(compositions(6, 3))) == 10  # C(5, 2)


def test_brute_force_covers_the_space_and_its_best_is_the_models():
    p = problem(devices=2, modules=2, layers=3, ports=1, weights=("local", "pool"), kv=("local",))
    bf = brute_force_mapping(p)
    assert bf.points == space_size(p)
    ev = evaluate_mapping(p, bf.design)
    assert ev.feasible and ev.objective == pytest.approx(bf.objective, rel=1e-12)
    assert 0 < bf.feasible_points <= bf.points


def test_the_sharing_limit_binds():
    limited = brute_force_mapping(problem(**SHARED))
    free = brute_force_mapping(problem(**{k: v for k, v in SHARED.items() if k != "max_devices_per_module"}))
    assert limited.feasible_points < free.feasible_points
    assert sum(bool(a) for a in free.design.attach) == 3  # unlimited: every device uses the pool
    assert sum(bool(a) for a in limited.design.attach) <= 2
    assert limited.objective < free.objective


def test_a_tpot_budget_removes_designs():
    with_budget = brute_force_mapping(problem(**BUDGETED))
    without = brute_force_mapping(problem(**{k: v for k, v in BUDGETED.items() if k != "tpot_s"}))
    assert 0 < with_budget.feasible_points < without.feasible_points


def test_no_feasible_design_is_none():
    p = problem(devices=2, modules=0, layers=60, batch_per_stage=1, context_tokens=16, weights=("local",), kv=("local",))
    bf = brute_force_mapping(p)
    assert bf.objective is None and bf.design is None and bf.feasible_points == 0
