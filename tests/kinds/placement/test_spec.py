"""codesign.kinds.placement.spec: placement files validate; the generator is deterministic and
writes the domains, routing and sizes it is asked for."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from codesign.errors import InputError
from codesign.kinds.placement.spec import generate_placement, load_placement, placement_from_data
from codesign.kinds.registry import named_paths
from codesign.model.placement import space_size
from codesign.model.placement_build import build_problem
from codesign.model.routing import zipf_weights

TINY = str(named_paths()["tiny-placement-mixtral"])


def test_the_generator_is_deterministic_and_writes_its_arguments():
    d = generate_placement(4, 8, [2, 2], workload="mixtral-8x7b", tp=2, layers=2, zipf_exponent=0.8, levels=3, seed=3)
    assert d == generate_placement(4, 8, [2, 2], workload="mixtral-8x7b", tp=2, layers=2, zipf_exponent=0.8, levels=3, seed=3)
    assert d["kind"] == "placement" and len(d["routing"]["weights"]) == 8
    assert d["devices"] == {"chip": "h100-sxm", "count": 4, "tp": 2, "domains": [2, 2]}
    assert d["workload"]["batch"] == 4 * 32 and d["workload"]["layers"] == 2
    # the Zipf profile's levels, in a seeded order: the same multiset of weights
    assert sorted(d["routing"]["weights"]) == pytest.approx(sorted(zipf_weights(8, 0.8, 3)))
    placement_from_data(d)


def test_domains_from_a_count_equal_or_fragmented():
    assert generate_placement(10, 4, 3, workload="mixtral-8x7b")["devices"]["domains"] == [4, 3, 3]
    frag = generate_placement(32, None, 8, fragmented=True, seed=1)
    assert sum(frag["devices"]["domains"]) == 32 and len(frag["devices"]["domains"]) == 8
    assert all(x >= 1 for x in frag["devices"]["domains"])
    assert space_size(build_problem(placement_from_data(frag))) > 10**15


def test_uniform_routing_without_a_zipf_exponent():
    d = generate_placement(2, 4, workload="mixtral-8x7b", zipf_exponent=None)
    assert d["routing"]["profile"] == "uniform"


def test_a_bad_placement_file_names_the_key():
    raw = copy.deepcopy(load_placement(TINY).spec.model_dump(mode="json", exclude_none=True))
    bad = copy.deepcopy(raw)
    bad["devices"]["domains"] = [3, 3]  # sums to 6, not the 4 devices
    with pytest.raises(InputError) as info:
        placement_from_data(bad)
    assert "domains" in (info.value.key or "") + str(info.value)
    bad = copy.deepcopy(raw)
    bad["devices"]["tp"] = 3  # does not divide 4 devices
    with pytest.raises(InputError, match=r"devices\.tp = 3 must divide devices\.count = 4"):
        placement_from_data(bad)
    bad = copy.deepcopy(raw)
    bad["devices"]["chip"] = "h100-sxn"
    with pytest.raises(InputError, match="h100-sxm"):
        placement_from_data(bad)


def test_a_dense_model_is_refused():
    with pytest.raises((InputError, ValueError)):
        placement_from_data(generate_placement(2, 4, workload="llama-3.1-8b", zipf_exponent=None))


def test_the_tiny_instance_loads():
    inst = load_placement(TINY)
    assert inst.spec.devices.count == 4 and inst.spec.devices.tp == 2
    assert build_problem(inst).experts == 8


@pytest.mark.parametrize("name", ["../escaped", "/tmp/abs", "a\\b", ".hidden", "x" * 300])
def test_an_instance_name_that_is_not_a_file_name_is_refused(name):
    bad = {**generate_placement(4, 8, [2, 2], workload="mixtral-8x7b", tp=2, layers=2), "name": name}
    with pytest.raises(InputError, match="not a name") as info:
        placement_from_data(bad, source="x.toml")
    assert info.value.key == "name"


@pytest.mark.parametrize(("key", "value"), [("weights", [4.0, math.nan, 1, 1, 1, 1, 1, 1]),
                                            ("weights", [math.inf] * 8), ("zipf_exponent", math.inf)])
def test_non_finite_routing_is_refused(key, value):
    # generate once wrote NaN weights that it then could not read back
    data = generate_placement(4, 8, [2, 2], workload="mixtral-8x7b", tp=2, layers=2)
    data["routing"][key] = value
    with pytest.raises(InputError, match="finite number") as info:
        placement_from_data(data, source="x.toml")
    assert (info.value.key or "").startswith(f"routing.{key}")


def test_a_generated_name_is_a_name_when_the_workload_is_a_path(tmp_path):
    path = tmp_path / "my model.toml"
    path.write_text((Path(__file__).parents[3] / "instances" / "catalog" / "workloads" / "mixtral-8x7b.toml").read_text())
    data = generate_placement(4, 8, [2, 2], workload=str(path), tp=2, layers=2)
    assert data["name"] == "gen-my-model-4d-8e-s0"
    placement_from_data(data)


@pytest.mark.parametrize(("part", "key", "value"), [
    ("routing", "weights", [1e308] * 8),  # their sum overflowed: NaN loads, "cannot convert float NaN to integer"
    ("routing", "zipf_exponent", 1e300),  # every weight underflowed to 0
    ("devices", "memory_capacity_GiB", 1e300),  # "cannot convert float infinity to integer" building the MIP
])
def test_a_number_out_of_its_physical_range_is_refused(part, key, value):
    data = generate_placement(4, 8, [2, 2], workload="mixtral-8x7b", tp=2, layers=2)
    if key == "zipf_exponent":
        data["routing"] = {"profile": "zipf", "zipf_exponent": value}
    else:
        data[part][key] = value
    with pytest.raises(InputError) as info:
        placement_from_data(data, source="x.toml")
    assert (info.value.key or "").startswith(f"{part}.{key}")
