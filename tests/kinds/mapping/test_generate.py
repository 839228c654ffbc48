"""codesign.kinds.mapping.generate: scaled mapping instances that validate."""

from __future__ import annotations

import pytest

from codesign.errors import InputError
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.problem import Mapping
from codesign.kinds.mapping.spec import mapping_from_data


def test_a_generated_instance_has_what_was_asked():
    data = generate_mapping(devices=3, modules=2, layers=6, chips=("h200-sxm", "h100-sxm"), ports=2, host_GiB=16.0,
                            weights=("local", "host", "pool"))
    inst = mapping_from_data(data)
    assert data["kind"] == "mapping"
    assert [g.chip for g in inst.spec.devices] == ["h200-sxm", "h100-sxm"]
    assert sum(g.count for g in inst.spec.devices) == 3 and inst.spec.workload.layers == 6
    assert {g.pool_ports for g in inst.spec.devices} == {2}
    assert inst.spec.appliance.modules == 2
    assert {g.host_capacity_GiB for g in inst.spec.devices} == {16.0}


def test_the_paper_assumption_and_a_budget_are_written():
    data = generate_mapping(devices=2, modules=2, layers=3, assumed_device_bandwidth_GBps=26_800, tpot_s=0.01,
                            objective="energy_per_token_J")
    assert data["appliance"]["assumed_device_bandwidth_GBps"] == 26_800
    assert data["budgets"]["tpot_s"] == 0.01 and data["objective"]["metric"] == "energy_per_token_J"
    Mapping.from_data(data, source="generated")


def test_more_devices_than_layers_is_refused():
    with pytest.raises(InputError, match="pipeline stages but the model has only 3 layers"):
        mapping_from_data(generate_mapping(devices=4, modules=0, layers=3))


def test_the_mapping_kind_generates_through_its_problem_class():
    assert Mapping.generator is generate_mapping or Mapping.generator.__name__ == "generate_mapping"
