"""The one result vocabulary every backend returns: status, proof (bound and gap), solution, stats.

A :class:`SolveResult` describes the MIP *as built* (minimisation, objective constant included):

- ``status``: ``"optimal"`` (the solver proved optimality and the gap is within the tolerance
  recorded in ``parameters``), ``"feasible"`` (a solution without that proof: time limit,
  interruption, a non-zero gap), ``"infeasible"`` (proven), ``"unbounded"``, ``"no_solution"``
  (stopped before any solution was found), ``"error"`` (the solver failed or rejected the model).
- ``bound``: a proven lower bound on the objective of every feasible solution, or None.
- ``gap``: ``(objective - bound) / |objective|`` (see :func:`relative_gap` for the edge cases).

Failure is a status, never an exception: the only exceptions a backend raises are for models it
cannot lower (:class:`LoweringError`) and bad options.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

Status = Literal["optimal", "feasible", "infeasible", "unbounded", "no_solution", "error"]

#: statuses that come with a solution vector
SOLUTION_STATUSES: frozenset[str] = frozenset({"optimal", "feasible"})

#: how many trailing lines of the solver log a result keeps
LOG_TAIL_LINES = 40
#: how many rows a rounding summary lists
WORST_ROWS = 5

#: relative float noise tolerated between a solver's own primal and dual bounds when it reports
#: a proof (a solver that emptied its tree can still report them a few ulps apart)
GAP_FLOAT_NOISE = 1e-12


class LoweringError(ValueError):
    """The MIP cannot be handed to this backend (e.g. a big-M needs an infinite variable bound)."""


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """Relative gap ``(objective - bound) / |objective|`` of a minimisation.

    where objective is the incumbent's value and bound a proven lower bound (same units).
    Edge cases: None when either is unknown; 0 when ``bound >= objective`` (closed, up to the
    solver's arithmetic); ``inf`` when the objective is exactly 0 but the bound is below it
    (no finite relative gap exists; the absolute gap is ``-bound``).
    """
    if objective is None or bound is None:
        return None
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf
    absolute = objective - bound
    if absolute <= 0.0:
        return 0.0
    if objective == 0.0:
        return math.inf
    return absolute / abs(objective)


def within_tolerance(objective: float, bound: float, rel_gap: float, abs_gap: float) -> bool:
    """True when ``objective - bound <= max(abs_gap, rel_gap·|objective|)`` (HiGHS's rule),
    up to :data:`GAP_FLOAT_NOISE` relative float noise."""
    noise = GAP_FLOAT_NOISE * max(1.0, abs(objective))
    return objective - bound <= max(abs_gap, rel_gap * abs(objective)) + noise


@dataclass
class RowRounding:
    """How one row (or indicator row) was turned into integers for an integer-only backend.

    Attributes:
        name: the row's name in the MIP.
        scale: integer units per unit of the row's activity (the row was multiplied by this).
        max_rel_coef_error: largest ``|round(c·scale) - c·scale| / |c·scale|`` over its
            coefficients (``c`` = MIP coefficient times the variable's resolution); 1.0 for a
            coefficient rounded to zero.
        relaxation: how far a solution of the integer model may violate the row, in the row's
            own units (its sides were moved outward for coefficient rounding, for snapping
            continuous values to their grids, and by a float margin).
        dropped: number of coefficients that rounded to zero.
    """

    name: str
    scale: float
    max_rel_coef_error: float
    relaxation: float
    dropped: int = 0


@dataclass
class Rounding:
    """The integer scaling an integer-only backend (CP-SAT) applied, and the error it can cause.

    Attributes:
        objective_resolution: MIP objective units per integer objective unit (``1 / scale``).
        objective_error_bound: ``|true - rounded|`` objective for any solution of the integer
            model (coefficient rounding of the objective; 0 when the objective scales exactly).
        snap_error_bound: largest worsening of the objective when the continuous values of a
            feasible MIP solution are snapped to their grid (0 when every snap is directed in
            the objective's favour).
        bound_widening: how much the solver's bound was lowered to stay valid for the
            unrounded MIP (``objective_error_bound + snap_error_bound``).
        variable_resolution: per continuous variable, the grid step it was represented at.
        rows: one record per row and indicator row.
        notes: anything else a reader of the result must know (workarounds applied...).
    """

    objective_resolution: float
    objective_error_bound: float
    snap_error_bound: float
    bound_widening: float
    variable_resolution: dict[str, float] = field(default_factory=dict)
    rows: list[RowRounding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def max_rel_coef_error(self) -> float:
        """Largest relative coefficient rounding error over all rows (0 without rows)."""
        return max((r.max_rel_coef_error for r in self.rows), default=0.0)

    def worst_rows(self, count: int = WORST_ROWS) -> list[RowRounding]:
        """The ``count`` rows with the largest relative coefficient error."""
        return sorted(self.rows, key=lambda r: r.max_rel_coef_error, reverse=True)[:count]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: every scalar, the per-variable resolutions, the worst rows."""
        return {
            "objective_resolution": self.objective_resolution,
            "objective_error_bound": self.objective_error_bound,
            "snap_error_bound": self.snap_error_bound,
            "bound_widening": self.bound_widening,
            "max_rel_coef_error": self.max_rel_coef_error,
            "max_row_relaxation": max((r.relaxation for r in self.rows), default=0.0),
            "rows": len(self.rows),
            "worst_rows": [asdict(r) for r in self.worst_rows()],
            "variable_resolution": dict(self.variable_resolution),
            "notes": list(self.notes),
        }


@dataclass
class SolveResult:
    """What a backend returns for one solve of a :class:`~codesign.mip.program.MIP`.

    Attributes:
        status: see the module docstring.
        termination: why the solver stopped, in its own words ("Optimal", "Time limit
            reached", "interrupted", ...).
        objective: objective of ``x`` for the MIP as built (constant included); None without x.
        bound: proven lower bound in MIP units; None when unknown.
        gap: :func:`relative_gap` of objective and bound; None when either is unknown.
        x: one value per MIP variable (integers rounded to exact integers), or None.
        wall_time_s: seconds spent in the backend, model building included.
        nodes: branch-and-bound nodes (HiGHS) or branches (CP-SAT); None when unknown.
        solver: backend name ("highs", "cpsat").
        solver_version: the solver library's version string.
        parameters: every option actually set, and the gap tolerances that decide "optimal".
        rounding: integer scaling records (CP-SAT); None for floating-point backends.
        log_tail: the last lines of the solver log.
        warnings: numerical or modelling concerns found while lowering or solving.
    """

    status: Status
    termination: str
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    x: np.ndarray | None = None
    wall_time_s: float = 0.0
    nodes: int | None = None
    solver: str = ""
    solver_version: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    rounding: Rounding | None = None
    log_tail: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the solver's own assignment before any repair (HiGHS: before rounding integers; CP-SAT:
    #: on the integer grids, before polishing); set even when it turns out infeasible for the
    #: unrounded MIP, so a caller can exclude that design
    raw_x: np.ndarray | None = None

    @property
    def has_solution(self) -> bool:
        """True when the result carries a solution vector."""
        return self.x is not None and self.status in SOLUTION_STATUSES

    def summary(self) -> str:
        """One line for people: status, objective, bound, gap, time."""
        parts = [f"{self.solver} {self.status} ({self.termination})"]
        if self.objective is not None:
            parts.append(f"objective {self.objective:.10g}")
        if self.bound is not None:
            parts.append(f"bound {self.bound:.10g}")
        if self.gap is not None:
            parts.append(f"gap {self.gap:.3%}")
        parts.append(f"{self.wall_time_s:.2f} s")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (arrays as lists, non-finite floats as strings)."""
        out = asdict(self)
        out["x"] = None if self.x is None else [float(v) for v in self.x]
        out["raw_x"] = None if self.raw_x is None else [float(v) for v in self.raw_x]
        out["rounding"] = None if self.rounding is None else self.rounding.to_dict()
        for key in ("objective", "bound", "gap"):
            value = out[key]
            if value is not None and not math.isfinite(value):
                out[key] = str(value)
        return out
