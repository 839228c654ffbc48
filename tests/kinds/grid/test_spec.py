"""codesign.kinds.grid.spec: hardware/schedule instance files load, merge (``extends``) and
validate; their baselines are feasible; malformed files fail with the file, the key, the value
and what was expected. Designs (parse_design) are tests/kinds/grid/test_design.py."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from codesign.errors import InputError
from codesign.kinds.grid.spec import (
    instance_from_data,
    list_instances,
    load_instance,
    with_budgets,
)
from codesign.model.evaluate import evaluate

NAMED = list_instances()


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# --------------------------------------------------------------------------------------------------
# Named instances
# --------------------------------------------------------------------------------------------------


def test_the_named_grid_instances() -> None:
    assert {"tiny-3d-llama8b", "small-3d-llama8b", "deepstack-multi-workload", "dgx-llama70b-chip-choice",
            "pf-llama405b-paper", "pf-llama405b-consistent", "pf-dense1t-paper", "pf-dense1t-consistent"} <= set(NAMED)


@pytest.mark.parametrize("name", NAMED)
def test_named_instance_loads_and_its_baseline_is_feasible(name: str) -> None:
    inst = load_instance(name)
    assert inst.name == name
    assert inst.spec.description
    base = inst.baseline()
    assert set(base) == {d.name for d in inst.decisions}
    for d in inst.decisions:
        assert base[d.name] in d.domain, d.name
    # the file's own [baseline] names only decisions, with values in their domains
    for key, value in _flat(inst.spec.baseline).items():
        assert key in inst.decision_index, key
        assert value in inst.decision_index[key].domain, key
    ev = evaluate(inst, base)
    assert ev.feasible, [(a.name, a.value, a.limit) for a in ev.audit if not a.ok] + ev.structural
    assert math.isfinite(ev.objective) and ev.objective > 0


# --------------------------------------------------------------------------------------------------
# Malformed instance files
# --------------------------------------------------------------------------------------------------

BASE = """\
name = "probe"
description = "a small valid instance that the tests break one key at a time"

[system]
devices = 4
scale_up_domain = 4

[hardware]
family = "stacked-3d"

[hardware.decisions]
dram_layers = [2, 4]
tsv_count = [8192]
tsv_pitch_um = [20.0]
compute_area_mm2 = [40.0]
clock_GHz = [1.2]
sram_MiB = [0.5]

[[workloads]]
workload = "llama-3.1-8b"
input_tokens = 128
output_tokens = 32

[workloads.decisions]
tp = [1, 2]
batch = [8]

[baseline]
dram_layers = 4
tp = 2
"""


def write(tmp_path: Path, text: str, name: str = "probe.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def broken(tmp_path: Path, old: str, new: str) -> Path:
    assert old in BASE
    return write(tmp_path, BASE.replace(old, new, 1))


def load_error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_instance(str(path))
    assert info.value.file == str(path)
    return info.value


def test_the_probe_instance_is_valid(tmp_path: Path) -> None:
    inst = load_instance(str(write(tmp_path, BASE)))
    assert [len(d.domain) for d in inst.decisions if len(d.domain) > 1] == [2, 2]  # dram_layers, tp
    assert inst.baseline()["tp"] == 2
    assert evaluate(inst, inst.baseline()).feasible


def test_a_topology_the_model_does_not_price_is_refused(tmp_path: Path) -> None:
    # collectives are priced on the hierarchical system and on tori (model/topology.py); any other
    # name is refused, and a torus without its extents too
    base = BASE.replace("[system]\n", "[system]\ntopology = \"hierarchical\"\n", 1)
    assert load_instance(str(write(tmp_path, base))).system.topology == "hierarchical"
    for topo in ("ring", "switch", "fully-connected"):
        e = load_error(write(tmp_path, BASE.replace("[system]\n", f"[system]\ntopology = \"{topo}\"\n", 1)))
        assert e.key == "system.topology" and "is not modelled" in str(e) and "hierarchical" in str(e)
    e = load_error(write(tmp_path, BASE.replace("[system]\n", "[system]\ntopology = \"torus-2d\"\n", 1)))
    assert e.key == "system.torus" and "2 extents" in str(e)


def test_unknown_hardware_decision_with_did_you_mean(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "dram_layers = [2, 4]", "dram_layer = [2, 4]"))
    assert e.key is not None and e.key.startswith("hardware")
    assert e.key == "hardware.decisions.dram_layer"
    assert "did you mean 'dram_layers'?" in str(e)


def test_unknown_schedule_decision_with_did_you_mean(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "tp = [1, 2]", "tpp = [1, 2]"))
    assert e.key == "workloads[0].decisions.tpp"
    assert "did you mean 'tp'?" in str(e)


def test_unknown_key_in_a_table_with_did_you_mean(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "scale_up_domain = 4", "scale_up_domian = 4"))
    assert e.key == "system.scale_up_domian"
    assert e.suggestion == "did you mean 'scale_up_domain'?"


def test_negative_domain_value(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "dram_layers = [2, 4]", "dram_layers = [2, -4]"))
    assert e.key is not None and e.key.startswith("hardware")
    assert "dram_layers" in str(e) and "-4" in str(e) and "positive" in str(e)
    e = load_error(broken(tmp_path, "batch = [8]", "batch = [8, -16]"))
    assert e.key == "workloads[0].decisions.batch"
    assert "batch" in str(e) and "-16" in str(e)


def test_fractional_value_for_an_integer_decision(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "dram_layers = [2, 4]", "dram_layers = [2, 4.5]"))
    assert "dram_layers" in str(e) and "4.5" in str(e)


def test_wrong_type(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "devices = 4", 'devices = "four"'))
    assert e.key == "system.devices"
    assert e.value == "four"
    e = load_error(broken(tmp_path, 'family = "stacked-3d"', 'family = "stacked3d"'))
    assert e.key == "hardware.family"
    assert e.value == "stacked3d"


def test_unknown_workload_id_with_did_you_mean(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, 'workload = "llama-3.1-8b"', 'workload = "llama-3.1-8"'))
    assert e.key == "workloads[0].workload"
    assert e.value == "llama-3.1-8"
    assert e.suggestion == "did you mean 'llama-3.1-8b'?"


def test_missing_required_key(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "devices = 4\n", ""))
    assert e.key == "system.devices"
    assert "missing" in str(e)
    e = load_error(broken(tmp_path, "input_tokens = 128\n", ""))
    assert e.key == "workloads[0].input_tokens"


def test_extends_cycle(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(f'extends = "{b}"\n' + BASE)
    b.write_text(f'extends = "{a}"\n' + BASE)
    e = load_error(a)
    assert e.key == "extends"
    assert "cycle" in str(e) and str(b) in str(e)
    own = tmp_path / "self.toml"
    own.write_text(f'extends = "{own}"\n' + BASE)
    assert "cycle" in str(load_error(own))


def test_extends_unknown_instance_with_did_you_mean(tmp_path: Path) -> None:
    e = load_error(write(tmp_path, 'extends = "tiny-3d-llama8"\nname = "child"\n'))
    assert e.key == "extends"
    assert e.suggestion == "did you mean 'tiny-3d-llama8b'?"


def test_extends_merges_tables_and_keeps_the_parent_baseline(tmp_path: Path) -> None:
    child = write(tmp_path, 'extends = "tiny-3d-llama8b"\nname = "child"\n[system]\ndevices = 2\n')
    inst = load_instance(str(child))
    parent = load_instance("tiny-3d-llama8b")
    assert inst.name == "child"
    assert inst.system.devices == 2
    assert inst.system.scale_up_domain == parent.system.scale_up_domain
    assert inst.hardware.decisions == parent.hardware.decisions
    assert inst.baseline() == parent.baseline()


# --------------------------------------------------------------------------------------------------
# A bad [baseline], missing decisions, types
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"), [("tp = 2\n", "tpp = 2\n"), ("tp = 2\n", "tp = 3\n")], ids=["unknown", "domain"]
)
def test_bad_baseline_is_an_input_error(tmp_path: Path, old: str, new: str) -> None:
    e = load_error(broken(tmp_path, old, new))  # "tp = 2" only occurs in [baseline]
    assert e.key is not None and e.key.startswith("baseline")


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("dram_layers = [2, 4]", "dram_layer = [2, 4]", "hardware.decisions.dram_layer"),
        ("dram_layers = [2, 4]", "dram_layers = [2, -4]", "hardware.decisions.dram_layers"),
    ],
    ids=["unknown", "negative"],
)
def test_hardware_decision_errors_name_the_full_key_path(
    tmp_path: Path, old: str, new: str, key: str
) -> None:
    e = load_error(broken(tmp_path, old, new))
    assert e.key == key
    assert e.suggestion == "did you mean 'dram_layers'?" or e.value == -4


def test_missing_hardware_decision_is_caught_at_load_or_defaults(tmp_path: Path) -> None:
    path = broken(tmp_path, "sram_MiB = [0.5]\n", "")
    try:
        inst = load_instance(str(path))
    except InputError as e:
        assert e.file == str(path) and "sram_MiB" in (e.key or "")
        return
    evaluate(inst, inst.baseline())


# --------------------------------------------------------------------------------------------------
# Bad input a fuzzer tries (issue 34, part 3): names, non-finite numbers, --set by type
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../escaped", "/tmp/abs", "a/b", "..", ".hidden", "", "x" * 200, "sp ace"])
def test_an_instance_name_that_is_not_a_file_name_is_refused(tmp_path: Path, name: str) -> None:
    # the name becomes <name>.json (solve --save) and <name>.mps (export): never a path
    e = load_error(broken(tmp_path, 'name = "probe"', f"name = {json.dumps(name)}"))
    assert e.key == "name" and "not a name" in e.message


@pytest.mark.parametrize("name", ["a.b", "llama-8b", "1st", "", "a b"])
def test_a_workload_name_is_an_identifier(tmp_path: Path, name: str) -> None:
    # it prefixes decisions (<workload>.tp) and budget metrics (<workload>.tpot_s)
    e = load_error(broken(tmp_path, 'workload = "llama-3.1-8b"', f'name = {json.dumps(name)}\nworkload = "llama-3.1-8b"'))
    assert e.key == "workloads[0].name"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("clock_GHz = [1.2]", "clock_GHz = [1.2, nan]", "hardware.decisions.clock_GHz[1]"),
        ("clock_GHz = [1.2]", "clock_GHz = [inf]", "hardware.decisions.clock_GHz[0]"),
        ("devices = 4", "devices = 4\nambient_C = nan", "system.ambient_C"),
        ("tp = 2\n", "tp = 2\nclock_GHz = -inf\n", "baseline.clock_GHz"),
        ("input_tokens = 128", "input_tokens = 128\nweight = inf", "workloads[0].weight"),
    ],
)
def test_a_non_finite_number_in_an_instance_file_is_refused(tmp_path: Path, old: str, new: str, key: str) -> None:
    e = load_error(broken(tmp_path, old, new))
    assert e.key == key and "finite" in e.message


def test_non_finite_numbers_in_instance_data_are_refused_too() -> None:
    # instance_data of a record, generators: no TOML reader in between
    raw = tomllib.loads(BASE)
    raw["hardware"]["decisions"]["clock_GHz"] = [math.nan]
    with pytest.raises(InputError, match="positive finite numbers"):
        instance_from_data(raw)
    raw = tomllib.loads(BASE)
    raw["system"]["ambient_C"] = math.inf
    with pytest.raises(InputError, match="finite number"):
        instance_from_data(raw)


def test_an_ambient_below_absolute_zero_is_refused(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "devices = 4", "devices = 4\nambient_C = -300.0"))
    assert e.key == "system.ambient_C"


def test_a_malformed_budget_from_the_command_line_is_bad_input() -> None:
    inst = load_instance("tiny-3d-llama8b")
    for text in ("", " ", "x", "power_W"):
        with pytest.raises(InputError) as info:
            with_budgets(inst, [text])
        assert info.value.file == "--budget" and info.value.key == "cli-1"


@pytest.mark.parametrize(("old", "new", "key"), [
    ('workload = "llama-3.1-8b"', f'workload = "{"x" * 300}"', "workloads[0].workload"),
    ('family = "stacked-3d"', 'family = "stacked-3d"\nstack = "a\\u0000b"', "hardware.stack"),
    ('family = "stacked-3d"', f'family = "stacked-3d"\nstack = "{"x" * 300}"', "hardware.stack"),
])
def test_a_catalog_id_no_file_can_have_is_unknown(tmp_path: Path, old: str, new: str, key: str) -> None:
    # Path.is_file raised "File name too long" (and ValueError on a NUL) before it said "unknown"
    e = load_error(broken(tmp_path, old, new))
    assert e.key == key and "unknown" in e.message


@pytest.mark.parametrize(("old", "new", "key"), [
    # a subnormal clock, area or buffer overflowed a time per FLOP: an IndexError building the MIP
    ("clock_GHz = [1.2]", "clock_GHz = [5e-324]", "hardware.decisions.clock_GHz"),
    ("clock_GHz = [1.2]", "clock_GHz = [1.2, 5.0]", "hardware.decisions.clock_GHz"),  # off the V/f curve
    ("compute_area_mm2 = [40.0]", "compute_area_mm2 = [5e-324]", "hardware.decisions.compute_area_mm2"),
    ("compute_area_mm2 = [40.0]", "compute_area_mm2 = [1e300]", "hardware.decisions.compute_area_mm2"),
    ("sram_MiB = [0.5]", "sram_MiB = [5e-324]", "hardware.decisions.sram_MiB"),
    ("tsv_pitch_um = [20.0]", "tsv_pitch_um = [1e-300]", "hardware.decisions.tsv_pitch_um"),
    ("dram_layers = [2, 4]", "dram_layers = [2, 4611686018427387904]", "hardware.decisions.dram_layers"),
    # a subnormal weight times a step time is 0: a ZeroDivisionError in the token mix
    ("input_tokens = 128", "input_tokens = 128\nweight = 5e-324", "workloads[0].weight"),
])
def test_a_number_out_of_its_physical_range_is_refused(tmp_path: Path, old: str, new: str, key: str) -> None:
    e = load_error(broken(tmp_path, old, new))
    assert e.key == key


def test_the_clock_range_is_the_familys_vf_curve(tmp_path: Path) -> None:
    e = load_error(broken(tmp_path, "clock_GHz = [1.2]", "clock_GHz = [0.5]"))
    assert "V/f curve" in e.message and e.expected == "0.8 to 2.2 GHz (deepstack-3d's compute.vf_curve_GHz)"
