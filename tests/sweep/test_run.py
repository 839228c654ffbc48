"""codesign.sweep.run: a sweep's results equal direct solves; a rerun skips finished points and
solves failed ones again; Ctrl-C keeps every finished point and the tables."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from codesign.kinds.registry import load
from codesign.proof.driver import solve
from codesign.proof.records import read_record
from codesign.sweep.executor import Executor, Outcome
from codesign.sweep.run import Tally, run_sweep
from codesign.sweep.spec import load_sweep

SPEC = """
instances = ["tiny-3d-llama8b", "tiny-placement-mixtral"]
objectives = ["tokens_per_s", "energy_per_token_J"]
[grid]
"power_W <=" = [60, 120]
"""


class Interrupted(Executor):
    """In this process; Ctrl-C after ``after`` points."""

    def __init__(self, after: int):
        super().__init__(0)
        self.after = after

    def map(self, jobs):
        for i, outcome in enumerate(super().map(jobs)):
            if i == self.after:
                raise KeyboardInterrupt
            yield outcome


class FailsFirst(Executor):
    """In this process; the first job crashes."""

    def map(self, jobs):
        for i, outcome in enumerate(super().map(jobs)):
            yield Outcome(outcome.job, error="RuntimeError: boom", error_kind="crash") if i == 0 else outcome


@pytest.fixture
def sweep(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return load_sweep(path)


def test_results_equal_direct_solves(sweep, tmp_path):
    with Executor(0) as ex:
        summary = run_sweep(sweep, tmp_path / "out", ex)
    assert (summary.points, summary.solved, summary.failed, summary.skipped) == (5, 5, 0, 0)
    assert summary.statuses == {"optimal": 5} and not summary.interrupted
    rows = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    assert [r["point"] for r in rows] == [p.id for p in sweep.points]
    for r in rows:
        p = load(r["instance"])
        if r["kind"] == "grid":
            p = p.with_budgets([f"power_W <= {r['power_W <=']}"]).with_objective(r["objective"])
        ref = solve(p)
        assert r["status"] == ref.status and r["objective_value"] == pytest.approx(ref.objective, rel=1e-9)
        assert r["bound"] == pytest.approx(ref.bound, rel=1e-9)
        a = p.assess(p.parse_design(read_record(tmp_path / "out" / r["record"]).design))  # the row's design
        assert all(r[f"design.{k}"] == v for k, v in a.design.items() if not isinstance(v, list))
        for k in ("tokens_per_s", "tpot_s", "energy_per_token_J", "system_power_W"):
            assert r[k] == pytest.approx(a.metrics[k], rel=1e-12)
    saved = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert saved["solved"] == 5 and saved["mode"] == "process"


def test_a_rerun_skips_finished_points(sweep, tmp_path):
    with Executor(0) as ex:
        run_sweep(sweep, tmp_path / "out", ex)
        again = run_sweep(sweep, tmp_path / "out", ex)
    assert (again.skipped, again.solved) == (5, 0)
    assert pq.read_table(tmp_path / "out" / "results.parquet").num_rows == 5
    assert len((tmp_path / "out" / "journal.jsonl").read_text().splitlines()) == 5


def test_ctrl_c_keeps_what_finished_and_a_rerun_solves_the_rest(sweep, tmp_path):
    with Interrupted(after=3) as ex:
        first = run_sweep(sweep, tmp_path / "out", ex)
    assert first.interrupted and first.solved == 3
    assert pq.read_table(tmp_path / "out" / "results.parquet").num_rows == 3
    with Executor(0) as ex:
        second = run_sweep(sweep, tmp_path / "out", ex)
    assert (second.skipped, second.solved, second.interrupted) == (3, 2, False)


def test_a_failed_point_runs_again(sweep, tmp_path):
    with FailsFirst(0) as ex:
        first = run_sweep(sweep, tmp_path / "out", ex)
    assert first.failed == 1 and first.solved == 4 and first.statuses == {"failed": 1, "optimal": 4}
    assert first.failures[0]["error_kind"] == "crash" and first.failures[0]["point"] == sweep.points[0].id
    with Executor(0) as ex:
        second = run_sweep(sweep, tmp_path / "out", ex)
    assert (second.skipped, second.solved, second.failed) == (4, 1, 0)


def test_the_tally():
    t = Tally(total=10, done=3, failed=1, started=time.monotonic() - 40)
    assert t.finished == 4 and t.eta == pytest.approx(60, rel=0.01)
    assert Tally(total=5).eta is None
