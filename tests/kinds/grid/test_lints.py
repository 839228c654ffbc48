"""codesign.kinds.grid.lints: assumptions of an instance that contradict its own hardware.

Photonic Fabric (arXiv 2507.14000 assumes 26,800 GB/s per GPU): one port carries 7.2 Tbps / 8 =
900 GB/s (2 ports: 1800 GB/s); 8 GPUs x 26,800 = 214,400 GB/s against a 115 Tbps / 8 = 14,375 GB/s
switch; one device alone draws more than the whole appliance switches.
"""

from __future__ import annotations

import copy

import pytest

from codesign.kinds.grid.lints import lint
from codesign.kinds.grid.spec import instance_from_data, list_instances, load_instance

PAPER = ["pf-llama405b-paper", "pf-dense1t-paper"]
CONSISTENT = ["pf-llama405b-consistent", "pf-dense1t-consistent"]


@pytest.mark.parametrize("name", PAPER)
def test_the_papers_pooled_bandwidth_is_flagged_with_the_numbers(name: str) -> None:
    lints = {x.code: x for x in lint(load_instance(name))}
    ports = lints["pooled-bandwidth-exceeds-ports"]
    assert ports.severity == "error"
    assert ports.numbers["assumed_GBps"] == 26_800
    assert ports.numbers["port_GBps"] == 900
    assert ports.numbers["ports"] == 2  # the largest pool_ports value
    assert ports.numbers["ports_carry_GBps"] == 1800
    assert "26,800" in ports.message and "1,800" in ports.message

    switch = lints["pooled-bandwidth-exceeds-switch"]
    assert switch.severity == "error"
    assert switch.numbers == {"devices": 8, "assumed_GBps": 26_800, "total_GBps": 214_400, "switch_GBps": 14_375}
    assert "214,400" in switch.message and "14,375" in switch.message

    appliance = lints["pooled-bandwidth-exceeds-appliance"]
    assert appliance.severity == "error" and "26,800" in appliance.message and "14,375" in appliance.message


@pytest.mark.parametrize("name", CONSISTENT)
def test_consistent_instances_have_no_lints(name: str) -> None:
    assert lint(load_instance(name)) == []


@pytest.mark.parametrize("name", [n for n in list_instances() if not n.endswith("-paper")])
def test_other_named_instances_have_no_error_lints(name: str) -> None:
    assert [x.code for x in lint(load_instance(name)) if x.severity == "error"] == []


def test_a_system_its_layouts_cannot_tile() -> None:
    """4 devices in scale-up domains of 3 leave a domain of 1; tp = 3 with pp in {1, 2} divides 4
    devices into no whole replica (3 and 6 do not divide 4), while tp = 1, 2 and 4 do."""
    raw = copy.deepcopy(load_instance("tiny-3d-llama8b").raw)
    raw["system"]["scale_up_domain"] = 3
    raw["workloads"][0]["decisions"]["tp"] = [1, 2, 3, 4]
    raw["workloads"][0]["decisions"]["pp"] = [1, 2]
    found = {x.code: x for x in lint(instance_from_data(raw))}
    assert found["scale-up-domain-does-not-tile-system"].numbers == {"scale_up_domain": 3, "devices": 4}
    assert "tp = 3 " in found["tp-never-fits-system"].message
    raw["system"]["scale_up_domain"] = 4
    raw["workloads"][0]["decisions"]["tp"] = [1, 2, 4]
    assert lint(instance_from_data(raw)) == []
