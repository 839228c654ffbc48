"""A solver-neutral mixed-integer program: variables, named linear rows, indicator rows, objective.

The formulation builds one of these; each backend lowers it (HiGHS: indicator rows become big-M
rows whose M comes from :meth:`MIP.row_bounds`, interval arithmetic over variable bounds;
CP-SAT: native enforcement literals on integer-scaled rows). Nothing here imports a solver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

INF = math.inf


def merge_terms(idx, val) -> tuple[np.ndarray, np.ndarray]:
    """Sum coefficients of repeated variables (solvers reject or mishandle duplicate entries);
    drop exact zeros."""
    idx = np.asarray(idx, dtype=np.int64)
    val = np.asarray(val, dtype=float)
    uniq, inv = np.unique(idx, return_inverse=True)
    summed = np.zeros(len(uniq))
    np.add.at(summed, inv, val)
    nz = summed != 0.0
    return uniq[nz], summed[nz]


@dataclass
class Var:
    name: str
    lb: float
    ub: float
    integer: bool
    #: for continuous variables: the resolution an integer backend should represent them at
    #: (same unit as the variable); None = let the backend choose from the bounds
    resolution: float | None = None


@dataclass
class Row:
    """lb <= Σ coef·x <= ub."""

    name: str
    idx: np.ndarray
    val: np.ndarray
    lb: float = -INF
    ub: float = INF


@dataclass
class Indicator:
    """binary = 1  =>  lb <= Σ coef·x <= ub."""

    name: str
    binary: int
    row: Row


@dataclass
class MIP:
    name: str = "codesign"
    vars: list[Var] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    indicators: list[Indicator] = field(default_factory=list)
    obj_idx: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    obj_val: np.ndarray = field(default_factory=lambda: np.zeros(0))
    obj_constant: float = 0.0
    #: variables are grouped by family (name prefix) for reporting
    _names: dict[str, int] = field(default_factory=dict)

    # --- building ---------------------------------------------------------------------------
    def add_var(self, name: str, lb: float = 0.0, ub: float = INF, *, integer: bool = False, resolution: float | None = None) -> int:
        if name in self._names:
            raise ValueError(f"duplicate variable name {name!r}")
        if lb > ub:
            raise ValueError(f"variable {name}: lb {lb} > ub {ub}")
        self._names[name] = len(self.vars)
        self.vars.append(Var(name, float(lb), float(ub), integer, resolution))
        return len(self.vars) - 1

    def add_binary(self, name: str) -> int:
        return self.add_var(name, 0.0, 1.0, integer=True)

    def add_row(self, name: str, idx, val, lb: float = -INF, ub: float = INF) -> Row:
        idx, val = merge_terms(idx, val)
        row = Row(name, idx, val, float(lb), float(ub))
        self.rows.append(row)
        return row

    def add_indicator(self, name: str, binary: int, idx, val, lb: float = -INF, ub: float = INF) -> Indicator:
        if not (self.vars[binary].integer and self.vars[binary].lb >= 0 and self.vars[binary].ub <= 1):
            raise ValueError(f"indicator {name}: variable {self.vars[binary].name} is not binary")
        idx, val = merge_terms(idx, val)
        ind = Indicator(name, binary, Row(name, idx, val, float(lb), float(ub)))
        self.indicators.append(ind)
        return ind

    def set_objective(self, idx, val, constant: float = 0.0) -> None:
        """Minimise Σ val·x + constant."""
        self.obj_idx, self.obj_val = merge_terms(idx, val)
        self.obj_constant = float(constant)

    def checkpoint(self) -> tuple[int, int, int]:
        """The model's size now: :meth:`restore` removes what was added after it."""
        return len(self.vars), len(self.rows), len(self.indicators)

    def restore(self, mark: tuple[int, int, int]) -> None:
        """Remove the variables, rows and indicator rows added since ``mark`` (:meth:`checkpoint`);
        rows added since may refer only to variables that existed then or were added since."""
        nvars, nrows, ninds = mark
        for v in self.vars[nvars:]:
            del self._names[v.name]
        del self.vars[nvars:], self.rows[nrows:], self.indicators[ninds:]

    # --- queries ------------------------------------------------------------------------------
    def index(self, name: str) -> int:
        return self._names[name]

    @property
    def lbs(self) -> np.ndarray:
        return np.array([v.lb for v in self.vars])

    @property
    def ubs(self) -> np.ndarray:
        return np.array([v.ub for v in self.vars])

    def row_bounds(self, idx: np.ndarray, val: np.ndarray) -> tuple[float, float]:
        """Interval-arithmetic range of Σ val·x over the variables' bounds (the source of every M)."""
        lb = self.lbs[idx]
        ub = self.ubs[idx]
        with np.errstate(invalid="ignore"):
            lo = np.where(val >= 0, val * lb, val * ub)
            hi = np.where(val >= 0, val * ub, val * lb)
        lo = np.where(val == 0, 0.0, lo)
        hi = np.where(val == 0, 0.0, hi)
        return float(lo.sum()), float(hi.sum())

    def objective_value(self, x: np.ndarray) -> float:
        return float(self.obj_val @ x[self.obj_idx]) + self.obj_constant

    def check(self, x: np.ndarray, tol: float = 1e-6) -> list[str]:
        """Names of rows/indicators/bounds violated by ``x`` (absolute+relative tolerance)."""
        bad = []
        for v, xi in zip(self.vars, x, strict=True):
            if xi < v.lb - tol or xi > v.ub + tol:
                bad.append(f"bound {v.name}")
            if v.integer and abs(xi - round(xi)) > tol:
                bad.append(f"integrality {v.name}")
        for r in self.rows:
            s = float(r.val @ x[r.idx])
            if s < r.lb - tol * max(1, abs(r.lb)) or s > r.ub + tol * max(1, abs(r.ub)):
                bad.append(r.name)
        for ind in self.indicators:
            if x[ind.binary] > 0.5:
                r = ind.row
                s = float(r.val @ x[r.idx])
                if s < r.lb - tol * max(1, abs(r.lb)) or s > r.ub + tol * max(1, abs(r.ub)):
                    bad.append(ind.name)
        return bad

    def stats(self) -> dict[str, int]:
        return {
            "variables": len(self.vars),
            "binaries": sum(1 for v in self.vars if v.integer and v.lb >= 0 and v.ub <= 1),
            "rows": len(self.rows),
            "indicators": len(self.indicators),
            "nonzeros": int(sum(len(r.idx) for r in self.rows) + sum(len(i.row.idx) for i in self.indicators)),
        }
