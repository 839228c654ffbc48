"""codesign.kinds.mapping.spec: mapping instance files validate, with the key and a
did-you-mean; the named ones load."""

from __future__ import annotations

import math

import pytest

from codesign.errors import InputError
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.mapping.problem import Mapping
from codesign.kinds.mapping.spec import load_mapping, mapping_from_data
from codesign.kinds.registry import named_paths
from codesign.model.calibration import shipped
from codesign.schema import load_toml


def test_a_batch_that_the_stages_do_not_divide():
    data = generate_mapping(devices=3, modules=2, layers=4)
    data["workload"]["batch"] = 10  # not a multiple of 3 stages
    with pytest.raises(InputError, match="multiple"):
        mapping_from_data(data, source="x.toml")


def test_a_misspelt_chip_gets_a_did_you_mean():
    data = generate_mapping(devices=2, modules=2, layers=4)
    data["devices"][0]["chip"] = "h100-sxn"
    with pytest.raises(InputError, match="h100-sxm"):
        mapping_from_data(data)


def test_a_model_without_identical_decoder_layers_is_refused():
    data = generate_mapping(devices=2, modules=2, layers=4, workload="deepseek-v3")
    with pytest.raises(InputError, match="identical decoder layers"):
        mapping_from_data(data)


def test_an_unknown_key_is_named():
    data = generate_mapping(devices=2, modules=2, layers=4)
    data["workload"]["batchh"] = 8
    with pytest.raises(InputError) as info:
        mapping_from_data(data)
    assert "batchh" in (info.value.key or "")


MAPPING_NAMED = sorted(n for n, p in named_paths().items() if load_toml(p).get("kind") == "mapping")


def test_the_named_mapping_instances_load_and_two_exceed_1e15():
    assert "tiny-pf-mapping" in MAPPING_NAMED
    big = [n for n in MAPPING_NAMED if Mapping.load(named_paths()[n]).space_size() > 10**15]
    assert len(big) >= 2
    assert math.comb(125, 15) > 10**15  # 126 layers into 16 stages alone


def test_an_instance_carries_its_calibration():
    inst = load_mapping(str(named_paths()["tiny-pf-mapping"]))
    assert inst.calibration.sha256 == shipped().sha256


@pytest.mark.parametrize("name", ["../escaped", "/tmp/abs", "a/b", "..", ""])
def test_an_instance_name_that_is_a_path_is_refused(name):
    # solve --save writes <name>.json into --out-dir; export writes <name>.mps
    data = generate_mapping(devices=2, modules=2, layers=4)
    data["name"] = name
    with pytest.raises(InputError, match="not a name") as info:
        mapping_from_data(data, source="x.toml")
    assert info.value.key == "name"


@pytest.mark.parametrize(("where", "value"), [(("devices", 0, "host_capacity_GiB"), math.nan),
                                             (("devices", 0, "memory_bandwidth_GBps"), math.inf),
                                             (("appliance", "assumed_device_bandwidth_GBps"), -math.inf)])
def test_a_non_finite_number_is_refused(where, value):
    data = generate_mapping(devices=2, modules=2, layers=4)
    node = data
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    with pytest.raises(InputError, match="finite number") as info:
        mapping_from_data(data, source="x.toml")
    assert info.value.key == ".".join(str(p) for p in where).replace(".0.", "[0].")


@pytest.mark.parametrize(("key", "value"), [("memory_bandwidth_GBps", 5e-324), ("memory_bandwidth_GBps", 1e300),
                                            ("memory_capacity_GiB", 1e300), ("host_capacity_GiB", 1e300)])
def test_a_device_memory_out_of_its_physical_range_is_refused(key, value):
    # a subnormal bandwidth made an infinite time: the record refused it with a pydantic traceback
    data = generate_mapping(devices=2, modules=2, layers=4)
    data["devices"][0][key] = value
    with pytest.raises(InputError) as info:
        mapping_from_data(data, source="x.toml")
    assert info.value.key == f"devices[0].{key}"
