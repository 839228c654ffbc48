"""codesign.cli.sweep: ``codesign sweep SPEC`` through a running dask scheduler (started here as
subprocesses), on a local cluster and in this process; its results equal direct solves, a rerun
skips finished points, Ctrl-C (SIGINT to the process group, as a terminal sends it) exits 130 and
keeps what finished, a bad SPEC exits 2 naming file, key and value."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sweep.dask_cluster import DaskCluster

from codesign.cli.sweep import exit_code, progress_line
from codesign.kinds.registry import load
from codesign.model.calibration import shipped_path
from codesign.proof.driver import solve
from codesign.sweep.run import Summary, Tally

SPEC = """
instances = ["tiny-3d-llama8b", "tiny-placement-mixtral"]
objectives = ["tokens_per_s", "energy_per_token_J"]
[grid]
"power_W <=" = [60, 120]
"""


def write(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def assert_equal_to_direct_solves(parquet: Path) -> None:
    rows = pq.read_table(parquet).to_pylist()
    assert len(rows) == 5
    for r in rows:
        p = load(r["instance"])
        if r["kind"] == "grid":
            p = p.with_budgets([f"power_W <= {r['power_W <=']}"]).with_objective(r["objective"])
        ref = solve(p)
        assert (r["status"], r["objective"]) == (ref.status, ref.objective_metric)
        assert r["objective_value"] == pytest.approx(ref.objective, rel=1e-9)


def test_sweep_through_a_running_dask_scheduler(tmp_path, cli):
    spec = write(tmp_path)
    out = tmp_path / "out"
    with DaskCluster(tmp_path, workers=1) as cluster:
        r = cli("sweep", spec, "--scheduler", cluster.address, "--out", out, "--json")
        assert r.exit_code == 0, (r.stdout, r.stderr, cluster.log("w0"))
        summary = json.loads(r.stdout)
        assert summary["mode"] == "cluster" and summary["scheduler"] == cluster.address and summary["workers"] == 1
        assert (summary["points"], summary["solved"], summary["failed"]) == (5, 5, 0)
        assert f"dask scheduler {cluster.address}: 1 workers now" in r.stderr and "dashboard http://" in r.stderr
        again = json.loads(cli("sweep", spec, "--scheduler", cluster.address, "--out", out, "--json").stdout)
        assert (again["skipped"], again["solved"]) == (5, 0)
    assert_equal_to_direct_solves(out / "results.parquet")
    assert (out / "results.csv").read_text().count("\n") == 6


def test_sweep_on_a_local_cluster(tmp_path, cli):
    spec = write(tmp_path, 'instances = ["tiny-3d-llama8b"]\n[grid]\n"power_W <=" = [60, 120]\n')
    r = cli("sweep", spec, "--workers", "1")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "local dask cluster tcp://127.0.0.1:" in r.stderr and "1 workers" in r.stderr
    assert "dashboard http://127.0.0.1:" in r.stderr
    assert "2 points: 2 solved now, 0 finished before, 0 failed, 0 invalid" in r.stdout
    assert (tmp_path / "spec-sweep" / "results.parquet").is_file()  # the default --out


def test_sweep_in_this_process_and_its_records_recheck(tmp_path, cli):
    spec = write(tmp_path)
    r = cli("sweep", spec, "--workers", "0", "--out", tmp_path / "out")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "in this process" in r.stderr
    assert "5 points: 5 solved now" in r.stdout and "statuses: optimal 5" in r.stdout
    rows = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    checked = cli("check-solution", tmp_path / "out" / rows[0]["record"], "--no-prove", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"] is True
    quiet = cli("sweep", spec, "--workers", "0", "--out", tmp_path / "out", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == "" and "5 finished before" in quiet.stdout


def test_bad_specs_and_options_exit_2(tmp_path, cli, input_error):
    spec = write(tmp_path, 'instances = ["tiny-3d-llama8b"]\n[substitute]\nchip = ["h100"]\n')
    input_error(cli("sweep", spec, "--workers", "0"), str(spec), "substitute.chip[0]", "'h100'", "h100-sxm")
    good = write(tmp_path, 'instances = ["tiny-3d-llama8b"]\n')
    input_error(cli("sweep", good, "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"), "--workers")
    input_error(cli("sweep", tmp_path / "missing.toml"), "missing.toml", "not found")
    (tmp_path / "file").write_text("")
    input_error(cli("sweep", good, "--workers", "0", "--out", tmp_path / "file"), "--out", "a directory")


def test_ctrl_c_exits_130_and_keeps_what_finished(tmp_path, cli):
    # CP-SAT with one thread: about a second per point, so SIGINT lands mid-sweep
    spec = write(tmp_path, 'instances = ["tiny-3d-llama8b"]\nsolver = "cpsat"\nthreads = 1\n'
                           '[grid]\n"power_W <=" = [60, 70, 80, 90, 100, 110, 120, 130]\n')
    out = tmp_path / "out"
    journal = out / "journal.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "codesign", "sweep", str(spec), "--workers", "0", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not (journal.is_file() and journal.read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted" in stdout and "run the same command again" in stdout and "Traceback" not in stderr
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    kept = sum(e["status"] == "optimal" for e in lines)  # (the point Ctrl-C stopped is a failed line)
    assert 1 <= kept < 8 and all(e["status"] in ("optimal", "failed") for e in lines)
    assert pq.read_table(out / "results.parquet").num_rows == len(lines)
    r = cli("sweep", spec, "--workers", "0", "--out", out, "--json")
    assert r.exit_code == 0
    assert (json.loads(r.stdout)["skipped"], json.loads(r.stdout)["solved"]) == (kept, 8 - kept)


def test_the_progress_line_and_the_exit_codes():
    t = Tally(total=200, skipped=40, done=36, failed=1, running=2, workers=2, started=time.monotonic() - 10)
    line = progress_line(t)
    assert line.startswith("36/200 done (40 finished before), 1 failed, 2 running (2 workers), 3.7 points/s, ETA ")
    base = dict(spec="s", out="o", results={}, points=1, skipped=0, solved=1, failed=0, invalid=0, statuses={},
                interrupted=False, wall_s=1.0, save_s=0.1, mode="process", workers=0, solver_threads=1, scheduler=None,
                dashboard=None, failures=[])
    assert exit_code(Summary(**base)) == 0
    assert exit_code(Summary(**{**base, "failed": 1, "failures": [{"error_kind": "crash"}]})) == 1
    assert exit_code(Summary(**{**base, "failed": 1, "failures": [{"error_kind": "check"}]})) == 3
    assert exit_code(Summary(**{**base, "interrupted": True})) == 130


def test_a_sweep_under_another_calibration(tmp_path, cli):
    mine = tmp_path / "mine.toml"
    mine.write_text(shipped_path().read_text() + "\n# a copy\n")
    spec = write(tmp_path, 'instances = ["tiny-3d-llama8b"]\n')
    r = cli("sweep", spec, "--workers", "0", "--calibration", mine, "--out", tmp_path / "out", "--json")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    row = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()[0]
    record = json.loads((tmp_path / "out" / row["record"]).read_text())
    assert record["calibration"] == str(mine.resolve())
    shipped = json.loads(cli("sweep", spec, "--workers", "0", "--out", tmp_path / "out", "--json").stdout)
    assert (shipped["skipped"], shipped["solved"]) == (0, 1)  # another calibration: another point
