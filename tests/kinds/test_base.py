"""codesign.kinds.base: the protocol's shared pieces — the content hash, the records' rows, the
defaults a kind may keep."""

from __future__ import annotations

import copy

import pytest

from codesign.errors import InputError
from codesign.kinds.base import PRESENTATION_KEYS, AuditRow, DecisionInfo, Lint, decision_groups
from codesign.kinds.registry import from_data


def test_the_content_hash_covers_the_answer_and_the_calibration_not_the_words(named, tmp_path):
    """description, provenance and the baseline are for people: editing them keeps the hash;
    anything else, or another calibration, changes it."""
    from codesign.kinds.registry import load
    from codesign.model.calibration import load_calibration, shipped_path

    assert {"description", "provenance", "baseline"} <= PRESENTATION_KEYS
    p = named("tiny-placement-mixtral")
    raw = copy.deepcopy(p.data)
    raw["description"] = "words"
    raw["provenance"] = "elsewhere"
    raw["baseline"] = {"experts": [0, 0, 1, 1, 2, 2, 3, 3], "groups": [[0, 1], [2, 3]]}
    assert from_data(raw).content_hash == p.content_hash
    raw["workload"]["batch"] = 2 * raw["workload"]["batch"]
    assert from_data(raw).content_hash != p.content_hash
    cal = tmp_path / "cal.toml"
    cal.write_text(shipped_path().read_text() + "\n# another file\n")
    assert load("tiny-placement-mixtral", calibration=load_calibration(cal)).content_hash != p.content_hash


def test_rows_as_records_state_them():
    row = AuditRow("power", 70.0, 60.0, "W", False)
    assert row.slack == -10.0
    assert row.as_dict() == {"name": "power", "value": 70.0, "limit": 60.0, "slack": -10.0, "unit": "W", "ok": False}
    assert Lint("c", "error", "m", {"x": 1.0}).as_dict() == {"code": "c", "severity": "error", "message": "m",
                                                             "numbers": {"x": 1.0}}
    assert DecisionInfo("tp", (1, 2), "parallelism").as_dict() == {"name": "tp", "group": "parallelism",
                                                                   "domain": [1, 2]}
    assert DecisionInfo("stages", "3 layers", "mapping").as_dict() == {"name": "stages", "group": "mapping",
                                                                       "domain": "3 layers"}


@pytest.mark.parametrize("name", ["tiny-pf-mapping", "tiny-placement-mixtral"])
def test_explain_budget_and_objective_defaults_of_kinds_that_take_none(name, named):
    p = named(name)
    assert p.with_budgets([]) is p and p.with_objective(None) is p and p.budget_texts() == []
    with pytest.raises(InputError):
        p.with_budgets(["x <= 1"])


def test_decision_groups_count_only_free_decisions_in_a_fixed_order():
    ds = [DecisionInfo("kv_tier", ("local",), "mapping"), DecisionInfo("tp", (1, 2), "parallelism"),
          DecisionInfo("dram_layers", (2, 4), "hardware"), DecisionInfo("experts", "a device per expert", "placement")]
    assert decision_groups(ds) == ["hardware", "parallelism", "placement"]  # kv_tier has one value
    with pytest.raises(ValueError, match="group 'memory'"):
        DecisionInfo("x", (1, 2), "memory")
