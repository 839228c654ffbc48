"""Solver backends: the only place solver packages are imported.

``solve(mip, solver=...)`` lowers a solver-neutral :class:`~codesign.mip.program.MIP` to one
backend and returns a :class:`SolveResult`. Each backend declares its :class:`Capabilities` so
callers (and tests) can choose or skip by what a backend can do rather than by its name.

Common options accepted by every backend (others are backend-specific, see each module):
``time_limit`` (s), ``threads``, ``random_seed``, ``mip_rel_gap``, ``mip_abs_gap`` (both 0 by
default: "optimal" means proven optimal), ``verbose`` (solver log on stdout), ``progress``
(a callable ``progress(incumbent, bound, gap, elapsed_s)``).
"""

from __future__ import annotations

import importlib
import importlib.util
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from codesign.backends.result import (
    LOG_TAIL_LINES,
    LoweringError,
    Rounding,
    RowRounding,
    SolveResult,
    relative_gap,
)
from codesign.errors import InputError, did_you_mean
from codesign.mip.program import MIP, Row

__all__ = [
    "CAPABILITIES",
    "Capabilities",
    "LoweringError",
    "ProgressCallback",
    "Rounding",
    "RowBlock",
    "RowRounding",
    "RunOutcome",
    "SolveResult",
    "activity_ranges",
    "available_solvers",
    "csr_from_coo",
    "flatten_rows",
    "relative_gap",
    "solve",
]

#: progress(incumbent, bound, gap, elapsed_s): any of the first three may be None
ProgressCallback = Callable[[float | None, float | None, float | None, float], None]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do natively.

    Attributes:
        name: backend name as passed to :func:`solve`.
        package: the Python distribution that provides it.
        indicators: "native" (enforcement literals) or "big-M" (rows with M from bounds).
        continuous: "native" or "integer grid" (continuous variables scaled to integers).
        assumption_cores: can explain infeasibility by a subset of assumption literals.
        exact_integer_arithmetic: proofs are in exact integer arithmetic (after scaling).
        deterministic: when the same model, options and seed give the same answer.
        caveats: known limits a caller should keep in mind.
    """

    name: str
    package: str
    indicators: Literal["native", "big-M"]
    continuous: Literal["native", "integer grid"]
    assumption_cores: bool
    exact_integer_arithmetic: bool
    deterministic: str
    caveats: str = ""


CAPABILITIES: dict[str, Capabilities] = {
    "highs": Capabilities(
        name="highs",
        package="highspy",
        indicators="big-M",
        continuous="native",
        assumption_cores=False,
        exact_integer_arithmetic=False,
        deterministic="always (serial tree search)",
        caveats=(
            "floating point: rows hold within 1e-7 and integrality within 1e-6, so a big-M row "
            "lets a binary act by 1e-6·M (HiGHS #1721); verify every design with the model"
        ),
    ),
    "cpsat": Capabilities(
        name="cpsat",
        package="ortools",
        indicators="native",
        continuous="integer grid",
        assumption_cores=True,
        exact_integer_arithmetic=True,
        deterministic="with threads=1 and a fixed random_seed",
        caveats=(
            "continuous values live on grids (polished afterwards by an LP); one worker can "
            "improve a fine-grid objective one unit at a time; rows coupling several fine-grid "
            "continuous variables can make bound propagation ignore the time limit and "
            "stop_search() (the solve is then abandoned after a grace period)"
        ),
    ),
}

#: backend name -> module implementing ``solve(mip, **opts) -> SolveResult``
_MODULES: dict[str, str] = {
    "highs": "codesign.backends.highs",
    "cpsat": "codesign.backends.cpsat",
}


def available_solvers() -> list[str]:
    """Names of the backends whose solver package is installed, in preference order."""
    return [name for name, caps in CAPABILITIES.items() if importlib.util.find_spec(caps.package)]


def solve(mip: MIP, solver: str = "highs", **opts: Any) -> SolveResult:
    """Solve ``mip`` (minimisation) with the named backend.

    Args:
        mip: the solver-neutral model.
        solver: "highs" or "cpsat".
        **opts: backend options (see the module docstring and each backend).

    Raises:
        InputError: unknown or uninstalled solver.
        LoweringError: the model cannot be lowered to this backend.
    """
    if solver not in CAPABILITIES:
        raise InputError(
            f"unknown solver {solver!r}",
            key="solver",
            value=solver,
            expected=" | ".join(CAPABILITIES),
            suggestion=did_you_mean(solver, CAPABILITIES),
        )
    if solver not in available_solvers():
        raise InputError(
            f"solver {solver!r} is not installed",
            key="solver",
            value=solver,
            expected=f"the Python package {CAPABILITIES[solver].package!r}",
            suggestion=f"pip install {CAPABILITIES[solver].package}",
        )
    module = importlib.import_module(_MODULES[solver])
    return module.solve(mip, **opts)


# --- helpers shared by the backends -----------------------------------------------------------

#: seconds between checks of a running solve (how fast Ctrl-C is noticed)
POLL_INTERVAL_S = 0.1
#: seconds a solver may run past its time limit before it is asked to stop
STOP_GRACE_S = 5.0
#: seconds a solver may ignore a stop request before it is abandoned in its thread
ABANDON_GRACE_S = 10.0

_T = TypeVar("_T")


@dataclass
class RowBlock:
    """Rows flattened into CSR arrays, duplicates merged and zero coefficients dropped.

    Attributes:
        names: one name per row.
        ptr: row ``r`` owns entries ``ptr[r]:ptr[r+1]`` of ``idx`` and ``val``.
        idx: variable indices (sorted within each row, unique).
        val: coefficients (non-zero).
        lb, ub: row bounds (may be infinite).
        binary: enforcing binary per row (indicator rows), or None for plain rows.
    """

    names: list[str]
    ptr: np.ndarray
    idx: np.ndarray
    val: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    binary: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.names)

    @property
    def row_of_entry(self) -> np.ndarray:
        """Row number of every entry."""
        return np.repeat(np.arange(len(self.names)), np.diff(self.ptr))


def csr_from_coo(
    row: np.ndarray, idx: np.ndarray, val: np.ndarray, count: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compressed rows ``(ptr, idx, val)`` from entries ``(row, idx, val)``.

    Entries are sorted by row then variable; repeated (row, variable) pairs are summed and zero
    coefficients dropped. ``count`` is the number of rows (trailing empty rows included).
    """
    row = np.asarray(row, dtype=np.int64)
    idx = np.asarray(idx, dtype=np.int64)
    key = row * (int(idx.max(initial=0)) + 1) + idx  # row-major position: one sort key
    if len(key) > 1 and not (key[1:] > key[:-1]).all():
        order = np.argsort(key, kind="stable")
        key, row, idx, val = key[order], row[order], idx[order], val[order]
    first = np.ones(len(idx), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(first)
    if len(starts):
        val = np.add.reduceat(val, starts)
    row, idx = row[starts], idx[starts]
    keep = val != 0.0
    row, idx, val = row[keep], idx[keep], val[keep]
    ptr = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=count), out=ptr[1:])
    return ptr, idx.astype(np.int64), val.astype(float)


def flatten_rows(
    rows: Sequence[Row], num_vars: int, binaries: Sequence[int] | None = None
) -> RowBlock:
    """Concatenate ``rows`` into a :class:`RowBlock` (merging repeated variables of a row).

    ``num_vars`` is the number of MIP variables (indices are checked against it); ``binaries``
    gives the enforcing binary of each row when the rows are indicator rows.

    Raises:
        LoweringError: a row refers to a variable that does not exist.
    """
    count = len(rows)
    lengths = np.fromiter((len(r.idx) for r in rows), dtype=np.int64, count=count)
    if lengths.sum() > 0:
        idx = np.concatenate([np.asarray(r.idx, dtype=np.int64) for r in rows])
        val = np.concatenate([np.asarray(r.val, dtype=float) for r in rows])
    else:
        idx = np.zeros(0, dtype=np.int64)
        val = np.zeros(0)
    bad = (idx < 0) | (idx >= num_vars)
    if bad.any():
        row_of = np.repeat(np.arange(count), lengths)
        first = int(np.flatnonzero(bad)[0])
        raise LoweringError(
            f"row {rows[int(row_of[first])].name!r} refers to variable index {int(idx[first])}, "
            f"but the MIP has {num_vars} variables"
        )
    ptr, idx, val = csr_from_coo(np.repeat(np.arange(count), lengths), idx, val, count)
    return RowBlock(
        names=[r.name for r in rows],
        ptr=ptr,
        idx=idx,
        val=val,
        lb=np.fromiter((r.lb for r in rows), dtype=float, count=count),
        ub=np.fromiter((r.ub for r in rows), dtype=float, count=count),
        binary=None if binaries is None else np.asarray(binaries, dtype=np.int64),
    )


def activity_ranges(
    block: RowBlock, lbs: np.ndarray, ubs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Interval-arithmetic range ``[lo, hi]`` of every row's activity over the variable bounds.

    The same arithmetic as :meth:`MIP.row_bounds`, vectorised over all rows of ``block``:
    ``lo = Σ min(c·lb, c·ub)``, ``hi = Σ max(c·lb, c·ub)``; infinite when a needed bound is.
    """
    with np.errstate(invalid="ignore"):
        low_end = np.where(block.val >= 0, block.val * lbs[block.idx], block.val * ubs[block.idx])
        high_end = np.where(block.val >= 0, block.val * ubs[block.idx], block.val * lbs[block.idx])
    rows = block.row_of_entry
    count = len(block)
    lo = np.bincount(rows, weights=low_end, minlength=count).astype(float)
    hi = np.bincount(rows, weights=high_end, minlength=count).astype(float)
    return lo, hi


class LogTail:
    """Thread-safe collector of solver log text that keeps the last lines."""

    def __init__(self, lines: int = LOG_TAIL_LINES) -> None:
        self._chunks: deque[str] = deque(maxlen=lines)
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        """Append solver output (any mix of whole and partial lines)."""
        with self._lock:
            pieces = (self._partial + text).split("\n")
            self._partial = pieces.pop()
            self._chunks.extend(piece.rstrip() for piece in pieces)

    def lines(self) -> list[str]:
        """The kept lines, oldest first (a trailing partial line included)."""
        with self._lock:
            tail = list(self._chunks)
            if self._partial.strip():
                tail.append(self._partial.rstrip())
            return tail[-(self._chunks.maxlen or len(tail)) :]


class ProgressRelay:
    """Calls a user's ``progress(incumbent, bound, gap, elapsed_s)`` from solver threads.

    Keeps the best incumbent and bound seen so each call reports both; serialises calls with a
    lock; an exception in the user's callback disables it and becomes a warning (the solve goes
    on: losing a solve to a display error would be worse).
    """

    def __init__(self, progress: ProgressCallback | None, warnings: list[str]) -> None:
        self._progress = progress
        self._warnings = warnings
        self._lock = threading.Lock()
        self._start = time.perf_counter()
        self.incumbent: float | None = None
        self.bound: float | None = None

    @property
    def active(self) -> bool:
        """True while a callback is attached and has not failed."""
        return self._progress is not None

    def __call__(self, incumbent: float | None = None, bound: float | None = None) -> None:
        if self._progress is None:
            return
        with self._lock:
            if incumbent is not None and np.isfinite(incumbent):
                self.incumbent = (
                    incumbent if self.incumbent is None else min(self.incumbent, incumbent)
                )
            if bound is not None and np.isfinite(bound):
                self.bound = bound if self.bound is None else max(self.bound, bound)
            gap = relative_gap(self.incumbent, self.bound)
            try:
                self._progress(self.incumbent, self.bound, gap, time.perf_counter() - self._start)
            except Exception as exc:  # a display error must not lose the solve
                self._warnings.append(f"progress callback disabled after it raised {exc!r}")
                self._progress = None


@dataclass
class RunOutcome:
    """How :func:`run_interruptible` ended.

    Attributes:
        value: what the solver call returned (None when abandoned).
        interrupted: Ctrl-C was pressed while waiting (``stop()`` was called).
        abandoned: the solver ignored ``stop()`` for :data:`ABANDON_GRACE_S` seconds and was
            left running in its daemon thread (it burns a CPU until it returns or the process
            ends); no answer is available.
        overran: the solver ran :data:`STOP_GRACE_S` past its time limit and was asked to stop.
    """

    value: Any
    interrupted: bool = False
    abandoned: bool = False
    overran: bool = False


def run_interruptible(
    target: Callable[[], _T], stop: Callable[[], None], time_limit: float | None = None
) -> RunOutcome:
    """Run ``target()`` in a worker thread; Ctrl-C while waiting calls ``stop()`` and keeps waiting.

    The solver must honour ``stop()`` by returning its incumbent. A watchdog guards against a
    solver that does not: past ``time_limit + STOP_GRACE_S`` it calls ``stop()``, and
    :data:`ABANDON_GRACE_S` after any ``stop()`` it gives up waiting (``abandoned``). CP-SAT
    9.15 was seen to ignore both its time limit and ``stop_search()`` inside bound propagation
    on large domains. Waiting uses an Event rather than ``Thread.join``: a KeyboardInterrupt
    inside ``join`` can leave the thread looking finished while it still runs (CPython 3.11).
    """
    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        # Ctrl-C must reach the waiting thread at once: block SIGINT here and so in every
        # solver thread started from here (they inherit the mask); the kernel then delivers it
        # to a thread that does not block it, the waiting one.
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            box["value"] = target()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="codesign-solve", daemon=True)
    outcome = RunOutcome(None)
    start = time.perf_counter()
    stop_at = None if time_limit is None else start + time_limit + STOP_GRACE_S
    abandon_at: float | None = None
    while True:
        try:  # start inside the try: a fast solver can find (and report) a solution before
            # Thread.start() has returned, and Ctrl-C may come just then
            if worker.ident is None:
                worker.start()
            if done.wait(POLL_INTERVAL_S):
                break
            now = time.perf_counter()
            if stop_at is not None and now >= stop_at and abandon_at is None:
                outcome.overran = True
                stop()
                abandon_at = now + ABANDON_GRACE_S
            if abandon_at is not None and now >= abandon_at:
                outcome.abandoned = True
                return outcome
        except KeyboardInterrupt:
            outcome.interrupted = True
            stop()
            if abandon_at is None:
                abandon_at = time.perf_counter() + ABANDON_GRACE_S
    if "error" in box:
        raise box["error"]
    outcome.value = box["value"]
    return outcome


def violation_warning(mip: MIP, x: np.ndarray | None, who: str, tolerance: float, names: int) -> str | None:
    """A warning naming the MIP rows/bounds ``x`` violates by more than ``tolerance``, or None."""
    if x is None:
        return None
    violated = mip.check(x, tolerance)
    if not violated:
        return None
    return (
        f"{who} violates {len(violated)} row(s)/bound(s) of the MIP by more than {tolerance:g}: "
        f"{', '.join(violated[:names])}"
    )
