"""codesign.kinds.placement.brute: every per-expert placement under every TP-group partition
(the reference of tests/proof/test_driver_exact_assignment.py)."""

from __future__ import annotations

import math

import pytest

from codesign.kinds.placement.brute import brute_force_placement
from codesign.kinds.placement.spec import generate_placement, load_placement, placement_from_data
from codesign.kinds.registry import named_paths
from codesign.model.placement import PlacementDesign, evaluate_placement
from codesign.model.placement_build import build_problem


def test_the_points_are_placements_times_partitions():
    """tiny-placement-mixtral: 4 devices, 8 experts, TP 2: 4^8 placements x 3 ways to pair 4
    devices (4! / (2!^2 x 2!))."""
    pb = build_problem(load_placement(str(named_paths()["tiny-placement-mixtral"])))
    bf = brute_force_placement(pb)
    assert bf.points == 4**8 * (math.factorial(4) // (2**2 * 2))
    ev = evaluate_placement(pb, bf.design)
    assert ev.feasible and ev.objective == pytest.approx(bf.objective, rel=1e-12)


def test_tp_1_has_one_partition():
    pb = build_problem(placement_from_data(generate_placement(3, 4, [2, 1], workload="mixtral-8x7b", layers=1)))
    assert brute_force_placement(pb).points == 3**4


def test_a_uniform_profile_on_one_domain_is_balanced_at_best():
    """Uniform routing, one domain of 2 devices, 4 experts, TP 1: the best placement holds 2
    experts on each device (the busiest device's expert load sets the step)."""
    pb = build_problem(placement_from_data(generate_placement(2, 4, [2], workload="mixtral-8x7b", layers=1,
                                                              zipf_exponent=None)))
    bf = brute_force_placement(pb)
    assert sorted(bf.design.experts.count(d) for d in range(2)) == [2, 2]
    unbalanced = evaluate_placement(pb, PlacementDesign((0, 0, 0, 1), ((0,), (1,))))
    assert unbalanced.objective < bf.objective


def test_too_large_a_space_is_refused():
    """8 devices, 8 experts, TP 2: 8^8 placements x 105 pairings = 1.8e9 points (limit 5e7)."""
    pb = build_problem(placement_from_data(generate_placement(8, 8, [8], workload="mixtral-8x7b", layers=1, tp=2)))
    with pytest.raises(ValueError, match="too many"):
        brute_force_placement(pb)
