"""codesign.proof.records: one record schema for every kind (Evaluation, Solution, Certificate),
the gap in the user's metric, saving with the ledger, reading back with validation."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from codesign.errors import InputError
from codesign.model.calibration import load_calibration, shipped_path
from codesign.proof import records
from codesign.proof.driver import solve
from codesign.proof.records import SCHEMA_VERSION, user_gap

KINDS = ["tiny-3d-llama8b", "tiny-pf-mapping", "tiny-placement-mixtral"]
#: the keys every record states, whatever the kind (issue 28 item 3)
COMMON = {"design", "metrics", "objective", "feasible", "lints", "instance", "kind", "instance_hash", "instance_data",
          "calibration", "calibration_sha256", "objective_metric", "sense", "schema_version", "record"}


@pytest.fixture(scope="module")
def solutions():
    from codesign.kinds.registry import load

    return {n: solve(load(n), solver="highs") for n in KINDS}


def test_the_gap_in_the_users_metric_by_hand():
    # maximise: (ub - f)/|f|; minimise: (f - lb)/|f|
    assert user_gap("max", 100.0, 110.0) == pytest.approx(0.1)
    assert user_gap("min", 100.0, 90.0) == pytest.approx(0.1)
    assert user_gap("min", -50.0, -60.0) == pytest.approx(0.2)
    assert user_gap("max", 100.0, 100.0) == 0.0
    assert user_gap("max", 100.0, None) is None and user_gap("min", None, 1.0) is None
    assert user_gap("max", 100.0, math.inf) == math.inf
    assert user_gap("min", 0.0, 0.0) == 0.0 and user_gap("min", 0.0, -1.0) == math.inf


@pytest.mark.parametrize("name", KINDS)
def test_an_evaluation_carries_the_same_keys_on_every_kind(name, named):
    p = named(name)
    rec = records.evaluation(p, p.assess(p.parse_design(p.baseline())))
    d = rec.as_dict()
    assert set(d) >= COMMON
    assert d["record"] == "evaluation" and d["schema_version"] == SCHEMA_VERSION
    assert d["kind"] == p.kind and d["instance"] == p.name and d["instance_hash"] == p.content_hash
    assert d["instance_data"] == p.data and d["sense"] == p.sense and d["objective_metric"] == p.metric
    assert d["objective"] == pytest.approx(d["metrics"][p.metric], rel=1e-12)
    json.dumps(d)  # plain JSON


@pytest.mark.parametrize("name", KINDS)
def test_a_solution_states_its_proof(name, solutions):
    d = solutions[name].as_dict()
    assert COMMON | {"status", "bound", "gap", "solver", "termination", "proof", "mip", "parameters", "provenance"} <= set(d)
    assert d["status"] == "optimal" and d["solver"] == "highs"
    assert d["gap"] == pytest.approx(user_gap(d["sense"], d["objective"], d["bound"]), abs=1e-15)
    assert d["parameters"]["tolerances"]["verified_gap"] == 1e-6
    assert d["parameters"]["tolerances"]["mip_rel_gap"] == 0.0
    assert d["provenance"]["codesign_version"]


def test_a_record_states_the_shipped_calibration_by_name_and_digest(solutions):
    sol = solutions["tiny-3d-llama8b"]
    assert sol.calibration == "shipped"
    assert sol.calibration_sha256 == hashlib.sha256(shipped_path().read_bytes()).hexdigest()


def test_a_record_made_under_another_calibration_names_its_file(tmp_path, named):
    cal = tmp_path / "cal.toml"
    cal.write_text(shipped_path().read_text() + "\n# a copy\n")
    from codesign.kinds.registry import load

    p = load("tiny-3d-llama8b", calibration=load_calibration(cal))
    rec = records.evaluation(p, p.assess(p.baseline()))
    assert rec.calibration == str(cal.resolve())
    assert rec.calibration_sha256 == hashlib.sha256(cal.read_bytes()).hexdigest()
    assert rec.instance_hash != named("tiny-3d-llama8b").content_hash  # the calibration is part of the hash


@pytest.mark.parametrize("name", KINDS)
def test_a_saved_record_reads_back_equal(name, solutions, tmp_path):
    sol = solutions[name]
    path, _ = records.save(sol, tmp_path)
    assert path == tmp_path / f"{name}.json"
    back = records.read_record(path, expected=records.Solution)
    assert back.as_dict() == sol.as_dict()


def test_saving_writes_the_ledger(solutions, tmp_path):
    for sol in solutions.values():
        records.save(sol, tmp_path)
    infeasible = solutions["tiny-3d-llama8b"].model_copy(
        update={"instance": "nothing-fits", "status": "infeasible", "design": None, "objective": None, "bound": None,
                "gap": None})
    records.save(infeasible, tmp_path)
    feasible = solutions["tiny-pf-mapping"].model_copy(update={"instance": "half-done", "status": "feasible", "gap": 0.25})
    records.save(feasible, tmp_path)
    (tmp_path / "notes.json").write_text('{"not": "a record"}')
    lines = (tmp_path / "ledger.solu").read_text().splitlines()
    assert lines[0].startswith("#")
    body = {line.split()[1]: line for line in lines[1:]}
    assert set(body) == {*KINDS, "nothing-fits", "half-done"}
    tiny = solutions["tiny-3d-llama8b"]
    assert body["tiny-3d-llama8b"].startswith(f"=opt= tiny-3d-llama8b {tiny.objective:.12g}")
    assert body["nothing-fits"].startswith("=inf= nothing-fits")
    assert body["half-done"].startswith("=best= half-done") and "gap 0.25" in body["half-done"]


@pytest.mark.parametrize("bad", ["../evil", ".hidden", "a/b", "", ".."])
def test_a_record_whose_name_is_no_file_name_is_not_saved(bad, solutions, tmp_path):
    with pytest.raises(InputError):
        records.save(solutions["tiny-3d-llama8b"].model_copy(update={"instance": bad}), tmp_path)
    assert not list(tmp_path.iterdir())


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_reading_refuses_another_schema_version_another_record_type_and_unknown_keys(solutions, tmp_path):
    d = solutions["tiny-3d-llama8b"].as_dict()
    with pytest.raises(InputError, match="schema version") as info:
        records.read_record(_write(tmp_path / "v1.json", {**d, "schema_version": 1}))
    assert info.value.key == "schema_version"
    with pytest.raises(InputError, match="not a record of this type"):
        records.read_record(_write(tmp_path / "s.json", d), expected=records.Certificate)
    with pytest.raises(InputError) as info:
        records.read_record(_write(tmp_path / "x.json", {**d, "surprise": 1}))
    assert info.value.key == "surprise"
    with pytest.raises(InputError) as info:
        records.read_record(_write(tmp_path / "t.json", {**d, "status": "great"}))
    assert info.value.key == "status"
    with pytest.raises(InputError, match="JSON object"):
        records.read_record(_write(tmp_path / "l.json", [1, 2]))  # type: ignore[arg-type]


def test_the_git_revision_is_asked_once_per_process(monkeypatch):
    calls = []
    real = records.subprocess.run

    def counting(*a, **k):
        calls.append(a)
        return real(*a, **k)

    records.git_revision.cache_clear()
    monkeypatch.setattr(records.subprocess, "run", counting)
    try:
        first = records.git_revision()
        assert records.git_revision() == first
        assert len(calls) <= 1
    finally:
        records.git_revision.cache_clear()


def test_a_proven_optimum_is_not_replaced_by_an_unproven_solution(solutions, tmp_path):
    """A time-limited or interrupted re-solve of the same content is written beside the stored
    optimum (``<name>.unproven.json``), never over it; the ledger keeps =opt=."""
    best = solutions["tiny-3d-llama8b"]
    records.save(best, tmp_path)
    worse = best.model_copy(update={"status": "feasible", "objective": best.objective * 0.9, "gap": 0.11})
    path, done = records.save(worse, tmp_path)
    assert path == tmp_path / "tiny-3d-llama8b.unproven.json" and done.startswith("kept the better stored optimal")
    assert records.read_record(tmp_path / "tiny-3d-llama8b.json").status == "optimal"
    ledger = (tmp_path / "ledger.solu").read_text()
    assert "=opt= tiny-3d-llama8b" in ledger and "=best= tiny-3d-llama8b" not in ledger
    other = worse.model_copy(update={"instance_hash": "0" * 64})  # other content: replaced as usual
    assert records.save(other, tmp_path)[0] == tmp_path / "tiny-3d-llama8b.json"


def test_a_better_feasible_solution_is_kept_and_replace_overrides(solutions, tmp_path):
    """Two time-limited solutions of the same content: the worse does not replace the better; with
    replace=True it does; a better one replaces a worse one."""
    best = solutions["tiny-3d-llama8b"]
    good = best.model_copy(update={"status": "feasible", "objective": 20000.0, "gap": 0.2})
    worse = best.model_copy(update={"status": "feasible", "objective": 15000.0, "gap": 0.6})
    records.save(good, tmp_path)
    assert records.save(worse, tmp_path)[0].name == "tiny-3d-llama8b.unproven.json"
    assert records.read_record(tmp_path / "tiny-3d-llama8b.json").objective == 20000.0
    assert records.save(worse, tmp_path, replace=True)[0].name == "tiny-3d-llama8b.json"
    assert records.read_record(tmp_path / "tiny-3d-llama8b.json").objective == 15000.0
    assert records.save(good, tmp_path)[0].name == "tiny-3d-llama8b.json"
