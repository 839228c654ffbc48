"""codesign.kinds.grid.design: a design as people write it (nested or dotted keys, values as text
or numbers) is checked against the instance's decisions and filled from its baseline; unknown
names, values outside a domain and values of another type fail with the source, the key, the
value and what was expected."""

from __future__ import annotations

import math

import pytest

from codesign.errors import InputError
from codesign.kinds.grid.design import flatten_design, parse_design
from codesign.kinds.grid.spec import load_instance

# --------------------------------------------------------------------------------------------------
# Designs
# --------------------------------------------------------------------------------------------------


def test_flatten_design_dots_nested_tables_and_keeps_an_empty_table_as_a_value() -> None:
    nested = {"llama8b": {"tp": 4, "batch": 8}, "qwen30b.ep": 2, "hw": {"chip": {"first": "b200"}}, "kv_tier": {}}
    assert flatten_design(nested) == {
        "llama8b.tp": 4, "llama8b.batch": 8, "qwen30b.ep": 2, "hw.chip.first": "b200", "kv_tier": {},
    }
    assert flatten_design({"tp": 2}, "llama8b.") == {"llama8b.tp": 2}
    assert flatten_design({}) == {}


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
# Values of another type
# --------------------------------------------------------------------------------------------------


def test_not_a_number_names_the_design_file() -> None:
    inst = load_instance("tiny-3d-llama8b")
    with pytest.raises(InputError) as info:
        parse_design(inst, {"tp": "abc"}, source="d.json")
    assert info.value.file == "d.json"


def test_boolean_is_not_an_integer_decision_value() -> None:
    inst = load_instance("tiny-3d-llama8b")
    with pytest.raises(InputError):
        parse_design(inst, {"tp": True})


def test_set_values_are_read_by_the_decisions_type() -> None:
    inst = load_instance("dgx-qwen3-235b-attention-dp")
    for text in ("maybe", "1", "0", "yes", ""):
        with pytest.raises(InputError, match="not true or false") as info:
            parse_design(inst, {"attention_dp": text}, source="--set")
        assert info.value.key == "attention_dp"
    for given in (1, 0, 1.0, None, [True]):
        with pytest.raises(InputError, match="not true or false"):
            parse_design(inst, {"attention_dp": given}, source="--set")
    assert parse_design(inst, {"attention_dp": "true"})["attention_dp"] is True
    assert parse_design(inst, {"attention_dp": " False "})["attention_dp"] is False
    assert parse_design(inst, {"attention_dp": True})["attention_dp"] is True


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("tp", "1.5", "not an integer"), ("tp", 2.5, "not an integer"), ("tp", "two", "not a number"),
     ("tp", [2], "not an integer"), ("tp", None, "not an integer"), ("clock_GHz", "nan", "not a finite number"),
     ("clock_GHz", math.inf, "not a finite number"), ("clock_GHz", True, "a flag"), ("clock_GHz", "fast", "not a number"),
     ("weights_tier", 1, "not a name"), ("batch", "1e999", "not an integer")],
)
def test_a_design_value_of_another_type_is_refused(key: str, value, message: str) -> None:
    inst = load_instance("tiny-3d-llama8b")
    with pytest.raises(InputError, match=message) as info:
        parse_design(inst, {key: value}, source="--set")
    assert info.value.key == key


def test_a_whole_number_given_as_a_float_is_the_integer() -> None:
    d = parse_design(load_instance("tiny-3d-llama8b"), {"tp": 4.0, "clock_GHz": " 1.75 "})
    assert d["tp"] == 4 and type(d["tp"]) is int
    assert d["clock_GHz"] == 1.75


def test_an_empty_table_for_a_decision_is_a_value_of_the_wrong_type() -> None:
    # --set kv_tier={} once flattened to nothing: the baseline, exit 0
    with pytest.raises(InputError, match="not a name") as info:
        parse_design(load_instance("tiny-3d-llama8b"), {"kv_tier": {}}, source="--set")
    assert info.value.key == "kv_tier"
    with pytest.raises(InputError, match="not an integer"):
        parse_design(load_instance("tiny-3d-llama8b"), {"tp": {}}, source="--set")
