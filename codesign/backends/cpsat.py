"""OR-Tools CP-SAT backend: the MIP scaled to integers, indicators as enforcement literals.

CP-SAT takes bounded integer variables and integer coefficients only, so lowering is a
scaling, and every rounding is recorded (:class:`~codesign.backends.result.Rounding`):

- **Variables.** Integer variables keep their bounds. A continuous variable becomes a grid
  ``x = anchor ± step·y`` with integer ``y`` in ``[0, N]``: ``step`` is ``Var.resolution`` when
  given, else the power of two that fits the range in about :data:`DEFAULT_STEPS` steps
  (coarsened where a row needs it, see :func:`build_grid`). A variable the objective wants
  small is anchored at its lower bound, one it wants large at its upper bound, so that
  snapping a feasible value to the grid (down, resp. up) never worsens the objective.
- **Rows.** In grid units a row reads ``L - s <= Σ c_j·y_j <= U - s`` (``c_j`` = coefficient ×
  ±step, ``s`` = Σ coefficient × anchor). It is multiplied by a row scale ``σ`` and rounded:
  ``k_j = round(σ·c_j)``, ``max|k| <= max_coefficient`` and ``Σ|k|·max|y| <=``
  :data:`MAX_ACTIVITY` (see :func:`_choose_scales`: exact rows stay exact). Both sides are then
  moved **outward** by ``Σ|k_j - σ·c_j|·max|y_j|`` (coefficient rounding, computed with
  error-free products) plus ``σ·Σ|c_j|·snap_j`` (the snapping distance of every continuous
  value) plus a float round-off margin, and rounded outward. So the integer model is a
  relaxation: every feasible MIP solution, snapped to the grids, satisfies it.
- **Indicators** are the same rows with an enforcement literal (native).
- **Objective** is scaled the same way; ``objective_error_bound`` bounds
  ``|true - rounded|`` objective on the grid. The bound CP-SAT proves is converted back to MIP
  units and lowered by it, so it is a valid bound for the *unrounded* MIP.
- **Answer.** The design (integer part) is decoded and, by default, its continuous values are
  re-solved exactly by an LP with the design fixed (:func:`polish`, HiGHS): the objective
  reported is then the MIP's value of a feasible solution, as the model would evaluate it.

"optimal" means: CP-SAT proved its integer model optimal (gap limits 0) and objective − bound
is within ``max(mip_rel_gap, rounding_gap_tolerance)`` relative or ``max(mip_abs_gap,
rounding_abs_tolerance)`` absolute: the grids leave a gap of about one step
(:data:`ROUNDING_GAP_TOLERANCE`; :data:`ROUNDING_GAP_STEPS` objective grid steps, at most
``rounding_gap_tolerance`` times the objective's spread over the bounds; both recorded).

Parameters set on every solve: ``absolute_gap_limit = relative_gap_limit = 0`` (CP-SAT's
default absolute gap 1e-4 stops early on small objectives), ``presolve_inclusion_work_limit
= 0`` (workaround for or-tools #5293: presolve can drop enforcement literals when sums of
Boolean coefficients exceed 2^31 and return a wrong OPTIMAL).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import ortools
from ortools.sat.python import cp_model

from codesign.backends import (
    LogTail,
    ProgressCallback,
    ProgressRelay,
    RowBlock,
    flatten_rows,
    highs,  # the floating-point backend polishes the continuous values
    run_interruptible,
    violation_warning,
)
from codesign.backends.cpsat_scaling import (
    DEFAULT_STEPS,
    MAX_COEFFICIENT,
    Grid,
    ScaledRows,
    build_grid,
    scale_rows,
)
from codesign.backends.result import (
    GAP_FLOAT_NOISE,
    Rounding,
    RowRounding,
    SolveResult,
    Status,
    relative_gap,
    within_tolerance,
)
from codesign.mip.program import MIP, Row

SOLVER_NAME = "cpsat"

#: relative gap a proven optimum of the integer model may leave against the MIP bound (because
#: of the grids) and still be reported "optimal"; recorded in every result's parameters
ROUNDING_GAP_TOLERANCE = 1e-6
#: the same, absolute: this many grid steps of every continuous objective variable (a gap of
#: one step remains when the optimum sits on the grid next to a relaxed row, e.g. at objective 0),
#: but never more than ROUNDING_GAP_TOLERANCE times the objective's spread over the bounds
ROUNDING_GAP_STEPS = 2.0
#: default number of CP-SAT workers (SOLVERS.md: 2 workers far outperform 1 on this problem class)
DEFAULT_WORKERS = 2
#: a solve stopped within this fraction of its time limit is reported as "time limit"
TIME_LIMIT_FRACTION = 0.98
#: tolerance (absolute, and relative to each row's bound) of the post-solve check of x
CHECK_TOLERANCE = 1e-6
#: how many offending names a warning lists
NAMES_IN_WARNING = 5
#: the or-tools #5293 workaround, recorded in every result
ISSUE_5293_NOTE = (
    "presolve_inclusion_work_limit = 0: workaround for or-tools #5293 (presolve may drop "
    "enforcement literals when sums of Boolean coefficients exceed 2^31)"
)


@dataclass
class LoweredModel:
    """The CP-SAT model and everything needed to read its answers back in MIP units."""

    model: cp_model.CpModel
    grid: Grid
    objective_scale: float
    objective_shift: float
    rounding: Rounding
    #: Σ |objective coefficient|·step over continuous variables: one grid step of the objective
    objective_grid_step: float = 0.0
    #: Σ |objective coefficient|·(ub - lb): the objective's spread over the variable bounds
    objective_spread: float = 0.0

    def rounding_abs_tolerance(self, rel_tolerance: float) -> float:
        """Absolute gap the grids may leave: a few objective grid steps, capped relatively."""
        return min(
            ROUNDING_GAP_STEPS * self.objective_grid_step, rel_tolerance * self.objective_spread
        )

    def to_mip_objective(self, integer_objective: float) -> float:
        """MIP units of an integer-model objective value (without the rounding widening)."""
        return integer_objective / self.objective_scale + self.objective_shift

    def to_mip_bound(self, integer_bound: float) -> float:
        """A valid MIP bound from a bound of the integer model (lowered by the widening)."""
        return self.to_mip_objective(integer_bound) - self.rounding.bound_widening


def _add_rows(proto: Any, block: RowBlock, scaled: ScaledRows) -> None:
    """Append the scaled rows to the CP-SAT proto (enforced by ``block.binary`` when given)."""
    keep = scaled.k != 0  # fixed variables (folded into the sides) and dropped terms
    idx = block.idx[keep].tolist()
    coeffs = scaled.k[keep].tolist()
    ptr = np.concatenate([[0], np.cumsum(keep)])[block.ptr].tolist()
    lbs = scaled.lb_int.tolist()
    ubs = scaled.ub_int.tolist()
    binaries = None if block.binary is None else block.binary.tolist()
    impossible = scaled.impossible.tolist()
    for r, name in enumerate(block.names):
        con = proto.constraints.add()
        con.name = name
        if binaries is not None:
            con.enforcement_literal.append(binaries[r])
        if impossible[r]:  # no integer activity satisfies the row: 0 in [1, 1] is false
            con.linear.domain.extend([1, 1])
            continue
        con.linear.vars.extend(idx[ptr[r] : ptr[r + 1]])
        con.linear.coeffs.extend(coeffs[ptr[r] : ptr[r + 1]])
        con.linear.domain.extend([lbs[r], ubs[r]])


def _row_records(block: RowBlock, scaled: ScaledRows) -> list[RowRounding]:
    return [
        RowRounding(name, float(s), float(e), float(rx), int(d))
        for name, s, e, rx, d in zip(
            block.names,
            scaled.scale,
            scaled.rel_error,
            scaled.relaxation,
            scaled.dropped,
            strict=True,
        )
    ]


def lower(
    mip: MIP, *, default_steps: float = DEFAULT_STEPS, max_coefficient: float = MAX_COEFFICIENT
) -> LoweredModel:
    """Lower ``mip`` to a CP-SAT model (see the module docstring for the scaling).

    Raises:
        LoweringError: see :func:`build_grid`; or a row that overflows int64 after scaling.
    """
    num_vars = len(mip.vars)
    plain = flatten_rows(mip.rows, num_vars)
    binaries = [i.binary for i in mip.indicators]
    ind = flatten_rows([i.row for i in mip.indicators], num_vars, binaries)
    obj = flatten_rows([Row("objective", mip.obj_idx, mip.obj_val)], num_vars)
    grid = build_grid(
        mip, (plain, ind, obj), obj, default_steps=default_steps, max_coefficient=max_coefficient
    )
    model = cp_model.CpModel()
    model.name = mip.name
    proto = model.proto
    for j, var in enumerate(mip.vars):
        proto_var = proto.variables.add()
        proto_var.name = var.name
        proto_var.domain.extend([int(grid.ylo[j]), int(grid.yhi[j])])

    plain_scaled = scale_rows(plain, grid, max_coefficient)
    _add_rows(proto, plain, plain_scaled)
    ind_scaled = scale_rows(ind, grid, max_coefficient)
    _add_rows(proto, ind, ind_scaled)

    # the objective, scaled like a row without sides
    obj_scaled = scale_rows(obj, grid, max_coefficient)
    objective_scale = float(obj_scaled.scale[0])
    nonzero = obj_scaled.k != 0
    proto.objective.vars.extend(obj.idx[nonzero].tolist())
    proto.objective.coeffs.extend(obj_scaled.k[nonzero].tolist())
    shift = mip.obj_constant + float(obj_scaled.shift[0])
    error_bound = float(obj_scaled.error[0]) / objective_scale
    # snapping in the objective's favour costs nothing; only undirected terms (none, as every
    # continuous objective variable is directed) could add to it
    undirected = grid.continuous[obj.idx] & ~grid.directed[obj.idx]
    snap_bound = float(
        np.sum(
            np.abs(obj.val[undirected] * grid.step[obj.idx][undirected])
            * grid.snap[obj.idx][undirected]
        )
    )
    rounding = Rounding(
        objective_resolution=1.0 / objective_scale,
        objective_error_bound=error_bound,
        snap_error_bound=snap_bound,
        bound_widening=error_bound + snap_bound,
        variable_resolution={
            mip.vars[j].name: float(grid.step[j]) for j in np.flatnonzero(grid.continuous)
        },
        rows=_row_records(plain, plain_scaled) + _row_records(ind, ind_scaled),
        notes=[ISSUE_5293_NOTE],
    )
    on_grid = grid.continuous[obj.idx]
    grid_step = float(np.sum(np.abs(obj.val[on_grid]) * grid.step[obj.idx][on_grid]))
    widths = np.array([mip.vars[j].ub - mip.vars[j].lb for j in obj.idx], dtype=float)
    spread = float(np.sum(np.abs(obj.val) * widths))
    return LoweredModel(model, grid, objective_scale, shift, rounding, grid_step, spread)


class _SolutionRelay(cp_model.CpSolverSolutionCallback):
    """Forwards each improving solution's objective (in MIP units) to a :class:`ProgressRelay`."""

    def __init__(self, relay: ProgressRelay, lowered: LoweredModel) -> None:
        super().__init__()
        self._relay = relay
        self._lowered = lowered

    def on_solution_callback(self) -> None:
        self._relay(incumbent=self._lowered.to_mip_objective(self.objective_value))


def solver_version() -> str:
    """OR-Tools version string, e.g. ``"9.15.6755"``."""
    return str(ortools.__version__)


def polish(mip: MIP, x: np.ndarray) -> tuple[np.ndarray | None, str]:
    """Fix every integer variable at its value in ``x`` and re-solve the continuous part as an LP.

    CP-SAT's continuous values live on grids and satisfy rows only up to the recorded
    relaxation; the LP (HiGHS, floating point) gives the exact continuous completion of the
    design, so the objective reported is the MIP's true value of a feasible solution.
    Returns ``(x, note)``; ``x`` is None when the design has no feasible completion.
    """
    if all(v.integer for v in mip.vars):
        return x, "no continuous variables: nothing to polish"
    fixed = dataclasses.replace(
        mip,
        name=f"{mip.name}-polish",
        vars=[
            dataclasses.replace(v, lb=float(xj), ub=float(xj), integer=False) if v.integer else v
            for v, xj in zip(mip.vars, x, strict=True)
        ],
    )
    lp = highs.solve(fixed, check=False)
    if lp.status == "optimal" and lp.x is not None:
        exact = lp.x.copy()
        integer = np.array([v.integer for v in mip.vars], dtype=bool)
        exact[integer] = x[integer]
        return (
            exact,
            f"continuous values re-solved by an LP with the design fixed ({lp.solver} {lp.solver_version})",
        )
    if lp.status == "infeasible":
        return None, "the design has no feasible continuous completion in the unrounded MIP"
    return x, f"polish LP ended {lp.status} ({lp.termination}); grid values kept"


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
    default_steps: float = DEFAULT_STEPS,
    max_coefficient: float = MAX_COEFFICIENT,
    rounding_gap_tolerance: float = ROUNDING_GAP_TOLERANCE,
    polish_continuous: bool = True,
    check: bool = True,
    options: Mapping[str, Any] | None = None,
) -> SolveResult:
    """Solve ``mip`` with CP-SAT on its integer scaling.

    Args:
        mip: the model (minimisation); every variable needs finite bounds.
        time_limit: seconds (``max_time_in_seconds``); None = no limit.
        threads: ``num_workers`` (default :data:`DEFAULT_WORKERS`). With one worker CP-SAT can
            improve a fine-grid objective one unit at a time; pass
            ``options={"binary_search_num_conflicts": 100}`` then.
        random_seed: CP-SAT ``random_seed``.
        mip_rel_gap, mip_abs_gap: gap limits (abs in MIP units); 0 = prove optimality.
        verbose: print CP-SAT's search log.
        progress: ``progress(incumbent, bound, gap, elapsed_s)`` on each improving solution and
            bound (called from solver threads; incumbents are of the integer model).
        default_steps: grid steps across a continuous range without a resolution.
        max_coefficient: largest integer coefficient of a scaled row.
        rounding_gap_tolerance: relative gap the grids may leave between a proven optimum of
            the integer model and the MIP bound and still be called "optimal".
        polish_continuous: re-solve the continuous values exactly with the design fixed
            (:func:`polish`); without it x keeps its grid values.
        check: re-check the returned x against the MIP and warn about violated rows.
        options: any other SatParameters fields, by name.

    Raises:
        LoweringError: see :func:`lower`.
    """
    start_time = time.perf_counter()
    lowered = lower(mip, default_steps=default_steps, max_coefficient=max_coefficient)
    warnings: list[str] = []
    log = LogTail()

    solver = cp_model.CpSolver()
    sat: dict[str, Any] = {
        "num_workers": int(threads) if threads is not None else DEFAULT_WORKERS,
        "relative_gap_limit": float(mip_rel_gap),
        "absolute_gap_limit": float(mip_abs_gap) * lowered.objective_scale,
        "presolve_inclusion_work_limit": 0,
        "catch_sigint_signal": False,  # Ctrl-C is handled here: stop_search() keeps the incumbent
        "log_search_progress": True,
        "log_to_stdout": bool(verbose),
    }
    if time_limit is not None:
        sat["max_time_in_seconds"] = float(time_limit)
    if random_seed is not None:
        sat["random_seed"] = int(random_seed)
    sat.update(options or {})
    for name, value in sat.items():
        if not hasattr(solver.parameters, name):
            raise ValueError(f"unknown CP-SAT parameter {name!r}")
        setattr(solver.parameters, name, value)
    solver.log_callback = log.write

    parameters = dict(sat)
    parameters.update(
        mip_rel_gap=float(mip_rel_gap),
        mip_abs_gap=float(mip_abs_gap),
        rounding_gap_tolerance=float(rounding_gap_tolerance),
        rounding_abs_tolerance=lowered.rounding_abs_tolerance(float(rounding_gap_tolerance)),
        gap_float_noise=GAP_FLOAT_NOISE,
        objective_scale=lowered.objective_scale,
        default_steps=float(default_steps),
        max_coefficient=float(max_coefficient),
        polish_continuous=bool(polish_continuous),
    )

    relay = ProgressRelay(progress, warnings)
    callback = None
    if relay.active:
        callback = _SolutionRelay(relay, lowered)

        def on_bound(value: float) -> None:
            relay(bound=lowered.to_mip_bound(value))

        solver.best_bound_callback = on_bound

    run = run_interruptible(
        lambda: solver.solve(lowered.model, callback), solver.stop_search, time_limit
    )
    if run.abandoned:
        reason = "its time limit" if run.overran else "Ctrl-C"
        return SolveResult(
            status="error",
            termination=(
                f"abandoned: CP-SAT ignored {reason} and stop_search() (a known or-tools hang in "
                "bound propagation on large domains); its thread keeps running"
            ),
            bound=relay.bound,
            wall_time_s=time.perf_counter() - start_time,
            solver=SOLVER_NAME,
            solver_version=solver_version(),
            parameters=parameters,
            rounding=lowered.rounding,
            log_tail=log.lines(),
            warnings=warnings,
        )
    outcome = _Outcome(run.value, run.interrupted, time_limit, start_time, polish_continuous, check)
    return _result(mip, lowered, solver, outcome, log, warnings, parameters)


@dataclass
class _Outcome:
    """How a CP-SAT run ended and what to do with its answer."""

    cp_status: Any
    interrupted: bool
    time_limit: float | None
    start_time: float
    polish: bool
    check: bool


def _termination(solver: cp_model.CpSolver, outcome: _Outcome) -> str:
    words = solver.status_name(outcome.cp_status)
    if outcome.interrupted:
        return f"interrupted ({words})"
    stopped = outcome.cp_status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
    limit = outcome.time_limit
    if stopped and limit is not None and solver.wall_time >= TIME_LIMIT_FRACTION * limit:
        return f"time limit reached ({words})"
    return words


def _result(
    mip: MIP,
    lowered: LoweredModel,
    solver: cp_model.CpSolver,
    outcome: _Outcome,
    log: LogTail,
    warnings: list[str],
    parameters: dict[str, Any],
) -> SolveResult:
    """Translate CP-SAT's answer into a :class:`SolveResult` in MIP units."""
    cp_status = outcome.cp_status
    termination = _termination(solver, outcome)
    x = None
    if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        y = np.array(solver.response_proto.solution, dtype=np.int64)[: len(mip.vars)]
        x = lowered.grid.decode(y)
    bound = None
    if cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN) and mip.vars:
        raw = solver.best_objective_bound
        bound = lowered.to_mip_bound(raw) if math.isfinite(raw) else None
    raw_x = x  # the grid values, kept even when the design has no exact completion
    if x is not None and outcome.polish:
        x, note = polish(mip, x)
        lowered.rounding.notes.append(note)
        if x is None:
            warnings.append(f"CP-SAT's design is not feasible for the unrounded MIP: {note}")
            termination = f"{termination}; design infeasible after unrounding"
    objective = mip.objective_value(x) if x is not None else None

    status: Status
    if x is not None and cp_status == cp_model.OPTIMAL:
        if bound is None:  # nothing to bound: an empty model
            bound = objective
        rel = max(parameters["mip_rel_gap"], parameters["rounding_gap_tolerance"])
        absolute = max(parameters["mip_abs_gap"], parameters["rounding_abs_tolerance"])
        proved = within_tolerance(objective, bound, rel, absolute)
        status = "optimal" if proved else "feasible"
        if not proved:
            warnings.append(
                "CP-SAT proved its integer model optimal, but the grids leave a gap above "
                "rounding_gap_tolerance: use finer resolutions"
            )
    elif x is not None:
        status = "feasible"
    elif cp_status == cp_model.INFEASIBLE:
        status, bound = "infeasible", None
    elif cp_status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        status = "no_solution"
    else:  # MODEL_INVALID
        status, bound = "error", None
        message = lowered.model.validate()
        termination = f"{termination}: {message}" if message else termination

    if outcome.check:
        message = violation_warning(mip, x, "the solution", CHECK_TOLERANCE, NAMES_IN_WARNING)
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
        wall_time_s=time.perf_counter() - outcome.start_time,
        nodes=int(solver.num_branches),
        solver=SOLVER_NAME,
        solver_version=solver_version(),
        parameters=parameters,
        rounding=lowered.rounding,
        log_tail=log.lines(),
        warnings=warnings,
    )
