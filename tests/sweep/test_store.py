"""codesign.sweep.store: records per point (re-checkable), the journal (a torn line skipped, a
record without its line read back), the tables (one row per point, columns typed by their
values)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq

from codesign.proof.check import check_solution
from codesign.proof.records import read_record
from codesign.sweep.job import Outcome, run_job
from codesign.sweep.spec import load_sweep
from codesign.sweep.store import FAILED, Store, as_table, columns, invalid_entry

SPEC = 'instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W <=" = [60, 120]\n'


def sweep_of(tmp_path, text=SPEC):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return load_sweep(path)


def test_a_finished_point_has_its_record_and_journal_line(tmp_path):
    sweep = sweep_of(tmp_path)
    store = Store(tmp_path / "out")
    p = sweep.points[0]
    entry = store.put(p, run_job(p.job))
    assert entry["status"] == "optimal" and entry["record"] == f"points/{p.id}/tiny-3d-llama8b.json"
    record = read_record(store.record_path(p))
    assert record.objective == entry["objective_value"] and record.instance_hash == entry["instance_hash"]
    assert check_solution(store.record_path(p), prove=False)["ok"] is True
    assert (store.point_dir(p) / "ledger.solu").read_text().splitlines()[1].startswith("=opt= tiny-3d-llama8b ")
    assert store.entries() == {p.id: entry}
    assert store.finished(p, entry) == entry
    assert store.finished(sweep.points[1], None) is None


def test_a_torn_journal_line_is_skipped_and_a_record_without_its_line_is_read_back(tmp_path):
    sweep = sweep_of(tmp_path)
    store = Store(tmp_path / "out")
    a, b = sweep.points
    ea = store.put(a, run_job(a.job))
    store.put(b, run_job(b.job))
    lines = store.journal.read_text().splitlines()
    store.journal.write_text(lines[0] + "\n" + lines[1][:25])  # killed while writing b's line
    entries = store.entries()
    assert entries == {a.id: ea}
    back = store.finished(b, entries.get(b.id))
    assert back is not None and back["status"] == "optimal" and back["record"].endswith(".json")
    assert b.id in store.entries()  # the line is written again


def test_a_failed_or_interrupted_point_is_not_finished(tmp_path):
    sweep = sweep_of(tmp_path)
    store = Store(tmp_path / "out")
    a, b = sweep.points
    failed = store.put(a, Outcome(a.job, error="RuntimeError: boom", error_kind="crash"))
    assert failed["status"] == FAILED and store.finished(a, failed) is None
    out = run_job(b.job)
    interrupted = Outcome(b.job, record=out.record, error="interrupted (Ctrl-C)", error_kind="interrupted")
    assert store.put(b, interrupted)["status"] == FAILED
    assert not store.record_path(b).exists()  # an interrupted solve's record is no result


def test_tables_have_one_row_per_point_with_typed_columns(tmp_path):
    sweep = sweep_of(tmp_path, 'instances = ["tiny-3d-llama8b", "tiny-pf-mapping"]\n[grid]\n"power_W <=" = [1, 120]\n')
    store = Store(tmp_path / "out")
    entries = {p.id: store.put(p, run_job(p.job)) for p in sweep.points}
    assert store.write_tables(sweep, entries) == 3
    table = pq.read_table(store.parquet)
    assert table.num_rows == 3
    names = table.column_names
    assert names[:8] == ["point", "instance", "kind", "chip", "workload", "objective", "power_W <=", "status"]
    assert names.index("design.dram_layers") < names.index("tokens_per_s") < names.index("note")
    assert {"objective_value", "bound", "gap", "ttft_s", "tpot_s", "energy_per_token_J", "system_power_W",
            "design.layers_per_stage", "record"} <= set(names)
    rows = table.to_pylist()
    assert [r["status"] for r in rows] == ["infeasible", "optimal", "optimal"]
    assert rows[0]["objective_value"] is None and rows[0]["power_W <="] == 1
    assert table.schema.field("power_W <=").type == pa.int64()
    assert table.schema.field("design.tp").type == pa.int64()
    assert table.schema.field("tokens_per_s").type == pa.float64()
    assert json.loads(rows[2]["design.layers_per_stage"]) == [2, 2]  # a list as JSON
    assert "is no metric of a mapping design" in rows[2]["note"] and rows[2]["power_W <="] is None
    csv = store.csv.read_text().splitlines()
    assert len(csv) == 4 and csv[0].startswith('"point","instance","kind"')


def test_invalid_and_failed_points_are_rows_with_a_note(tmp_path):
    sweep = sweep_of(tmp_path, 'instances = ["tiny-placement-mixtral"]\n[substitute]\nworkload = ["mixtral-8x7b", "qwen3-30b-a3b"]\n')
    ok, bad = sweep.points
    store = Store(tmp_path / "out")
    entries = {ok.id: store.put(ok, Outcome(ok.job, error="RuntimeError: boom\nline 2", error_kind="crash")),
               bad.id: invalid_entry(bad)}
    store.write_tables(sweep, entries)
    rows = pq.read_table(store.parquet).to_pylist()
    assert [r["status"] for r in rows] == ["failed", "invalid"]
    assert rows[0]["note"] == "RuntimeError: boom" and rows[1]["note"].startswith("tiny-placement-mixtral with workload=")
    assert rows[1]["workload"] == "qwen3-30b-a3b"


def test_column_types():
    rows = [{"a": 1, "b": 1, "c": True, "d": None, "e": "x", "f": math.inf},
            {"a": 2, "b": 2.5, "c": None, "d": None, "e": 3, "f": 1.0}]
    t = as_table(rows, list("abcdef"))
    assert [str(t.schema.field(n).type) for n in "abcdef"] == ["int64", "double", "bool", "string", "string", "double"]
    assert t.column("e").to_pylist() == ["x", "3"] and t.column("f").to_pylist()[0] == math.inf


def test_columns_list_each_decision_once(tmp_path):
    sweep = sweep_of(tmp_path)
    rows = [{"design.tp": 1, "design.batch": 8}, {"design.batch": 8, "design.pp": 2}]
    names = columns(sweep, rows)
    assert [n for n in names if n.startswith("design.")] == ["design.tp", "design.batch", "design.pp"]
