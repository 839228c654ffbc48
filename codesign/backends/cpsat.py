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
import itertools
import math
import time
from collections.abc import Mapping, Sequence
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
    run_interruptible,
    violation_warning,
)
from codesign.backends.result import (
    GAP_FLOAT_NOISE,
    LoweringError,
    Rounding,
    RowRounding,
    SolveResult,
    Status,
    relative_gap,
    within_tolerance,
)
from codesign.mip.program import MIP, Row

SOLVER_NAME = "cpsat"

#: target number of grid steps across a continuous variable's range (when no resolution is given)
DEFAULT_STEPS = 1e9
#: largest |integer coefficient| a scaled row may have (SOLVERS.md: ~1e9 or less)
MAX_COEFFICIENT = 1e9
#: largest Σ|k_j|·max|y_j| of a scaled row (int64 is 2^63; keep a factor 4 of headroom)
MAX_ACTIVITY = float(2**61)
#: most grid steps a continuous variable may have
MAX_STEPS = float(2**50)
#: multiples of 1/min|c| tried as exact row scales before falling back to the precise one
EXACT_MULTIPLIERS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 25, 50, 100)
#: a scaled coefficient within this relative distance of an integer counts as exact
EXACT_TOLERANCE = 2.0**-40
#: relative float round-off allowed per term when moving a row side outward (4 ulps)
FLOAT_ROUNDOFF = 2.0**-50
#: integer bounds within this of an integer are taken as that integer
INTEGRALITY_TOLERANCE = 1e-9
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
class Grid:
    """Integer representation of every variable: ``x = offset + sign·step·y``, y in [ylo, yhi].

    A continuous variable with a positive objective coefficient is anchored at its lower bound
    (``sign = +1``) and a feasible value is snapped *down* to the grid; one with a negative
    coefficient is anchored at its upper bound (``sign = -1``) and snapped *up*: either way
    snapping never worsens the objective. Other continuous variables snap to the nearest
    point. ``snap`` is the largest snapping distance in steps (0 for integer variables);
    ``directed`` marks the variables snapped in the objective's favour.
    """

    offset: np.ndarray
    step: np.ndarray
    sign: np.ndarray
    ylo: np.ndarray
    yhi: np.ndarray
    snap: np.ndarray
    continuous: np.ndarray
    directed: np.ndarray

    @property
    def ymax(self) -> np.ndarray:
        """Largest |y| per variable."""
        return np.maximum(np.abs(self.ylo), np.abs(self.yhi)).astype(float)

    def decode(self, y: np.ndarray) -> np.ndarray:
        """MIP values of integer values ``y``."""
        return np.where(self.continuous, self.offset + self.sign * self.step * y, y.astype(float))


def build_grid(
    mip: MIP,
    blocks: Sequence[RowBlock] = (),
    objective: RowBlock | None = None,
    *,
    default_steps: float = DEFAULT_STEPS,
    max_coefficient: float = MAX_COEFFICIENT,
) -> Grid:
    """Choose the integer representation of every variable.

    A continuous variable without a resolution gets the power-of-two step that fits its range
    in about ``default_steps`` steps, coarsened where a row of ``blocks`` needs it. In a row
    whose largest integer-variable coefficient is ``A``, a row scale keeping ``A`` within
    ``max_coefficient`` is at most ``max_coefficient / A``; a continuous term ``a·x`` becomes an
    integer multiple of y only when ``σ·a·step >= 1``. So each step is raised to the next power
    of two above ``A / (max_coefficient·min(1, |a|))``: then ``σ = 1 / step`` keeps integer data
    exact (all steps being powers of two), and small coefficients are not rounded to nothing.
    ``objective`` (a one-row block) decides each continuous variable's anchor (see :class:`Grid`).

    Raises:
        LoweringError: a variable has an infinite bound, an integer variable has no integer
            in its bounds, a resolution is not positive, or a range needs more than
            :data:`MAX_STEPS` steps.
    """
    count = len(mip.vars)
    lb = np.array([v.lb for v in mip.vars], dtype=float)
    ub = np.array([v.ub for v in mip.vars], dtype=float)
    integer = np.array([v.integer for v in mip.vars], dtype=bool)
    resolution = np.array(
        [np.nan if v.resolution is None else v.resolution for v in mip.vars], dtype=float
    )

    def fail(mask: np.ndarray, what: str) -> None:
        if mask.any():
            j = int(np.flatnonzero(mask)[0])
            var = mip.vars[j]
            raise LoweringError(
                f"variable {var.name!r} (bounds [{var.lb}, {var.ub}], resolution "
                f"{var.resolution}): {what} ({int(mask.sum())} variable(s) affected)"
            )

    fail(~(np.isfinite(lb) & np.isfinite(ub)), "CP-SAT needs finite bounds on every variable")
    ylo = np.zeros(count, dtype=np.int64)
    yhi = np.zeros(count, dtype=np.int64)
    int_lo = np.ceil(lb - INTEGRALITY_TOLERANCE)
    int_hi = np.floor(ub + INTEGRALITY_TOLERANCE)
    fail(integer & (int_lo > int_hi), "no integer lies within the bounds")
    ylo[integer] = int_lo[integer]
    yhi[integer] = int_hi[integer]

    continuous = ~integer
    width = np.where(continuous, ub - lb, 0.0)
    given = continuous & ~np.isnan(resolution)
    fail(given & ~(resolution > 0), "the resolution must be positive")
    spread = continuous & (width > 0)
    derived = spread & ~given
    step = np.ones(count)
    step[given] = resolution[given]
    step[derived] = np.exp2(np.floor(np.log2(width[derived] / default_steps)))
    needed = np.zeros(count)
    for block in blocks:
        rows = block.row_of_entry
        on_integer = integer[block.idx]
        largest_integer = _segment_max(
            np.where(on_integer, np.abs(block.val), 0.0), rows, len(block), 0.0
        )
        free = derived[block.idx]
        unit = np.minimum(1.0, np.abs(block.val[free]))
        np.maximum.at(
            needed, block.idx[free], largest_integer[rows[free]] / (unit * max_coefficient)
        )
    coarsen = derived & (needed > step)
    step[coarsen] = np.exp2(np.ceil(np.log2(needed[coarsen])))
    steps = np.where(spread, width / step, 0.0)
    fail(
        steps > MAX_STEPS,
        f"the range needs more than {MAX_STEPS:.3g} grid steps; use a coarser resolution",
    )
    yhi[continuous] = np.floor(steps[continuous] * (1 + FLOAT_ROUNDOFF))
    cost = np.zeros(count)
    if objective is not None:
        np.add.at(cost, objective.idx, objective.val)
    directed = spread & (cost != 0)
    sign = np.where(continuous & (cost < 0), -1.0, 1.0)
    offset = np.where(continuous, np.where(cost < 0, ub, lb), 0.0)
    tail = np.maximum(0.0, steps - yhi)  # steps beyond the last grid point
    nearest = np.maximum(np.where(yhi >= 1, 0.5, 0.0), tail)
    snap = np.where(directed, np.minimum(1.0, steps), np.where(spread, nearest, 0.0))
    return Grid(offset, step, sign, ylo, yhi, snap, continuous, directed)


@dataclass
class ScaledRows:
    """Rows of a :class:`RowBlock` in integers: ``lb_int <= Σ k·y <= ub_int`` per row.

    ``impossible`` rows have no integer solution at all (their sides crossed); ``relaxation``
    is how far (in the row's units) a solution of the integer row may violate the MIP row:
    the outward move of its sides (plus round-off margin) and the coefficient rounding;
    ``error`` is the coefficient rounding allowance ``Σ|k - σ·c|·max|y|`` (computed with
    error-free products, so 0 for exact rows) and ``snap`` the grid-snapping allowance
    ``σ·Σ|c|·snap``, both in integer units.
    """

    k: np.ndarray
    lb_int: np.ndarray
    ub_int: np.ndarray
    scale: np.ndarray
    rel_error: np.ndarray
    error: np.ndarray
    snap: np.ndarray
    relaxation: np.ndarray
    dropped: np.ndarray
    impossible: np.ndarray
    #: per row, the constant part of its activity (anchors and fixed variables), row units
    shift: np.ndarray


#: Veltkamp's splitter for doubles (2^27 + 1)
_SPLITTER = 134217729.0


def _two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(p, e)`` with ``p = fl(a·b)`` and ``a·b = p + e`` exactly (Dekker's error-free product)."""
    product = a * b
    t = _SPLITTER * a
    a_hi = t - (t - a)
    a_lo = a - a_hi
    t = _SPLITTER * b
    b_hi = t - (t - b)
    b_lo = b - b_hi
    error = ((a_hi * b_hi - product) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return product, error


def _segment_max(values: np.ndarray, rows: np.ndarray, count: int, initial: float) -> np.ndarray:
    out = np.full(count, initial)
    np.maximum.at(out, rows, values)
    return out


def _segment_min(values: np.ndarray, rows: np.ndarray, count: int, initial: float) -> np.ndarray:
    out = np.full(count, initial)
    np.minimum.at(out, rows, values)
    return out


def _segment_sum(values: np.ndarray, rows: np.ndarray, count: int) -> np.ndarray:
    return np.bincount(rows, weights=values, minlength=count).astype(float)


def _rounding_error(scale: np.ndarray, c: np.ndarray, ymax: np.ndarray) -> np.ndarray:
    """Per entry, ``|round(σ·c) - σ·c|·max|y|`` (integer units)."""
    scaled = scale * c
    return np.abs(np.round(scaled) - scaled) * ymax


def _choose_scales(
    c: np.ndarray, ymax: np.ndarray, step: np.ndarray, block: RowBlock, max_coefficient: float
) -> np.ndarray:
    """Per row, the scale σ whose rounding error bound ``Σ|round(σc) - σc|·max|y| / σ`` is least.

    Candidates, all with ``max|σc| <= max_coefficient`` and ``Σ|σc|·max|y| <= MAX_ACTIVITY``:
    small multiples of ``1 / min|c|`` and of ``1 / (finest step in the row)`` (kept when they
    make every σc integral: the row is then exact); otherwise the largest allowed scale σ_top,
    and for each term with ``max|y| > 1`` the largest scale below σ_top that makes that term an
    exact integer (continuous terms multiply the most steps, so their exactness matters most).
    Zero coefficients (fixed variables folded into the sides) take no part.
    """
    count = len(block)
    rows = block.row_of_entry
    absc = np.abs(c)
    live = absc > 0
    cmax = _segment_max(absc, rows, count, 0.0)
    cmin = _segment_min(np.where(live, absc, np.inf), rows, count, np.inf)
    has_terms = cmax > 0
    safe_max = np.where(has_terms, cmax, 1.0)
    safe_min = np.where(has_terms, cmin, 1.0)
    activity_per_scale = _segment_sum(absc * ymax, rows, count)
    with np.errstate(divide="ignore"):
        top = np.minimum(
            max_coefficient / safe_max,
            np.where(activity_per_scale > 0, MAX_ACTIVITY / activity_per_scale, np.inf),
        )
    scale = np.where(has_terms, top, 1.0)

    # 1. exact rows: a small multiple of 1/min|c| or of 1/(finest step) makes every σc integral
    decided = ~has_terms
    finest = _segment_min(np.where(live, step, np.inf), rows, count, 1.0)
    for base, multiple in itertools.product((safe_min, finest), EXACT_MULTIPLIERS):
        open_entries = ~decided[rows]
        if not open_entries.any():
            break
        candidate = multiple / base
        sub_rows = rows[open_entries]
        k = candidate[sub_rows] * c[open_entries]
        off = np.abs(k - np.round(k)) > EXACT_TOLERANCE * np.abs(k)
        fails = _segment_max(off.astype(float), sub_rows, count, 0.0) > 0
        take = ~decided & ~fails & (candidate <= top)
        scale[take] = candidate[take]
        decided |= take

    # 2. the rest: σ_top, or a scale that makes one multi-step term exact, whichever errs least
    open_rows = np.flatnonzero(~decided)
    if len(open_rows) == 0:
        return scale
    heavy = (ymax > 1) & live & ~decided[rows]
    heavy_rows = rows[heavy]
    heavy_scale = np.floor(top[heavy_rows] * absc[heavy]) / absc[heavy]
    usable = heavy_scale > 0
    cand_row = np.concatenate([open_rows, heavy_rows[usable]])
    cand_scale = np.concatenate([top[open_rows], heavy_scale[usable]])
    # every (candidate, entry of its row) pair
    lengths = np.diff(block.ptr)[cand_row]
    pair_cand = np.repeat(np.arange(len(cand_row)), lengths)
    first = np.cumsum(lengths) - lengths
    pair_entry = (
        np.arange(lengths.sum())
        - np.repeat(first, lengths)
        + np.repeat(block.ptr[cand_row], lengths)
    )
    errors = _rounding_error(cand_scale[pair_cand], c[pair_entry], ymax[pair_entry])
    score = np.bincount(pair_cand, weights=errors, minlength=len(cand_row)) / cand_scale
    order = np.lexsort((-cand_scale, score, cand_row))  # per row: least error, then largest σ
    best = order[np.r_[True, cand_row[order][1:] != cand_row[order][:-1]]]
    scale[cand_row[best]] = cand_scale[best]
    return scale


def scale_rows(block: RowBlock, grid: Grid, max_coefficient: float = MAX_COEFFICIENT) -> ScaledRows:
    """Scale and round every row of ``block`` to integers, moving its sides outward (see module)."""
    count = len(block)
    rows = block.row_of_entry
    idx = block.idx
    # a variable fixed by its bounds contributes a constant: fold it into the shift, exactly
    fixed = grid.ylo[idx] == grid.yhi[idx]
    value = np.where(fixed, 0.0, block.val)
    c, c_error = _two_product(value, grid.sign[idx] * grid.step[idx])
    ymax = grid.ymax[idx]
    scale = _choose_scales(c, ymax, grid.step[idx], block, max_coefficient)
    exact_scaled, product_error = _two_product(scale[rows], c)
    k = np.round(exact_scaled)
    abs_k_span = np.abs(k) * ymax
    span = _segment_sum(abs_k_span, rows, count)
    over = span > 2 * MAX_ACTIVITY  # rounding up cannot double a span; guard anyway
    if over.any():
        raise LoweringError(
            f"row {block.names[int(np.flatnonzero(over)[0])]!r} overflows int64 after scaling"
        )
    # |k - σ·(true coefficient)|, exactly up to one rounding: σ·c_true = p + e_p + σ·e_c
    coef_error = np.abs((k - exact_scaled) - product_error - scale[rows] * c_error)
    coef_error *= 1 + FLOAT_ROUNDOFF
    error = _segment_sum(coef_error * ymax, rows, count)
    snap = _segment_sum(np.abs(exact_scaled) * grid.snap[idx], rows, count)
    at = grid.offset[idx] + np.where(fixed, grid.sign[idx] * grid.step[idx] * grid.ylo[idx], 0.0)
    shift_terms = block.val * at
    shift = _segment_sum(shift_terms, rows, count)
    shift_size = _segment_sum(np.abs(shift_terms), rows, count)
    terms = np.bincount(rows, minlength=count)
    side_size = np.where(np.isfinite(block.lb), np.abs(block.lb), 0.0)
    side_size = np.maximum(side_size, np.where(np.isfinite(block.ub), np.abs(block.ub), 0.0))
    magnitude = scale * (side_size + shift_size) + span + error + snap
    margin = FLOAT_ROUNDOFF * (terms + 2) * magnitude
    widen = error + snap + margin
    with np.errstate(invalid="ignore"):
        ub_real = np.where(np.isfinite(block.ub), scale * (block.ub - shift) + widen, MAX_ACTIVITY)
        lb_real = np.where(np.isfinite(block.lb), scale * (block.lb - shift) - widen, -MAX_ACTIVITY)
    limit = 2 * MAX_ACTIVITY
    ub_int = np.clip(np.floor(ub_real), -limit, limit).astype(np.int64)
    lb_int = np.clip(np.ceil(lb_real), -limit, limit).astype(np.int64)
    # how far each finite side actually moved outward (after rounding to integers)
    with np.errstate(invalid="ignore"):
        moved_ub = np.where(np.isfinite(block.ub), ub_int - scale * (block.ub - shift), 0.0)
        moved_lb = np.where(np.isfinite(block.lb), scale * (block.lb - shift) - lb_int, 0.0)
    moved = np.maximum(np.maximum(moved_ub, moved_lb), 0.0) + margin
    # a solution of the integer row satisfies the real row up to the moved sides plus the
    # coefficient rounding Σ|k - σc|·|y|
    violation = moved + error
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(
            k == 0, np.where(value != 0, 1.0, 0.0), np.abs(k - exact_scaled) / np.abs(exact_scaled)
        )
    return ScaledRows(
        k=k.astype(np.int64),
        lb_int=lb_int,
        ub_int=ub_int,
        scale=scale,
        rel_error=_segment_max(rel, rows, count, 0.0),
        error=error,
        snap=snap,
        relaxation=violation / scale,
        dropped=np.bincount(rows[(k == 0) & (value != 0)], minlength=count),
        impossible=lb_int > ub_int,
        shift=shift,
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
    try:
        from codesign.backends import highs  # the floating-point backend does the LP
    except ImportError:
        return x, "highspy is not installed: continuous values kept on their grids"

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
