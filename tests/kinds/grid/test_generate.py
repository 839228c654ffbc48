"""codesign.kinds.grid.generate: benchmark instances of growing size that validate."""

from __future__ import annotations

import math

import pytest

from codesign.kinds.grid.generate import HW_LEVELS, generate, scaled_instance
from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.space import space_size


def test_generated_instances_grow_and_validate():
    sizes = [space_size(generate(w, 1)) for w in (1, 2, 3)]
    assert sizes[0] == math.prod(len(v) for v in HW_LEVELS[1].values()) * 5 * 4 * 7
    assert sizes[0] < sizes[1] < sizes[2]
    assert space_size(generate(8, 1)) > 1e20


def test_scaled_instance_takes_an_objective_and_refuses_no_workload():
    raw = scaled_instance(2, 0, objective="energy_per_token_J")
    assert raw["objective"]["metric"] == "energy_per_token_J" and len(raw["workloads"]) == 2
    p = Grid.from_data(raw, source="generated")
    assert p.metric == "energy_per_token_J" and p.sense == "min"
    assert p.space_size() == space_size(p.inst)
    with pytest.raises(ValueError):
        scaled_instance(0)


def test_the_grid_kind_generates_through_its_problem_class():
    assert Grid.generator is not None
    data = Grid.generator()
    assert Grid.from_data(data, source="generated").kind == "grid"


def test_workloads_are_bounded(cli, tmp_path):
    """generate grid --set workloads=99999999 ran past any time-out (found by tools/fuzz_cli.py)."""
    from codesign.kinds.grid.generate import MAX_WORKLOADS

    assert len(scaled_instance(MAX_WORKLOADS, 0)["workloads"]) == MAX_WORKLOADS
    with pytest.raises(ValueError, match=f"1 to {MAX_WORKLOADS}"):
        scaled_instance(MAX_WORKLOADS + 1, 0)
    r = cli("generate", "grid", "-o", tmp_path / "g.toml", "--set", "workloads=99999999")
    assert r.exit_code == 2 and f"1 to {MAX_WORKLOADS}" in r.stderr and not (tmp_path / "g.toml").exists()
