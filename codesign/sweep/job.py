"""One point job: a picklable description of a proven solve, and running it.

:func:`run_job` turns a :class:`Job` into a :class:`~codesign.proof.records.Solution` record
through the one solve driver (:func:`codesign.proof.driver.solve`), on a dask worker or here, and
never raises for a bad point: an error is the :class:`Outcome`. This module does not import dask
(a worker has it loaded; the executor sends the jobs).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from codesign.errors import InputError, ModelError
from codesign.kinds.base import Problem
from codesign.kinds.registry import from_data, load
from codesign.model.calibration import load_calibration
from codesign.proof.driver import solve


@dataclass(frozen=True)
class Job:
    """One solve, described by plain data (pickled to a worker).

    Attributes:
        key: unique within a run (a sweep's point id).
        instance: the instance's validated content (a problem's ``data``), or a named instance or
            path the worker loads itself.
        source: the name errors give the content.
        budgets: ``--budget`` expressions to add (grid instances).
        objective: the metric to optimise instead of the instance's (grid instances); None: its own.
        calibration: the calibration file's path (None: the shipped one); a worker reads it.
        calibration_sha256: its digest: a worker that reads other bytes there refuses the job.
        solver, time_limit, threads: as ``codesign solve`` takes them.
    """

    key: str
    instance: dict[str, Any] | str
    source: str = "<data>"
    budgets: tuple[str, ...] = ()
    objective: str | None = None
    calibration: str | None = None
    calibration_sha256: str | None = None
    solver: str = "auto"
    time_limit: float | None = None
    threads: int | None = None

    def problem(self) -> Problem:
        """The problem this job solves (InputError when it is not valid here)."""
        cal = load_calibration(self.calibration)
        if self.calibration_sha256 is not None and cal.sha256 != self.calibration_sha256:
            raise InputError("this worker reads another calibration file than the sweep's", file=cal.path,
                             value=f"sha256 {cal.sha256[:12]}...", expected=f"sha256 {self.calibration_sha256[:12]}...",
                             suggestion="give every worker the same calibration file at the same path")
        if isinstance(self.instance, str):
            p = load(self.instance, calibration=cal)
        else:
            p = from_data(self.instance, source=self.source, calibration=cal)
        return p.with_budgets(list(self.budgets)).with_objective(self.objective)


@dataclass(frozen=True)
class Outcome:
    """How one job ended: its solution record (``Solution.as_dict()``), or why there is none.

    Attributes:
        error_kind: None (a record), ``input`` (the job is not valid), ``check`` (a solver and the
            model disagree: ModelError), ``crash`` (another exception), ``lost`` (the worker died
            running it more often than the scheduler retries, or the future failed),
            ``interrupted`` (Ctrl-C stopped the solve: the record is kept but is no result).
        worker: the dask worker's address (None in this process).
        seconds: wall time of the job on its worker.
    """

    job: Job
    record: dict[str, Any] | None = None
    error: str | None = None
    error_kind: str | None = None
    worker: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error_kind is None and self.record is not None


def _worker_address() -> str | None:
    """The dask worker running this job (None here: dask is only looked up where it is loaded)."""
    dist = sys.modules.get("distributed")
    if dist is None:
        return None
    try:
        return dist.get_worker().address
    except ValueError:  # not on a dask worker
        return None


def run_job(job: Job) -> Outcome:
    """Solve ``job`` (on a worker, or here). Errors become the outcome; Ctrl-C during the solve
    gives the interrupted record with ``error_kind="interrupted"``."""
    t0 = time.perf_counter()
    where = _worker_address()
    try:
        sol = solve(job.problem(), solver=job.solver, time_limit=job.time_limit, threads=job.threads)
    except InputError as exc:
        return Outcome(job, error=str(exc), error_kind="input", worker=where, seconds=time.perf_counter() - t0)
    except ModelError as exc:
        return Outcome(job, error=str(exc), error_kind="check", worker=where, seconds=time.perf_counter() - t0)
    except Exception as exc:  # a bug in one point must not end a study of thousands
        return Outcome(job, error=f"{type(exc).__name__}: {exc}", error_kind="crash", worker=where,
                       seconds=time.perf_counter() - t0)
    interrupted = sol.termination.startswith("interrupted")
    return Outcome(job, record=sol.as_dict(), error="interrupted (Ctrl-C)" if interrupted else None,
                   error_kind="interrupted" if interrupted else None, worker=where, seconds=time.perf_counter() - t0)
