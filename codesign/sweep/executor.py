"""Independent proven solves in parallel: a list of point jobs in, their solution records out.

A :class:`Job` is a picklable description of one solve (the instance's content or name, the
calibration file and its digest, ``--budget`` expressions, an objective, the solver and its
limits). :func:`run_job` turns it into a :class:`~codesign.proof.records.Solution` through the one
solve driver (:func:`codesign.proof.driver.solve`) and never raises for a bad point: the error is
the :class:`Outcome`. :class:`Executor` runs jobs

- on a dask.distributed ``LocalCluster`` (the default: one single-threaded worker process per
  core; each solve gets ``cores // workers`` solver threads, so workers x threads = cores),
- on an existing cluster (``scheduler="tcp://HOST:PORT"``: one solve per worker thread), or
- one after another in this process (``workers=0``: no dask at all),

and yields each :class:`Outcome` as it finishes. On dask, jobs travel in *tasks*: one job per
task while jobs take :data:`TASK_TARGET_S` or more, else as many as fill that time (the mean job
time so far decides; at most :data:`MAX_JOBS_PER_TASK`). Dask's own cost is a few milliseconds of
the scheduler's and the client's time per task (BENCHMARKS.md §6), as much as a 3D point's whole
solve, and on a small machine the client shares the cores with the workers. At most a window of
tasks (twice the cluster's threads, plus two) is submitted at a time, so a study of 10^5 points
holds a few futures, not 10^5. A worker that dies loses only the task it was running: the
scheduler runs it again on another worker (up to ``distributed.scheduler.allowed-failures`` times,
then its points fail with the dask ``KilledWorker`` error); at most :data:`TASK_TARGET_S` of
solving is redone. ``sweep`` uses it; so can any command whose solves are independent
(sensitivity).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from distributed import Client, LocalCluster, as_completed
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.diagnostics.plugin import WorkerPlugin

from codesign.errors import InputError
from codesign.proof.driver import cores
from codesign.sweep.job import Job, Outcome, run_job

#: seconds to wait for a scheduler given by address before calling it unreachable
CONNECT_TIMEOUT_S = 10
#: seconds between two refreshes of the cluster's thread count (a remote cluster grows and shrinks)
THREADS_REFRESH_S = 2.0
#: seconds of solving a dask task carries: jobs shorter than this travel several to a task
TASK_TARGET_S = 0.3
#: the most jobs one task carries
MAX_JOBS_PER_TASK = 64
#: local workers are processes: at most this many per core (and at least 8 are allowed)
WORKERS_PER_CORE = 4


def check_address(address: str) -> str:
    """A scheduler's address as ``tcp://HOST:PORT`` (or ``HOST:PORT``), else an InputError. Checked
    before dask sees it: a client dask could not start waits 20 s at exit and prints a traceback."""
    expected = "the address of a running `dask scheduler`: tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786"
    try:
        scheme, location = parse_address(address.strip())
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise InputError(f"not a scheduler address: {exc}", key="--scheduler", value=address, expected=expected) from None
    if scheme != "tcp":
        raise InputError(f"the {scheme!r} scheme is not supported", key="--scheduler", value=address, expected=expected)
    if not host or any(c.isspace() for c in host) or not 1 <= int(port) <= 65535:
        raise InputError("not a host and a port (1 to 65535)", key="--scheduler", value=address, expected=expected)
    try:  # a host name as DNS takes it (labels of at most 63 characters)
        host.encode("idna")
    except UnicodeError as exc:
        raise InputError(f"not a host name: {exc}", key="--scheduler", value=address, expected=expected) from None
    return f"tcp://{location}"



__all__ = ["Executor", "Job", "Outcome", "cores", "run_job", "run_jobs"]


def run_jobs(jobs: list[Job]) -> list[Outcome]:
    """One dask task: its jobs solved one after another (:func:`run_job`)."""
    return [run_job(job) for job in jobs]


def jobs_per_task(seconds: float, count: int) -> int:
    """How many jobs the next task carries, given ``count`` jobs finished in ``seconds`` (summed
    job times): one until a job has finished, then enough to fill :data:`TASK_TARGET_S`."""
    if count == 0 or seconds <= 0:
        return 1
    return max(1, min(MAX_JOBS_PER_TASK, int(TASK_TARGET_S / (seconds / count))))


class IgnoreInterrupt(WorkerPlugin):
    """Ctrl-C in a terminal reaches every process of its group: the local cluster's workers
    ignore it and leave it to the client, which keeps what finished and stops them (a worker
    would otherwise die with a traceback mid-solve)."""

    name = "codesign-ignore-interrupt"

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class Executor:
    """Where jobs run (module docstring); a context manager that starts and stops the cluster.

    Args:
        workers: local worker processes (None: one per core; 0: no dask, one job after another in
            this process). Not with ``scheduler``.
        scheduler: the address of a running dask scheduler (``tcp://HOST:PORT``).
        solver_threads: solver threads per job (None: ``cores // workers`` locally, the solver's
            own choice on a cluster given by address).
        connect_timeout: seconds to reach the scheduler given by address.
    """

    def __init__(self, workers: int | None = None, *, scheduler: str | None = None,
                 solver_threads: int | None = None, connect_timeout: float = CONNECT_TIMEOUT_S):
        if workers is not None and workers < 0:
            raise InputError("a number of workers", key="--workers", value=workers,
                             expected=">= 1, or 0 to solve in this process without dask")
        if workers is not None and workers > (most := max(8, WORKERS_PER_CORE * cores())):
            # each is a process: 10**6 of them would take the machine down, not solve faster
            raise InputError(f"more local workers than {WORKERS_PER_CORE} per core ({cores()} cores here)",
                             key="--workers", value=workers, expected=f"0 to {most}",
                             suggestion="a cluster of several machines: --scheduler ADDRESS")
        if scheduler is not None and workers is not None:
            raise InputError("--workers sizes the local cluster; a cluster given by --scheduler has its own",
                             key="--workers", value=workers, suggestion="leave out one of them")
        if solver_threads is not None and solver_threads < 0:
            raise InputError("threads is a count", key="threads", value=solver_threads,
                             expected=">= 1, or 0 for the solver's own choice")
        self.scheduler = None if scheduler is None else check_address(scheduler)
        self.connect_timeout = connect_timeout
        self.mode = "cluster" if scheduler else ("process" if workers == 0 else "local")
        self.workers = cores() if workers is None else workers
        if solver_threads is not None:
            self.solver_threads: int | None = solver_threads or None
        elif self.mode == "cluster":
            self.solver_threads = None
        else:
            self.solver_threads = max(1, cores() // max(self.workers, 1))
        self.client: Client | None = None
        self.cluster: LocalCluster | None = None
        self.address: str | None = None
        self.dashboard: str | None = None
        self._threads = 1
        self._threads_at = -float("inf")
        self._pending: dict[str, list[Job]] = {}  # task key -> its jobs (in this process: the job)
        self._futures: dict[str, Any] = {}
        self._ready: deque[Outcome] = deque()  # received from a task, not yet yielded
        self.job_seconds = 0.0  # summed over the outcomes received (sizes the tasks)
        self.jobs_done = 0
        self.tasks = 0  # dask tasks submitted

    # --- the cluster --------------------------------------------------------------------------------
    def __enter__(self) -> Executor:
        if self.mode == "local":
            self.cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                        host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                        silence_logs=logging.CRITICAL)
            self.client = Client(self.cluster, set_as_default=False)
            self.client.register_plugin(IgnoreInterrupt())
        elif self.mode == "cluster":
            try:
                self.client = Client(self.scheduler, timeout=self.connect_timeout, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise InputError(f"cannot reach the dask scheduler: {exc}", key="--scheduler", value=self.scheduler,
                                 expected="the address of a running `dask scheduler`, e.g. tcp://10.0.0.5:8786") from None
        if self.client is not None:
            self.address = self.client.scheduler.address
            self.dashboard = self.client.dashboard_link
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Cancel what is still submitted and stop the cluster this executor started."""
        client, cluster = self.client, self.cluster
        self.client = self.cluster = None
        if client is not None:
            try:
                if self._futures:
                    client.cancel(list(self._futures.values()), force=True)
            except Exception:  # (closing anyway)
                pass
            client.close(timeout=10)
        if cluster is not None:
            cluster.close(timeout=10)
        self._pending.clear()
        self._futures.clear()
        self._ready.clear()

    def threads(self) -> int:
        """Jobs that can run at once: the cluster's worker threads (1 in this process)."""
        if self.client is None:
            return 1
        now = time.monotonic()
        if now - self._threads_at >= THREADS_REFRESH_S:
            self._threads = max(1, sum(self.client.nthreads().values()))
            self._threads_at = now
        return self._threads

    def worker_count(self) -> int:
        """Workers connected now (this process: 1)."""
        return 1 if self.client is None else len(self.client.nthreads())

    @property
    def running(self) -> int:
        """Jobs being solved now (a task solves one at a time; tasks beyond the cluster's threads
        wait)."""
        return min(len(self._pending), self.threads()) if self.client is not None else len(self._pending)

    # --- running jobs -------------------------------------------------------------------------------
    def map(self, jobs: Iterable[Job]) -> Iterator[Outcome]:
        """Each job's outcome, in the order they finish. Ctrl-C here stops the run (the caller keeps
        what it received); in this process, Ctrl-C during a solve yields that job's interrupted
        outcome and then raises KeyboardInterrupt."""
        if self.client is None:
            if self.mode != "process":
                raise RuntimeError("Executor.map outside its `with` block")
            yield from self._in_process(jobs)
            return
        self._ready.clear()
        yield from self._on_dask(self.client, iter(jobs))

    def _in_process(self, jobs: Iterable[Job]) -> Iterator[Outcome]:
        for job in jobs:
            self._pending = {job.key: [job]}
            outcome = run_job(job)
            self._pending = {}
            yield outcome
            if outcome.error_kind == "interrupted":
                raise KeyboardInterrupt

    def _on_dask(self, client: Client, jobs: Iterator[Job]) -> Iterator[Outcome]:
        done = as_completed(loop=client.loop)
        futures = self._futures
        keys: set[str] = set()  # the jobs' keys sent in this call (each job once)
        exhausted = False

        def top_up() -> None:
            nonlocal exhausted
            chunks: list[list[Job]] = []
            size = jobs_per_task(self.job_seconds, self.jobs_done)
            while not exhausted and len(self._pending) + len(chunks) < 2 * self.threads() + 2:
                chunk = []
                for job in jobs:
                    if job.key in keys:
                        raise ValueError(f"two jobs with the key {job.key!r}")
                    keys.add(job.key)
                    chunk.append(job)
                    if len(chunk) == size:
                        break
                else:
                    exhausted = True
                if chunk:
                    chunks.append(chunk)
            if not chunks:
                return
            names = [f"codesign-point-{c[0].key}" if len(c) == 1 else f"codesign-points-{c[0].key}-{len(c)}"
                     for c in chunks]
            for key, fut, chunk in zip(names, client.map(run_jobs, chunks, key=names, pure=False), chunks,
                                       strict=True):
                self._pending[key] = chunk
                futures[key] = fut
                done.add(fut)
            self.tasks += len(chunks)

        top_up()
        while self._pending:
            fut = next(done)
            chunk = self._pending.pop(fut.key)
            futures.pop(fut.key, None)
            try:
                outcomes = fut.result()
            except Exception as exc:  # KilledWorker (died too often), a cancelled or lost future
                outcomes = [Outcome(job, error=f"{type(exc).__name__}: {exc}", error_kind="lost") for job in chunk]
            fut.release()
            for o in outcomes:
                if o.error_kind != "lost":
                    self.job_seconds += o.seconds
                    self.jobs_done += 1
            self._ready.extend(outcomes)
            top_up()
            while self._ready:
                yield self._ready.popleft()

    def undelivered(self) -> list[Outcome]:
        """Outcomes received from a task but not yet yielded when the caller stopped iterating
        :meth:`map` (Ctrl-C between two outcomes of one task): solved points to keep."""
        out = list(self._ready)
        self._ready.clear()
        return out
