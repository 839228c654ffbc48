"""Running a sweep: the SPEC's points that are not finished go to the executor, each outcome is
saved as it arrives (on a few threads: a save waits on the disk), and the tables are written at the
end (also after Ctrl-C, once every outcome received is saved).

:func:`run_sweep` is what ``codesign sweep`` calls; it returns a :class:`Summary` (also written to
``DIR/sweep.json``). Progress is reported through a callback receiving a :class:`Tally` about once
a second, whether or not a point finished.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codesign import __version__
from codesign.sweep.executor import Executor
from codesign.sweep.job import Outcome
from codesign.sweep.spec import Point, Sweep
from codesign.sweep.store import FAILED, INVALID, TABLES_EVERY_S, Store, invalid_entry

#: seconds between two progress reports
TICK_S = 1.0
#: threads saving outcomes: a save waits on two fsyncs (the record, its ledger), so several overlap
SAVERS = 8


@dataclass
class Tally:
    """Where a run is: points to solve in this run, done (with a result), failed, running."""

    total: int
    skipped: int = 0
    invalid: int = 0
    done: int = 0
    failed: int = 0
    running: int = 0
    workers: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta(self) -> float | None:
        """Seconds left at this run's rate so far (None before the first point ends)."""
        if self.finished == 0:
            return None
        return self.elapsed / self.finished * (self.total - self.finished)


@dataclass
class Summary:
    """What a run did (``sweep --json`` prints it; ``DIR/sweep.json`` keeps it). ``save_s`` is
    the time spent saving outcomes, summed over the saving threads."""

    spec: str
    out: str
    results: dict[str, str]
    points: int
    skipped: int
    solved: int
    failed: int
    invalid: int
    statuses: dict[str, int]
    interrupted: bool
    wall_s: float
    save_s: float
    mode: str
    workers: int
    solver_threads: int | None
    scheduler: str | None
    dashboard: str | None
    failures: list[dict[str, Any]]
    codesign_version: str = __version__

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Saver:
    """Saves outcomes (:meth:`Store.put`) on :data:`SAVERS` threads, so the client keeps up with a
    large cluster; the caller takes the saved entries back with :meth:`collect`."""

    def __init__(self, store: Store):
        self.store = store
        self.pool = ThreadPoolExecutor(SAVERS, thread_name_prefix="sweep-save")
        self.pending: dict[Future, tuple[Point, Outcome]] = {}
        self.seconds = 0.0  # summed over the threads

    def _put(self, point: Point, outcome: Outcome) -> tuple[dict[str, Any], float]:
        t0 = time.perf_counter()
        entry = self.store.put(point, outcome)
        return entry, time.perf_counter() - t0

    def submit(self, point: Point, outcome: Outcome) -> None:
        self.pending[self.pool.submit(self._put, point, outcome)] = (point, outcome)

    def collect(self, *, block: bool = False) -> list[tuple[Point, Outcome, dict[str, Any]]]:
        """The saves that ended (``block``: all of them; else, when too many are queued, at least
        one). A save that failed (a full disk) raises here."""
        if not self.pending:
            return []
        if block:
            ended, _ = wait(self.pending, return_when=ALL_COMPLETED)
        elif len(self.pending) > 4 * SAVERS:
            ended, _ = wait(self.pending, return_when=FIRST_COMPLETED)
        else:
            ended = {f for f in self.pending if f.done()}
        out = []
        for f in ended:
            point, outcome = self.pending.pop(f)
            entry, seconds = f.result()
            self.seconds += seconds
            out.append((point, outcome, entry))
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def run_sweep(sweep: Sweep, out: str | Path, executor: Executor, *,
              progress: Callable[[Tally], None] | None = None) -> Summary:
    """Solve every point of ``sweep`` not finished in ``out`` on ``executor`` (started: inside its
    ``with`` block); save each outcome as it arrives; write the tables and the summary, also when
    Ctrl-C ends the run (then ``Summary.interrupted``)."""
    store = Store(out)
    t0 = time.perf_counter()
    known = store.entries()
    entries: dict[str, dict[str, Any]] = {}
    todo: list[Point] = []
    tally = Tally(total=0)
    for p in sweep.points:
        if p.invalid is not None:
            entries[p.id] = invalid_entry(p)
            tally.invalid += 1
        elif (e := store.finished(p, known.get(p.id))) is not None:
            entries[p.id] = e
            tally.skipped += 1
        else:
            todo.append(p)
    tally.total = len(todo)
    by_key = {p.id: p for p in todo}
    jobs = (dataclasses.replace(p.job, threads=executor.solver_threads) for p in todo if p.job is not None)
    failures: list[dict[str, Any]] = []
    interrupted = False
    stop = threading.Event()
    ticker = None
    if progress is not None:
        def tick() -> None:
            while not stop.wait(TICK_S):
                tally.running, tally.workers = executor.running, executor.worker_count()
                progress(tally)

        ticker = threading.Thread(target=tick, name="sweep-progress", daemon=True)
        ticker.start()
    last_tables, every = time.monotonic(), TABLES_EVERY_S
    saver = _Saver(store)

    def account(saved: list[tuple[Point, Outcome, dict[str, Any]]]) -> None:
        for point, outcome, entry in saved:
            entries[point.id] = entry
            if entry["status"] == FAILED:
                tally.failed += 1
                failures.append({"point": point.id, "instance": point.instance, "axes": point.axes,
                                 "error_kind": outcome.error_kind, "error": outcome.error})
            else:
                tally.done += 1

    try:
        for outcome in executor.map(jobs):
            saver.submit(by_key[outcome.job.key], outcome)
            account(saver.collect())
            if time.monotonic() - last_tables >= every:
                t_tables = time.monotonic()
                store.write_tables(sweep, entries)
                last_tables = time.monotonic()
                every = max(TABLES_EVERY_S, 10 * (last_tables - t_tables))  # at most a tenth of the time
    except KeyboardInterrupt:
        interrupted = True
        for outcome in executor.undelivered():  # (solved in a task whose other outcomes arrived)
            saver.submit(by_key[outcome.job.key], outcome)
    finally:
        try:
            account(saver.collect(block=True))  # what finished is saved before anything stops
        finally:
            saver.close()
            stop.set()
            if ticker is not None:
                ticker.join()
        store.write_tables(sweep, entries)
    statuses = Counter(e["status"] for e in entries.values())
    workers = executor.workers if executor.mode != "cluster" else executor.worker_count()
    summary = Summary(
        spec=str(sweep.path), out=str(store.out), results={"parquet": str(store.parquet), "csv": str(store.csv)},
        points=len(sweep.points), skipped=tally.skipped, solved=tally.done, failed=tally.failed,
        invalid=tally.invalid, statuses=dict(sorted(statuses.items())), interrupted=interrupted,
        wall_s=time.perf_counter() - t0, save_s=saver.seconds, mode=executor.mode, workers=workers,
        solver_threads=executor.solver_threads, scheduler=executor.address, dashboard=executor.dashboard,
        failures=failures)
    store.write_summary(summary.as_dict())
    return summary


__all__ = ["FAILED", "INVALID", "Summary", "Tally", "run_sweep"]
