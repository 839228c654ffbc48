"""Named instances load, evaluate and have exact space sizes; malformed files fail clearly.

Space sizes by hand (product of every decision's domain size; unset schedule decisions are one
fixed value):
    tiny-3d-llama8b            3 x 2 x 1 x 2 x 2 x 2 = 48 hardware; tp 3 x batch 3 = 9      -> 432
    small-3d-llama8b           7 x 4 x 3 x 5 x 5 x 4 = 8400; tp 4 x pp 2 x batch 7 = 56     -> 470,400
    deepstack-llama70b-decode  9 x 5 x 4 x 7 x 7 x 5 = 44,100; tp 5 x pp 4 x batch 7 = 140  -> 6,174,000
    deepstack-deepseek-v3-ep   44,100; tp 5 x pp 4 x ep 5 x batch 6 = 600                  -> 26,460,000
    deepstack-qwen3-235b       44,100; tp 5 x pp 3 x ep 5 x batch 5 = 375                  -> 16,537,500
    deepstack-multi-workload   7 x 4 x 3 x 5 x 5 x 4 = 8400; llama70b 5x4x6 = 120, llama8b 4x3x6 = 72,
                               qwen30b 4x3x4x6 = 288, rag 5x4x6 = 120, mixtral 288, gpt-oss 288
                               8400 x 120 x 72 x 288 x 120 x 288 x 288 = 208,042,343,792,640,000
    dgx-llama70b-chip-choice   chip 3 x pool_ports 1; tp 4 x pp 4 x batch 8 = 128           -> 384
    dgx-qwen3-235b-attention-dp  chip 3; tp 4 x pp 2 x ep 4 x attention_dp 2 x batch 7 = 448  -> 1,344
    pf-*                       pool_ports 2; tp 4 x pp 4 x batch 6 x weights 2 x kv 2 = 384 -> 768

Photonic Fabric lints (arXiv 2507.14000 assumes 26,800 GB/s per GPU): one port carries
7.2 Tbps / 8 = 900 GB/s (2 ports: 1800 GB/s); 8 GPUs x 26,800 = 214,400 GB/s against a
115 Tbps / 8 = 14,375 GB/s switch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from codesign.errors import InputError
from codesign.kinds.grid.lints import lint
from codesign.kinds.grid.space import space_size
from codesign.kinds.grid.spec import list_instances, load_instance, parse_design
from codesign.model.evaluate import evaluate

HAND_SIZES = {
    "tiny-3d-llama8b": 48 * 9,
    "small-3d-llama8b": 8400 * 56,
    "deepstack-llama70b-decode": 44_100 * 140,
    "deepstack-deepseek-v3-ep": 44_100 * 600,
    "deepstack-qwen3-235b": 44_100 * 375,
    "deepstack-multi-workload": 8400 * 120 * 72 * 288 * 120 * 288 * 288,
    "dgx-llama70b-chip-choice": 3 * 128,
    "dgx-qwen3-235b-attention-dp": 3 * 448,
    "pf-llama405b-consistent": 2 * 384,
    "pf-llama405b-paper": 2 * 384,
    "pf-dense1t-consistent": 2 * 384,
    "pf-dense1t-paper": 2 * 384,
}
PAPER = ["pf-llama405b-paper", "pf-dense1t-paper"]
CONSISTENT = ["pf-llama405b-consistent", "pf-dense1t-consistent"]
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


def test_at_least_eight_named_instances_including_the_required_ones() -> None:
    assert len(NAMED) >= 8
    assert set(HAND_SIZES) <= set(NAMED)


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


@pytest.mark.parametrize("name", NAMED)
def test_space_size_is_the_product_of_the_domains(name: str) -> None:
    """Counted from the merged file content (hardware.decisions and each workload's decisions;
    anything not listed there is a single value)."""
    inst = load_instance(name)
    n = 1
    for dom in inst.spec.hardware.decisions.values():
        n *= len(dom)
    for w in inst.spec.workloads:
        for dom in w.decisions.values():
            n *= len(dom)
    assert space_size(inst) == n
    assert isinstance(space_size(inst), int)
    if name in HAND_SIZES:
        assert space_size(inst) == HAND_SIZES[name]


def test_sizes_of_the_tiny_small_and_large_instances() -> None:
    assert space_size(load_instance("tiny-3d-llama8b")) <= 10_000
    assert 1e5 <= space_size(load_instance("small-3d-llama8b")) <= 1e7
    big = space_size(load_instance("deepstack-multi-workload"))
    assert big >= 10**15
    assert big == 208_042_343_792_640_000


@pytest.mark.parametrize("name", PAPER)
def test_paper_pooled_bandwidth_is_flagged_with_the_numbers(name: str) -> None:
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
    assert switch.numbers == {
        "devices": 8,
        "assumed_GBps": 26_800,
        "total_GBps": 214_400,
        "switch_GBps": 14_375,
    }
    assert "214,400" in switch.message and "14,375" in switch.message


@pytest.mark.parametrize("name", CONSISTENT)
def test_consistent_instances_have_no_lints(name: str) -> None:
    assert lint(load_instance(name)) == []


@pytest.mark.parametrize("name", [n for n in NAMED if not n.endswith("-paper")])
def test_other_named_instances_have_no_error_lints(name: str) -> None:
    assert [x.code for x in lint(load_instance(name)) if x.severity == "error"] == []


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
    assert space_size(inst) == 2 * 2
    assert inst.baseline()["tp"] == 2
    assert evaluate(inst, inst.baseline()).feasible


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
# Designs
# --------------------------------------------------------------------------------------------------


def test_parse_design_rejects_unknown_decisions() -> None:
    inst = load_instance("tiny-3d-llama8b")
    with pytest.raises(InputError) as info:
        parse_design(inst, {"tpp": 2}, source="d.json")
    assert info.value.key == "tpp"
    assert info.value.file == "d.json"
    assert info.value.suggestion == "did you mean 'tp'?"


def test_parse_design_rejects_values_outside_the_domain() -> None:
    inst = load_instance("tiny-3d-llama8b")
    with pytest.raises(InputError) as info:
        parse_design(inst, {"tp": 3}, source="d.json")
    assert info.value.key == "tp" and info.value.value == 3
    assert "[1, 2, 4]" in str(info.value)
    with pytest.raises(InputError) as info:
        parse_design(inst, {"clock_GHz": 1.5})
    assert info.value.key == "clock_GHz"
    with pytest.raises(InputError):
        parse_design(inst, {"tp": "abc"})


def test_parse_design_fills_from_the_baseline_and_coerces_strings() -> None:
    inst = load_instance("tiny-3d-llama8b")
    d = parse_design(inst, {"tp": "2", "clock_GHz": "1.2"})
    assert d["tp"] == 2 and isinstance(d["tp"], int)
    assert d["clock_GHz"] == 1.2
    assert {k: v for k, v in d.items() if k not in ("tp", "clock_GHz")} == {
        k: v for k, v in inst.baseline().items() if k not in ("tp", "clock_GHz")
    }


def test_parse_design_qualifies_schedule_decisions_of_several_workloads() -> None:
    inst = load_instance("deepstack-multi-workload")
    d = parse_design(inst, {"llama8b": {"tp": 4}, "qwen30b.ep": 2})
    assert d["llama8b.tp"] == 4 and d["qwen30b.ep"] == 2
    with pytest.raises(InputError) as info:
        parse_design(inst, {"llama8b.tp": 16})  # 16 is in llama70b's domain, not llama8b's
    assert info.value.key == "llama8b.tp"


# --------------------------------------------------------------------------------------------------
# Regression tests for defects found in review (fixed)
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


def test_not_a_number_names_the_design_file() -> None:
    inst = load_instance("tiny-3d-llama8b")
    with pytest.raises(InputError) as info:
        parse_design(inst, {"tp": "abc"}, source="d.json")
    assert info.value.file == "d.json"


def test_boolean_is_not_an_integer_decision_value() -> None:
    inst = load_instance("tiny-3d-llama8b")
    with pytest.raises(InputError):
        parse_design(inst, {"tp": True})
