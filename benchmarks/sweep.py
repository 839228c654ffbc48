"""Three 240-point sweeps, each solved four ways: each point's solve by the driver in a plain loop,
the sweep in this process (``--workers 0``), on a local dask cluster of 1 worker and of 2 workers.

Every point is a proven solve through :func:`codesign.proof.driver.solve`; every way must give
every point the same status and objective (to 1e-9 relative), or the script exits 1. The SPECs
(kept in the results):

- ``3d``: three 3D-stacked instances x two objectives x ten power budgets x four clock caps
  (points of 10-200 ms);
- ``3d-large``: the same axes on the three larger 3D-stacked instances (DeepSeek-V3 with expert
  parallelism, Qwen3-235B, a multi-workload mix: points of 0.05-0.5 s, the cost of realistic
  studies);
- ``catalog``: a slice of a catalog study, ``dgx-llama70b-chip-choice`` with six catalog chips x
  five models x two objectives x four system power budgets (a quarter infeasible, most of those
  proved so by the presolve): the points the docs' 10^5-point estimate is made of.

Every solve gets one solver thread, so the speed-up is that of solving points side by side, not of
a solver's threads.

Measured per run: the wall time of the sweep (the cluster's start and stop are timed apart), the
1-minute load average before and after, the CPU seconds of this process (the client, which on a
local cluster also hosts the scheduler), of its worker processes and of everything else on the
machine (other jobs share the cores: a run they took a core from says so), the dask tasks the
points travelled in, and on a cluster the time of 2,000 empty tasks after the sweep (dask's own
cost per task). Derived: the overhead per
point of the sweep machinery (in process: records, journal, tables; on dask: the same plus
scheduling and transfer) against the plain loop, the speed-up of 2 workers over 1, and points per
worker-hour. Runs are interleaved (loop, in process, 1 worker, 2 workers, then again); the
figures are derived from the median of the repeats and from the best run of each way (the least
disturbed by other jobs on a shared machine).

    python benchmarks/sweep.py [--repeats 3] [--out benchmarks/results/sweep.json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # (a dependency of dask.distributed)
from common import RESULTS, load, machine

from codesign.jsonio import write_json_atomic
from codesign.proof.driver import solve
from codesign.sweep.executor import Executor, cores
from codesign.sweep.run import run_sweep
from codesign.sweep.spec import load_sweep
from codesign.sweep.store import Store

OUT = RESULTS / "sweep.json"
SPECS = {
    "3d": """\
instances = ["tiny-3d-llama8b", "small-3d-llama8b", "deepstack-llama70b-decode"]
objectives = ["tokens_per_s", "energy_per_token_J"]
threads = 1

[grid]
"power_W <=" = [40, 50, 60, 70, 80, 90, 100, 120, 140, 160]
"clock_GHz <=" = [1.2, 1.5, 2.0, 2.5]
""",
    "3d-large": """\
instances = ["deepstack-qwen3-235b", "deepstack-deepseek-v3-ep", "deepstack-multi-workload"]
objectives = ["tokens_per_s", "energy_per_token_J"]
threads = 1

[grid]
"power_W <=" = [40, 50, 60, 70, 80, 90, 100, 120, 140, 160]
"clock_GHz <=" = [1.2, 1.5, 2.0, 2.5]
""",
    "catalog": """\
instances = ["dgx-llama70b-chip-choice"]
objectives = ["tokens_per_s", "energy_per_token_J"]
threads = 1

[grid]
"system_power_W <=" = [4000, 6000, 8000, 10000]

[substitute]
chip = ["a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x", "l40s"]
workload = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "mixtral-8x7b", "qwen3-235b-a22b"]
""",
}
MODES = (("loop", None), ("in process", 0), ("1 worker", 1), ("2 workers", 2))
RTOL = 1e-9
#: empty tasks timed on each cluster after its sweep: dask's own cost per task
NOOP_TASKS = 2000


class CPU:
    """CPU seconds spent between :meth:`start` and :meth:`stop`: by this process, by its children
    (the local cluster's workers; children that ended before ``stop`` are not counted, so stop
    before closing the cluster) and by the rest of the machine."""

    def __init__(self):
        self.me = psutil.Process()

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)

    def _children(self) -> dict[int, float]:
        out = {}
        for c in self.me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                out[c.pid] = sum(c.cpu_times()[:2])
        return out

    def start(self) -> None:
        self.t0, self.kids0, self.busy0 = sum(self.me.cpu_times()[:2]), self._children(), self._busy()

    def stop(self) -> dict[str, float]:
        me, kids, busy = sum(self.me.cpu_times()[:2]), self._children(), self._busy()
        client = me - self.t0
        workers = sum(v - self.kids0.get(pid, 0.0) for pid, v in kids.items())
        return {"client_s": client, "workers_s": workers, "others_s": max(0.0, busy - self.busy0 - client - workers)}


def loop(sweep) -> tuple[float, dict[str, tuple[str, float | None]]]:
    """Each point's solve by the driver, one after another: no records, no journal, no tables."""
    t0 = time.perf_counter()
    out = {}
    for p in sweep.points:
        sol = solve(p.job.problem(), solver=p.job.solver, threads=sweep.file.threads)
        out[p.id] = (sol.status, sol.objective)
    return time.perf_counter() - t0, out


def swept(sweep, workers: int, directory: Path) -> dict:
    """The sweep on ``workers`` local workers (0: in this process) into a fresh directory."""
    shutil.rmtree(directory, ignore_errors=True)
    t0 = time.perf_counter()
    ex = Executor(workers, solver_threads=sweep.file.threads)
    ex.__enter__()
    started = time.perf_counter()
    noop_s = None
    cpu = CPU()
    cpu.start()
    try:
        summary = run_sweep(sweep, directory, ex)
        ended = time.perf_counter()
        cpu_s = cpu.stop()
        if ex.client is not None:  # dask's own cost of a task: NOOP_TASKS empty ones at once
            t1 = time.perf_counter()
            ex.client.gather(ex.client.map(abs, range(NOOP_TASKS), pure=False))
            noop_s = (time.perf_counter() - t1) / NOOP_TASKS
    finally:
        closing = time.perf_counter()
        ex.close()
    stopped = time.perf_counter()
    entries = Store(directory).entries()
    sizes = {"points_bytes": sum(f.stat().st_size for f in (directory / "points").rglob("*") if f.is_file()),
             "files": sum(1 for f in (directory / "points").rglob("*") if f.is_file()),
             "journal_bytes": (directory / "journal.jsonl").stat().st_size,
             "parquet_bytes": (directory / "results.parquet").stat().st_size,
             "csv_bytes": (directory / "results.csv").stat().st_size}
    results = {k: (e["status"], e.get("objective_value")) for k, e in entries.items()}
    assert summary.solved == len(sweep.points) and summary.failed == 0, summary.failures
    return {"wall_s": ended - started, "start_s": started - t0, "stop_s": stopped - closing, "noop_task_s": noop_s,
            "cpu_s": cpu_s, "tasks": ex.tasks if ex.mode != "process" else None,
            "statuses": list(results.values()),
            "solve_s_sum": sum(e["time_s"] for e in entries.values()), "save_s": summary.save_s, "disk": sizes,
            "results": results}


def tables_at_scale(sweep, directory: Path, rows: int = 100_000) -> dict:
    """The time to write the results tables of a ``rows``-point study: the sweep's finished entries
    repeated under other ids (the client rewrites the tables during a long run)."""
    entries = Store(directory).entries()
    points, big = [], {}
    for i in range(rows):
        p = sweep.points[i % len(sweep.points)]
        q = dataclasses.replace(p, id=f"{p.id}-{i}")
        points.append(q)
        big[q.id] = {**entries[p.id], "point": q.id}
    scaled = dataclasses.replace(sweep, points=points)
    store = Store(directory / "scale")
    t0 = time.perf_counter()
    store.write_tables(scaled, big)
    return {"rows": rows, "seconds": time.perf_counter() - t0, "parquet_bytes": store.parquet.stat().st_size,
            "csv_bytes": store.csv.stat().st_size}


def agree(a: dict, b: dict) -> bool:
    def same(x, y):
        return x[0] == y[0] and (x[1] == y[1] or (x[1] is not None and y[1] is not None
                                                   and abs(x[1] - y[1]) <= RTOL * max(abs(x[1]), abs(y[1]))))

    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


def measure(name: str, sweep, work: Path, repeats: int) -> tuple[list[dict], bool]:
    """Every mode ``repeats`` times, interleaved; whether every run gave the same results."""
    runs: list[dict] = []
    reference = None
    ok = True
    n = len(sweep.points)
    for rep in range(repeats):
        for mode, workers in MODES:
            before = load()
            if workers is None:
                cpu = CPU()
                cpu.start()
                wall, results = loop(sweep)
                run = {"wall_s": wall, "results": results, "cpu_s": cpu.stop()}
            else:
                run = swept(sweep, workers, work / f"out-{name}-{workers}")
            results = run.pop("results")
            reference = reference or results
            same = agree(reference, results)
            ok = ok and same
            run.update({"mode": mode, "workers": workers, "repeat": rep, "loadavg_before": before,
                        "loadavg_after": load(), "agrees": same})
            runs.append(run)
            c = run["cpu_s"]
            print(f"{name:>8} {mode:>10}: {run['wall_s']:.2f} s for {n} points (load {before:.2f} -> "
                  f"{run['loadavg_after']:.2f}; CPU s: client {c['client_s']:.1f}, workers {c['workers_s']:.1f}, "
                  f"others {c['others_s']:.1f}){'' if same else '  RESULTS DIFFER'}", flush=True)
    return runs, ok


def derived(n: int, seq: float, inproc: float, one: float, two: float) -> dict:
    """Wall times of the four ways -> overhead per point (extra worker-seconds over the loop),
    speed-ups, points per worker-hour."""
    return {
        "loop_s": seq, "in_process_s": inproc, "one_worker_s": one, "two_workers_s": two,
        "overhead_per_point_s": {"in process": (inproc - seq) / n, "1 worker": (one - seq) / n,
                                 "2 workers": (2 * two - seq) / n},
        "speedup_2_over_1": one / two, "speedup_2_over_loop": seq / two,
        "points_per_worker_hour": n / one * 3600,
    }


def _span_of(values: list[float]) -> list[float]:
    return [min(values), max(values)]


def summarise(sweep, runs: list[dict], ok: bool) -> dict:
    """The median of the repeats, and the best (the least disturbed by other jobs: each way's
    shortest run)."""
    n = len(sweep.points)

    def med(mode: str, key: str = "wall_s") -> float:
        return statistics.median(r[key] for r in runs if r["mode"] == mode)

    def best(mode: str) -> float:
        return min(r["wall_s"] for r in runs if r["mode"] == mode)

    modes = [m for m, _ in MODES]
    first = next(r for r in runs if r["mode"] == "in process")
    return {
        "points": n, "solver_threads": sweep.file.threads, "cores": cores(),
        "median": derived(n, *(med(m) for m in modes)),
        "best": derived(n, *(best(m) for m in modes)),
        "cluster_start_s": {"1 worker": med("1 worker", "start_s"), "2 workers": med("2 workers", "start_s")},
        "cluster_stop_s": {"1 worker": med("1 worker", "stop_s"), "2 workers": med("2 workers", "stop_s")},
        "solve_s_per_point": med("in process", "solve_s_sum") / n,
        "save_s_per_point": med("in process", "save_s") / n,
        "noop_task_s": {"1 worker": med("1 worker", "noop_task_s"), "2 workers": med("2 workers", "noop_task_s")},
        "statuses": dict(sorted(Counter(s for s, _ in first["statuses"]).items())),
        "disk_per_point_bytes": {k: v / n for k, v in first["disk"].items()},
        "loadavg_range": [min(r["loadavg_before"] for r in runs), max(r["loadavg_after"] for r in runs)],
        "cpu_s_per_point": {m: {k: statistics.median(r["cpu_s"][k] for r in runs if r["mode"] == m) / n
                                for k in ("client_s", "workers_s", "others_s")} for m in modes},
        "others_cores": {m: _span_of([r["cpu_s"]["others_s"] / r["wall_s"] for r in runs if r["mode"] == m])
                         for m in modes},
        "points_per_task": {m: n / med(m, "tasks") for m in ("1 worker", "2 workers")},
        "all_agree": ok,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=list(SPECS), help="one of the sweeps")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="codesign-sweep-bench-"))
    t_all = time.perf_counter()
    out = {"machine": machine(), "command": "python benchmarks/sweep.py " + " ".join(sys.argv[1:]),
           "repeats": args.repeats, "sweeps": {}}
    ok = True
    try:
        for name, text in SPECS.items():
            if args.only and name != args.only:
                continue
            spec = work / f"{name}.toml"
            spec.write_text(text)
            sweep = load_sweep(spec)
            runs, same = measure(name, sweep, work, args.repeats)
            ok = ok and same
            summary = summarise(sweep, runs, same)
            summary["tables_at_scale"] = tables_at_scale(sweep, work / f"out-{name}-0")
            for r in runs:
                r.pop("statuses", None)
            out["sweeps"][name] = {"spec": text, "summary": summary, "runs": runs}
            for k in ("median", "best"):
                d = summary[k]
                print(f"{name} ({k}): speed-up 2 workers / 1 worker {d['speedup_2_over_1']:.2f}x; overhead per "
                      f"point on 1 worker {1e3 * d['overhead_per_point_s']['1 worker']:.1f} ms", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["wall_s"] = time.perf_counter() - t_all
    write_json_atomic(args.out, out)
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
