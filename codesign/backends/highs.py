"""HiGHS backend (highspy): floating-point branch-and-cut on the MIP with big-M indicator rows.

Lowering (:func:`lower`), all with array operations:

- variables keep their bounds and integrality;
- plain rows are passed as they are (repeated variables merged, zeros dropped);
- an indicator ``b = 1  =>  L <= a·x <= U`` becomes, with ``[lo, hi]`` the interval-arithmetic
  range of ``a·x`` over the variable bounds (:func:`~codesign.backends.activity_ranges`, the
  same arithmetic as ``MIP.row_bounds``)::

      a·x + (hi - U)·b <= hi      (when U < hi; at b = 0 it reads a·x <= hi: always true)
      a·x + (lo - L)·b >= lo      (when L > lo)

  Every M comes from bounds, never a literal; a needed infinite bound is refused
  (:class:`~codesign.backends.result.LoweringError`).
- every row is multiplied by a power of two so its largest |coefficient| lies in [1, 2), and so
  is the objective (exact in binary floating point; it keeps physical SI coefficients such as
  1e-12 s away from HiGHS's ``small_matrix_value``, below which entries are dropped).

``solve`` runs HiGHS in a worker thread; Ctrl-C interrupts it through HiGHS's interrupt
callbacks and the incumbent is returned ("feasible" or "no_solution"), never an exception.
Gap tolerances are 0 by default (HiGHS's own defaults, 1e-4 relative and 1e-6 absolute, let
"Optimal" mean "within 0.01 %": see SOLVERS.md).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import highspy
import numpy as np

from codesign.backends import (
    LogTail,
    ProgressCallback,
    ProgressRelay,
    activity_ranges,
    csr_from_coo,
    flatten_rows,
    run_interruptible,
    violation_warning,
)
from codesign.backends.result import (
    GAP_FLOAT_NOISE,
    LoweringError,
    SolveResult,
    Status,
    relative_gap,
    within_tolerance,
)
from codesign.jsonio import atomic_output
from codesign.mip.program import MIP

SOLVER_NAME = "highs"

#: HiGHS drops matrix entries whose magnitude is below this (its ``small_matrix_value`` default)
HIGHS_SMALL_MATRIX_VALUE = 1e-9
#: a row whose largest/smallest |coefficient| exceeds this ratio gets a numerical warning
COEFFICIENT_RANGE_WARNING = 1e9
#: tolerance (absolute, and relative to each row's bound) of the post-solve check of x
CHECK_TOLERANCE = 1e-6
#: HiGHS's mip_feasibility_tolerance: an integer solution's rows met to the LP's primal feasibility
#: tolerance (1e-7, HiGHS's default for LPs) rather than HiGHS's MIP default of 1e-6
MIP_FEASIBILITY_TOL = 1e-7
#: how many offending names a warning lists
NAMES_IN_WARNING = 5
#: integrality code HiGHS uses for continuous and integer columns
HIGHS_CONTINUOUS, HIGHS_INTEGER = 0, 1

_MS = highspy.HighsModelStatus

#: HiGHS model statuses after which whatever solution exists is an incumbent without proof
_STOPPED = {
    _MS.kTimeLimit,
    _MS.kIterationLimit,
    _MS.kSolutionLimit,
    _MS.kObjectiveBound,
    _MS.kObjectiveTarget,
    _MS.kInterrupt,
    _MS.kHighsInterrupt,
    _MS.kMemoryLimit,
    _MS.kUnknown,
}
#: HiGHS model statuses that mean the solver failed
_FAILED = {
    _MS.kNotset,
    _MS.kLoadError,
    _MS.kModelError,
    _MS.kPresolveError,
    _MS.kSolveError,
    _MS.kPostsolveError,
}


@dataclass
class LoweredModel:
    """The MIP as HiGHS arrays (rows in CSR), after big-M lowering and power-of-two scaling.

    ``cost``, ``offset`` are the objective times ``objective_scale``; row ``r`` is the MIP row
    times ``row_scale[r]``. ``row_names`` name plain rows as in the MIP and big-M rows as
    ``<indicator>.ub`` / ``<indicator>.lb``.
    """

    col_lower: np.ndarray
    col_upper: np.ndarray
    integrality: np.ndarray
    cost: np.ndarray
    offset: float
    objective_scale: float
    row_lower: np.ndarray
    row_upper: np.ndarray
    row_scale: np.ndarray
    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    col_names: list[str]
    row_names: list[str]
    big_m_max: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def num_col(self) -> int:
        return len(self.col_lower)

    @property
    def num_row(self) -> int:
        return len(self.row_lower)


def _power_of_two_scale(magnitude: np.ndarray) -> np.ndarray:
    """Per entry, the power of two ``s`` with ``magnitude·s`` in [1, 2) (1 where magnitude is 0)."""
    _, exponent = np.frexp(magnitude)  # magnitude = m·2**exponent with m in [0.5, 1)
    return np.where(magnitude > 0, np.ldexp(1.0, 1 - exponent), 1.0)


def _infinite_bound_culprits(mip: MIP, idx: np.ndarray, val: np.ndarray, side: str) -> list[str]:
    """Names of the variables whose infinite bound makes a row's ``side`` ("upper"/"lower") infinite."""
    names = []
    for j, c in zip(idx, val, strict=True):
        var = mip.vars[int(j)]
        needs_ub = (c > 0) == (side == "upper")
        if (needs_ub and np.isinf(var.ub)) or (not needs_ub and np.isinf(var.lb)):
            names.append(var.name)
    return names


def lower(mip: MIP) -> LoweredModel:
    """Lower ``mip`` to HiGHS arrays (big-M rows for indicators, power-of-two scaling).

    Raises:
        LoweringError: an indicator needs a big-M but its row's range is infinite, or a row
            refers to a variable that does not exist.
    """
    num_vars = len(mip.vars)
    lbs = np.array([v.lb for v in mip.vars], dtype=float)
    ubs = np.array([v.ub for v in mip.vars], dtype=float)
    plain = flatten_rows(mip.rows, num_vars)
    binary = np.array([i.binary for i in mip.indicators], dtype=np.int64)
    ind = flatten_rows([i.row for i in mip.indicators], num_vars, binary)
    lo, hi = activity_ranges(ind, lbs, ubs)

    need_ub = np.isfinite(ind.ub) & (hi > ind.ub)
    need_lb = np.isfinite(ind.lb) & (lo < ind.lb)
    for need, side, reach in ((need_ub, "upper", hi), (need_lb, "lower", lo)):
        bad = np.flatnonzero(need & ~np.isfinite(reach))
        if len(bad):
            r = int(bad[0])
            entries = slice(ind.ptr[r], ind.ptr[r + 1])
            culprits = _infinite_bound_culprits(mip, ind.idx[entries], ind.val[entries], side)
            raise LoweringError(
                f"indicator {ind.names[r]!r} needs a big-M for its {side} side, but the {side} "
                f"end of its activity range is infinite (unbounded in that direction: "
                f"{', '.join(repr(n) for n in culprits[:NAMES_IN_WARNING])}); give these "
                f"variables finite bounds ({len(bad)} indicator(s) affected)"
            )

    # entries: plain rows, then upper big-M rows, then lower big-M rows
    entry_row = ind.row_of_entry
    ub_rows = np.flatnonzero(need_ub)
    lb_rows = np.flatnonzero(need_lb)
    ub_number = np.full(len(ind), -1)
    ub_number[ub_rows] = len(plain) + np.arange(len(ub_rows))
    lb_number = np.full(len(ind), -1)
    lb_number[lb_rows] = len(plain) + len(ub_rows) + np.arange(len(lb_rows))
    ub_m = hi[ub_rows] - ind.ub[ub_rows]
    lb_m = lo[lb_rows] - ind.lb[lb_rows]
    in_ub = need_ub[entry_row]
    in_lb = need_lb[entry_row]
    rows = np.concatenate(
        [
            plain.row_of_entry,
            ub_number[entry_row[in_ub]],
            ub_number[ub_rows],
            lb_number[entry_row[in_lb]],
            lb_number[lb_rows],
        ]
    )
    cols = np.concatenate(
        [plain.idx, ind.idx[in_ub], binary[ub_rows], ind.idx[in_lb], binary[lb_rows]]
    )
    vals = np.concatenate([plain.val, ind.val[in_ub], ub_m, ind.val[in_lb], lb_m])
    count = len(plain) + len(ub_rows) + len(lb_rows)
    start, index, value = csr_from_coo(rows, cols, vals, count)
    row_lower = np.concatenate([plain.lb, np.full(len(ub_rows), -np.inf), lo[lb_rows]])
    row_upper = np.concatenate([plain.ub, hi[ub_rows], np.full(len(lb_rows), np.inf)])
    row_names = (
        plain.names
        + [f"{ind.names[r]}.ub" for r in ub_rows]
        + [f"{ind.names[r]}.lb" for r in lb_rows]
    )

    # power-of-two row scaling: largest |coefficient| of each row in [1, 2)
    row_of_entry = np.repeat(np.arange(count), np.diff(start))
    row_max = np.zeros(count)
    np.maximum.at(row_max, row_of_entry, np.abs(value))
    row_scale = _power_of_two_scale(row_max)
    value = value * row_scale[row_of_entry]
    with np.errstate(invalid="ignore"):
        row_lower = row_lower * row_scale
        row_upper = row_upper * row_scale

    warnings: list[str] = []
    tiny = np.abs(value) < HIGHS_SMALL_MATRIX_VALUE
    if tiny.any():
        names = sorted({row_names[r] for r in row_of_entry[tiny]})
        warnings.append(
            f"{int(tiny.sum())} coefficient(s) are below {HIGHS_SMALL_MATRIX_VALUE:g} times their "
            f"row's largest and HiGHS will drop them; rows: {', '.join(names[:NAMES_IN_WARNING])}"
        )
    row_min = np.full(count, np.inf)
    np.minimum.at(row_min, row_of_entry, np.abs(value))
    wide = np.flatnonzero(row_max * row_scale > COEFFICIENT_RANGE_WARNING * row_min)
    if len(wide):
        warnings.append(
            f"{len(wide)} row(s) span more than {COEFFICIENT_RANGE_WARNING:g} in |coefficient| "
            f"(numerically fragile): {', '.join(row_names[r] for r in wide[:NAMES_IN_WARNING])}"
        )

    cost = np.zeros(num_vars)
    np.add.at(cost, np.asarray(mip.obj_idx, dtype=np.int64), np.asarray(mip.obj_val, dtype=float))
    objective_scale = float(_power_of_two_scale(np.array([np.abs(cost).max(initial=0.0)]))[0])
    big_m = np.concatenate([ub_m, -lb_m])
    return LoweredModel(
        col_lower=lbs,
        col_upper=ubs,
        integrality=np.array(
            [HIGHS_INTEGER if v.integer else HIGHS_CONTINUOUS for v in mip.vars], dtype=np.int32
        ),
        cost=cost * objective_scale,
        offset=mip.obj_constant * objective_scale,
        objective_scale=objective_scale,
        row_lower=row_lower,
        row_upper=row_upper,
        row_scale=row_scale,
        start=start,
        index=index,
        value=value,
        col_names=[v.name for v in mip.vars],
        row_names=row_names,
        big_m_max=float(big_m.max(initial=0.0)),
        warnings=warnings,
    )


def _pass_model(h: highspy.Highs, model: LoweredModel) -> highspy.HighsStatus:
    """Hand the arrays to HiGHS in one call, then the names."""
    status = h.passModel(
        model.num_col,
        model.num_row,
        len(model.value),
        int(highspy.MatrixFormat.kRowwise),
        int(highspy.ObjSense.kMinimize),
        model.offset,
        model.cost,
        model.col_lower,
        model.col_upper,
        model.row_lower,
        model.row_upper,
        model.start.astype(np.int32),
        model.index.astype(np.int32),
        model.value,
        model.integrality,
    )
    if status == highspy.HighsStatus.kError:
        return status
    for j, name in enumerate(model.col_names):
        h.passColName(j, name)
    for r, name in enumerate(model.row_names):
        h.passRowName(r, name)
    return status


_banner_lock = threading.Lock()
_banner_shown = [False]


def new_highs() -> highspy.Highs:
    """A fresh ``Highs`` instance; the first one is built with stdout silenced at file level.

    HiGHS prints a copyright banner to file descriptor 1 when the first instance of a process is
    constructed, before any option can turn output off; it would corrupt ``--json`` output.
    """
    with _banner_lock:
        if _banner_shown[0]:
            return highspy.Highs()
        _banner_shown[0] = True
        try:
            stdout_fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # no real stdout (notebook, pytest capture)
            return highspy.Highs()
        sys.stdout.flush()
        saved = os.dup(stdout_fd)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stdout_fd)
            return highspy.Highs()
        finally:
            os.dup2(saved, stdout_fd)
            os.close(saved)
            os.close(devnull)


def solver_version() -> str:
    """HiGHS version and git hash, e.g. ``"1.16.0 (f3f113d)"``."""
    h = new_highs()
    return f"{h.version()} ({h.githash()})"


def solve(
    mip: MIP,
    *,
    time_limit: float | None = None,
    threads: int | None = None,
    random_seed: int | None = None,
    mip_rel_gap: float = 0.0,
    mip_abs_gap: float = 0.0,
    verbose: bool = False,
    progress: ProgressCallback | None = None,
    write_model: str | Path | None = None,
    check: bool = True,
    options: Mapping[str, Any] | None = None,
    objective_bound: float | None = None,
) -> SolveResult:
    """Solve ``mip`` with HiGHS.

    Args:
        mip: the model (minimisation).
        time_limit: seconds; None = no limit.
        threads: HiGHS ``threads`` option (a process-wide scheduler: the first solve fixes it).
        random_seed: HiGHS ``random_seed``.
        mip_rel_gap, mip_abs_gap: stop (and call it optimal) within these gaps; abs in MIP units.
        verbose: print the solver log.
        progress: ``progress(incumbent, bound, gap, elapsed_s)`` on improving solutions and
            on HiGHS's MIP log lines (called from the solver thread).
        write_model: write the lowered model to this path (``.lp`` or ``.mps``) before solving.
        check: re-check the returned x against the MIP and warn about violated rows.
        options: any other HiGHS options, by HiGHS name.
        objective_bound: seek only solutions whose objective (MIP units, constant included) is
            below this (HiGHS's ``objective_bound``, scaled as the objective is): nodes whose LP
            bound reaches it are pruned as if an incumbent of that value were known. "infeasible"
            then says no solution is below it; the bound returned is at most it (see
            :func:`_result`). Ignored for a model without integer columns.

    Raises:
        LoweringError: see :func:`lower`.
    """
    start_time = time.perf_counter()
    model = lower(mip)
    warnings = list(model.warnings)
    log = LogTail()

    h = new_highs()
    parameters: dict[str, Any] = {
        "output_flag": True,  # needed for the log callback; console output is log_to_console
        "log_to_console": bool(verbose),
        "mip_rel_gap": float(mip_rel_gap),
        "mip_abs_gap": float(mip_abs_gap) * model.objective_scale,
        # rows of an integer solution met to the LP's primal tolerance (HiGHS's default 1e-6 let a
        # max's epigraph sit 1e-6 below its branches: an objective 1.1e-6 under the model's on
        # fuzz case 18 once the attention's max was added, model.md eq. 2.15m)
        "mip_feasibility_tolerance": MIP_FEASIBILITY_TOL,
    }
    if time_limit is not None:
        parameters["time_limit"] = float(time_limit)
    if threads is not None:
        parameters["threads"] = int(threads)
    if random_seed is not None:
        parameters["random_seed"] = int(random_seed)
    mip_bound = None
    if objective_bound is not None and (model.integrality == HIGHS_INTEGER).any():
        mip_bound = float(objective_bound)
        parameters["objective_bound"] = mip_bound * model.objective_scale
    parameters.update(options or {})
    h.cbLogging.subscribe(lambda e: log.write(e.message))
    for name, value in parameters.items():
        if h.setOptionValue(name, value) == highspy.HighsStatus.kError:
            raise ValueError(f"HiGHS rejected option {name}={value!r}")
    recorded = dict(parameters)
    recorded["mip_abs_gap"] = float(mip_abs_gap)  # in MIP units, as the caller stated it
    if mip_bound is not None:
        recorded["objective_bound"] = mip_bound  # in MIP units, as the caller stated it
    recorded["gap_float_noise"] = GAP_FLOAT_NOISE
    recorded["objective_scale"] = model.objective_scale
    recorded["big_m_max"] = model.big_m_max

    version = f"{h.version()} ({h.githash()})"
    base = {"solver": SOLVER_NAME, "solver_version": version, "parameters": recorded}
    if _pass_model(h, model) == highspy.HighsStatus.kError:
        return SolveResult(
            status="error",
            termination="HiGHS rejected the model",
            wall_time_s=time.perf_counter() - start_time,
            log_tail=log.lines(),
            warnings=warnings,
            **base,
        )
    if write_model is not None:
        h.writeModel(str(write_model))

    stop_requested = [False]

    def on_interrupt_check(event: Any) -> None:
        if stop_requested[0]:
            event.interrupt()

    h.cbMipInterrupt.subscribe(on_interrupt_check)
    h.cbSimplexInterrupt.subscribe(on_interrupt_check)
    h.cbIpmInterrupt.subscribe(on_interrupt_check)
    relay = ProgressRelay(progress, warnings)
    if relay.active:
        scale = model.objective_scale
        h.cbMipImprovingSolution.subscribe(
            lambda e: relay(
                e.data_out.objective_function_value / scale, e.data_out.mip_dual_bound / scale
            )
        )
        h.cbMipLogging.subscribe(
            lambda e: relay(e.data_out.mip_primal_bound / scale, e.data_out.mip_dual_bound / scale)
        )

    def request_stop() -> None:
        stop_requested[0] = True

    run = run_interruptible(h.run, request_stop, time_limit)
    if run.abandoned:
        return SolveResult(
            status="error",
            termination="abandoned: HiGHS did not stop when asked (its thread keeps running)",
            wall_time_s=time.perf_counter() - start_time,
            log_tail=log.lines(),
            warnings=warnings,
            **base,
        )
    return _result(mip, model, h, run.interrupted, start_time, log, warnings, base, check, mip_bound)


def _result(
    mip: MIP,
    model: LoweredModel,
    h: highspy.Highs,
    interrupted: bool,
    start_time: float,
    log: LogTail,
    warnings: list[str],
    base: dict[str, Any],
    check: bool,
    objective_bound: float | None = None,
) -> SolveResult:
    """Translate HiGHS's state after ``run`` into a :class:`SolveResult`.

    With an ``objective_bound`` B (MIP units) HiGHS starts its ``upper_limit`` at B, as if an
    incumbent of value B were known, prunes every node whose LP bound reaches it
    (``HighsNodeQueue::performBounding``) and calls the model "Infeasible" when it keeps no
    solution: no solution is below B (within its tolerances, as any of its proofs). It may also keep
    a solution it came across at or above B and call that "Optimal", reporting the solution's value
    as its bound, which holds only for the solutions below B: that outcome is "infeasible" too (no
    solution below B), with the solution kept in ``x`` for the caller to judge. The bound returned
    is at most B.
    """
    model_status = h.getModelStatus()
    info = h.getInfo()
    words = h.modelStatusToString(model_status)
    termination = f"interrupted ({words})" if interrupted else words
    has_x = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
    x = raw_x = None
    if has_x:
        raw_x = np.asarray(h.getSolution().col_value, dtype=float)
        x = raw_x.copy()
        integer = model.integrality == HIGHS_INTEGER
        x[integer] = np.round(x[integer])
        x += 0.0  # -0.0 -> 0.0
    scale = model.objective_scale
    if (model.integrality == HIGHS_INTEGER).any():
        bound = float(info.mip_dual_bound) / scale if np.isfinite(info.mip_dual_bound) else None
    elif model_status == _MS.kOptimal:  # a pure LP: its optimum is its own proof
        bound = float(info.objective_function_value) / scale
    else:
        bound = None
    if objective_bound is not None and bound is not None:
        bound = min(bound, objective_bound)  # what HiGHS proved holds below B only

    status: Status
    if objective_bound is not None and model_status == _MS.kInfeasible and not interrupted:
        status, bound = "infeasible", None
        termination = f"Infeasible: no solution has objective below the objective bound {objective_bound:.12g}"
    elif objective_bound is not None and model_status == _MS.kOptimal and has_x and (
            float(info.objective_function_value) / scale >= objective_bound):
        # a solution HiGHS came across at or above B, every node below B pruned
        status, bound = "infeasible", None
        termination = (f"Infeasible: no solution has objective below the objective bound {objective_bound:.12g} "
                       f"(HiGHS: Optimal, keeping a solution at {info.objective_function_value / scale:.12g})")
    elif model_status == _MS.kOptimal and has_x:
        solver_objective = float(info.objective_function_value) / scale
        rel = float(base["parameters"]["mip_rel_gap"])
        absolute = float(base["parameters"]["mip_abs_gap"])
        proved = bound is not None and within_tolerance(solver_objective, bound, rel, absolute)
        status = "optimal" if proved else "feasible"
    elif model_status == _MS.kModelEmpty:
        x = np.zeros(0)
        status = "optimal" if not mip.check(x) else "infeasible"
        bound = mip.obj_constant if status == "optimal" else None
        if status == "infeasible":
            x = None
    elif model_status == _MS.kInfeasible:
        status, bound = "infeasible", None
    elif model_status == _MS.kUnboundedOrInfeasible:
        # with finite bounds on every variable the MIP cannot be unbounded
        finite = all(np.isfinite(v.lb) and np.isfinite(v.ub) for v in mip.vars)
        status = "infeasible" if finite else "no_solution"
        bound = None
    elif model_status == _MS.kUnbounded:
        status = "unbounded"
    elif model_status in _FAILED:
        status, x = "error", None
    elif model_status in _STOPPED or model_status == _MS.kOptimal:
        status = "feasible" if has_x else "no_solution"
    else:
        status, x = "error", None
        warnings.append(f"unexpected HiGHS model status {words!r}")

    objective = mip.objective_value(x) if x is not None else None
    if check:
        message = violation_warning(mip, x, "HiGHS's solution", CHECK_TOLERANCE, NAMES_IN_WARNING)
        if message:
            warnings.append(message)
    return SolveResult(
        status=status,
        termination=termination,
        objective=objective,
        bound=bound,
        gap=relative_gap(objective, bound),
        x=x,
        raw_x=raw_x,
        wall_time_s=time.perf_counter() - start_time,
        nodes=int(info.mip_node_count) if info.mip_node_count >= 0 else None,
        log_tail=log.lines(),
        warnings=warnings,
        **base,
    )


#: characters an exported MPS/LP name keeps (HiGHS's LP writer falls back to c0, c1, ... for every
#: column when one name has a bracket, a colon or a comma); brackets become parentheses
_NAME_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.()")


def export_names(names: list[str]) -> list[str]:
    """The names columns or rows are written under in an MPS/LP file: brackets as parentheses,
    other characters LP readers reject as ``_``, and a ``~k`` suffix where two would collide."""
    out: list[str] = []
    seen: set[str] = set()
    for name in names:
        base = "".join(c if c in _NAME_OK else "_" for c in name.replace("[", "(").replace("]", ")"))
        written, k = base, 1
        while written in seen:
            k += 1
            written = f"{base}_{k}"
        seen.add(written)
        out.append(written)
    return out


def export(mip: MIP, path: str | Path, fmt: str) -> dict[str, Any]:
    """Write ``mip`` as MPS or LP exactly as built: indicator rows as the big-M rows the HiGHS
    backend solves (M from the variables' bounds), the objective and every row unscaled, each
    column and row under its MIP name (:func:`export_names`). Returns the names written, by MIP
    variable and row, for the caller's legend."""
    model = lower(mip)
    unscale = np.repeat(1.0 / model.row_scale, np.diff(model.start))
    model.value = model.value * unscale
    with np.errstate(invalid="ignore"):
        model.row_lower = model.row_lower / model.row_scale
        model.row_upper = model.row_upper / model.row_scale
    model.cost = model.cost / model.objective_scale
    model.offset = model.offset / model.objective_scale
    model.col_names = export_names(model.col_names)
    model.row_names = export_names(model.row_names)
    h = new_highs()
    h.setOptionValue("output_flag", False)
    if _pass_model(h, model) == highspy.HighsStatus.kError:
        raise LoweringError("HiGHS rejected the model")
    with atomic_output(Path(path)) as tmp:
        target = tmp.with_suffix(f".{fmt}")  # HiGHS chooses the format by the file's suffix
        if h.writeModel(str(target)) == highspy.HighsStatus.kError:
            raise LoweringError(f"HiGHS could not write {fmt}")
        target.replace(tmp)
    return {"columns": model.col_names, "rows": model.row_names}
