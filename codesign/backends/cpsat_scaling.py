"""Integer scaling of a MIP for CP-SAT (no solver here): the grids continuous variables live on,
and each row's scale with the outward move that makes the integer model a relaxation (the method
is described in :mod:`codesign.backends.cpsat`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codesign.backends import RowBlock
from codesign.backends.result import LoweringError
from codesign.mip.program import MIP

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
