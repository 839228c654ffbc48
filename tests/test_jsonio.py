"""codesign.jsonio: atomic writes and the results files the validation scripts extend run by run."""

from __future__ import annotations

import json
import math

from codesign.jsonio import dumps, results_to_extend, write_json_atomic


def test_atomic_write_leaves_no_temp_file_and_plain_json(tmp_path):
    path = tmp_path / "sub" / "out.json"
    write_json_atomic(path, {"a": math.nan, "b": math.inf, "c": (1, 2)})
    assert json.loads(path.read_text()) == {"a": None, "b": "inf", "c": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]


def test_results_are_extended_only_when_made_from_the_same_inputs(tmp_path):
    path = tmp_path / "probes.json"
    made_from = {"csv": "measurements.csv", "split": "split.json"}
    # no file yet: a fresh one with an empty section
    assert results_to_extend(path, made_from, "probes") == {**made_from, "probes": {}}

    path.write_text(dumps({**made_from, "probes": {"a": 1, "b": 2}, "engine_limits": {"m1": 3}}))
    out = results_to_extend(path, made_from, "probes")
    assert out == {**made_from, "probes": {"a": 1, "b": 2}, "engine_limits": {"m1": 3}}
    out["probes"]["c"] = 4  # the caller extends a copy; the file is untouched until written
    assert "c" not in json.loads(path.read_text())["probes"]

    # another measurements file: what the old file holds does not carry over
    other = {**made_from, "csv": "other-models.csv"}
    assert results_to_extend(path, other, "probes") == {**other, "probes": {}}
