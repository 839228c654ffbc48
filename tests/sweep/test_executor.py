"""codesign.sweep.executor and codesign.sweep.job: jobs run in this process, on a local cluster
and on a real dask cluster (scheduler and workers as subprocesses); every outcome equals the
direct solve; a bad job is an outcome, not an exception; short jobs travel several to a dask task,
each returned once; a worker killed mid-sweep loses only its running point, which another worker
solves (each point solved once)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from codesign.errors import InputError
from codesign.kinds.registry import load
from codesign.proof.driver import solve
from codesign.proof.tolerances import AGREEMENT_RTOL
from codesign.sweep import executor
from codesign.sweep.executor import MAX_JOBS_PER_TASK, Executor, Job, cores, jobs_per_task, run_job
from codesign.sweep.run import run_sweep
from codesign.sweep.spec import load_sweep
from sweep.dask_cluster import DaskCluster

TINY = "tiny-3d-llama8b"


def direct(name: str, budgets=(), objective=None, solver="highs"):
    return solve(load(name).with_budgets(list(budgets)).with_objective(objective), solver=solver)


def jobs(budgets=(60, 80, 120)) -> list[Job]:
    data = load(TINY).data
    return [Job(key=f"p{b}", instance=data, source=TINY, budgets=(f"power_W <= {b}",)) for b in budgets]


def test_in_this_process_each_outcome_is_the_direct_solve():
    with Executor(0) as ex:
        assert ex.mode == "process" and ex.client is None and ex.solver_threads == cores()
        outs = list(ex.map(jobs()))
    assert [o.job.key for o in outs] == ["p60", "p80", "p120"]  # in order, here
    for o, b in zip(outs, (60, 80, 120), strict=True):
        assert o.ok and o.worker is None and o.seconds > 0
        ref = direct(TINY, [f"power_W <= {b}"])
        assert o.record["status"] == ref.status
        assert o.record["objective"] == pytest.approx(ref.objective, rel=1e-9)
        assert o.record["instance_hash"] == ref.instance_hash


def test_a_bad_job_is_an_outcome_not_an_exception():
    data = load(TINY).data
    bad_budget = run_job(Job(key="a", instance=data, budgets=("frobs <= 3",)))
    assert not bad_budget.ok and bad_budget.error_kind == "input" and "frobs" in bad_budget.error
    other_cal = run_job(Job(key="b", instance=data, calibration_sha256="0" * 64))
    assert other_cal.error_kind == "input" and "another calibration" in other_cal.error
    by_name = run_job(Job(key="c", instance=TINY, objective="energy_per_token_J"))
    assert by_name.ok and by_name.record["objective_metric"] == "energy_per_token_J"
    bad_objective = run_job(Job(key="d", instance="tiny-pf-mapping", objective="tpot_s"))
    assert bad_objective.error_kind == "input" and "not an objective of mapping instances" in bad_objective.error


def test_arguments_are_checked():
    with pytest.raises(InputError, match="number of workers"):
        Executor(-1)
    with pytest.raises(InputError, match="--workers sizes the local cluster"):
        Executor(2, scheduler="tcp://127.0.0.1:1")
    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(InputError, match="cannot reach the dask scheduler") as info:
        Executor(scheduler=f"tcp://127.0.0.1:{port}", connect_timeout=1).__enter__()
    assert info.value.key == "--scheduler"


@pytest.mark.parametrize("address", ["", " ", "foo", "tcp://", "tcp://-1", "inproc://nowhere", "tls://127.0.0.1:1",
                                     "udp://127.0.0.1:8786", "tcp://localhost:99999", "tcp://a b:1",
                                     "tcp://" + "x" * 300 + ":1"])
def test_a_malformed_scheduler_address_is_refused_before_dask_sees_it(cli, tmp_path, address):
    """--scheduler '' ran a local cluster (exit 0); 'foo', 'tcp://' or 'tls://...' reached dask,
    whose half-started client waited 20 s at exit and printed a traceback (found by fuzz_cli)."""
    with pytest.raises(InputError) as info:
        Executor(scheduler=address)
    assert info.value.key == "--scheduler" and "tcp://HOST:PORT" in str(info.value)
    spec = tmp_path / "s.toml"
    spec.write_text('instances = ["tiny-3d-llama8b"]\n')
    r = cli("sweep", spec, "--scheduler", address, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "--scheduler" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_more_local_workers_than_a_few_per_core_are_refused_before_any_start(cli):
    """--workers 10**6 started a million worker processes (sweep and sensitivity alike): refused
    with the bound, nothing started."""
    most = max(8, executor.WORKERS_PER_CORE * cores())
    Executor(most)  # the most allowed (nothing starts before __enter__)
    with pytest.raises(InputError, match="per core") as info:
        Executor(most + 1)
    assert info.value.key == "--workers" and str(most) in str(info.value)
    r = cli("sensitivity", "tiny-3d-llama8b", "--vary", "power_W <= 30..40 step 10", "--workers", "1000000")
    assert r.exit_code == 2 and "per core" in r.stderr


def test_a_local_cluster_solves_what_the_driver_solves():
    with Executor(1) as ex:
        assert ex.mode == "local" and ex.worker_count() == 1 and ex.solver_threads == cores()
        assert ex.dashboard.startswith("http://127.0.0.1:")
        outs = {o.job.key: o for o in ex.map(jobs((60, 120)))}
    assert ex.client is None and ex.cluster is None  # stopped
    for b in (60, 120):
        o = outs[f"p{b}"]
        assert o.ok and o.worker.startswith("tcp://127.0.0.1:")
        assert o.record["objective"] == pytest.approx(direct(TINY, [f"power_W <= {b}"]).objective, rel=1e-9)


def test_jobs_per_task_fill_the_target_time():
    assert jobs_per_task(0.0, 0) == 1  # nothing known yet: one job a task
    assert jobs_per_task(10.0, 5) == 1  # 2 s jobs: one a task
    assert jobs_per_task(1.0, 100) == int(executor.TASK_TARGET_S / 0.01)
    assert jobs_per_task(1e-6, 1000) == MAX_JOBS_PER_TASK


def test_short_jobs_travel_several_to_a_task_and_each_outcome_comes_once(monkeypatch):
    monkeypatch.setattr(executor, "TASK_TARGET_S", 1e6)  # once a job has finished: as many as allowed
    budgets = (60, 65, 70, 75, 80, 85, 90, 100, 110, 120)
    big = {f"p{b}" for b in budgets[4:]}  # 4 one-job tasks fill the window; the 5th carries the rest
    with Executor(1) as ex:
        outcomes = ex.map(jobs(budgets))
        got = []
        for o in outcomes:
            got.append(o)
            if o.job.key in big:
                break
        outcomes.close()  # the caller stops (Ctrl-C) between two outcomes of that task
        rest = ex.undelivered()
        assert ex.tasks == 5 and ex.undelivered() == []
    assert sorted(o.job.key for o in rest) == sorted(big - {got[-1].job.key})
    assert len({o.job.key for o in got + rest}) == len(got + rest) and all(o.ok for o in got + rest)


def test_a_killed_worker_loses_only_its_running_point(tmp_path):
    # CP-SAT with one thread takes about a second per point here: the kill lands mid-solve
    spec = tmp_path / "spec.toml"
    budgets = [60, 70, 80, 90, 100, 110, 120, 140]
    spec.write_text(f'instances = ["{TINY}"]\nsolver = "cpsat"\nthreads = 1\n[grid]\n"power_W <=" = {budgets}\n')
    sweep = load_sweep(spec)
    killed: dict[str, list[str]] = {}
    with DaskCluster(tmp_path, workers=2) as cluster:
        def kill_w1_while_it_solves() -> None:
            with cluster.client() as c:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    names = {a: w.get("name") for a, w in c.scheduler_info()["workers"].items()}
                    for address, keys in c.processing().items():
                        if names.get(address) == "w1" and keys:
                            cluster.workers["w1"].kill()
                            killed["keys"] = [str(k) for k in keys]
                            killed["address"] = [address]
                            return
                    time.sleep(0.01)

        killer = threading.Thread(target=kill_w1_while_it_solves)
        killer.start()
        with Executor(scheduler=cluster.address) as ex:
            summary = run_sweep(sweep, tmp_path / "out", ex)
        killer.join()
        assert cluster.workers["w1"].poll() is not None and cluster.workers["w0"].poll() is None
    assert killed.get("keys"), "w1 was never seen solving a point"
    assert summary.failed == 0 and summary.solved == len(budgets), summary.failures
    # every point solved once: one journal line each, all of them results
    entries = [json.loads(line) for line in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]
    assert sorted(e["point"] for e in entries) == sorted(p.id for p in sweep.points)
    assert {e["status"] for e in entries} == {"optimal"}
    by_id = {e["point"]: e for e in entries}
    for key in killed["keys"]:  # the killed worker's points were solved by the other one
        assert by_id[key.removeprefix("codesign-point-")]["worker"] not in killed["address"]
    for p in sweep.points:
        ref = direct(TINY, p.job.budgets)
        assert by_id[p.id]["objective_value"] == pytest.approx(ref.objective, rel=AGREEMENT_RTOL)
