"""Design space: the decisions of an instance, the exact size of the space, and chunked vectorised
enumeration (the brute-force reference the MIP is tested against).

The space is the Cartesian product of every decision's domain (``size``). Layouts that break a
divisibility rule (TP must divide the heads, TP x PP the devices, ...) are never feasible; they
are removed before enumeration (``structural_size`` counts what is left). Because every
constraint either involves the hardware alone or one workload and the hardware, and the objective
is a weighted sum over workloads, enumeration is exact when it takes, for every hardware design,
each workload's best schedule independently; :func:`brute_force` does that, chunk by chunk.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from codesign.kinds.grid.spec import Instance
from codesign.model.evaluate import (
    Form,
    constraint_lhs,
    constraints,
    holds,
    objective_from_internal,
    objective_terms,
    terms,
    workload_forms,
)
from codesign.model.hardware import HardwareTable, hardware_table
from codesign.model.schedule import ScheduleTable, schedule_table


def space_size(inst: Instance) -> int:
    """Number of design points: the product of every decision's domain size (exact integer)."""
    return math.prod(len(d.domain) for d in inst.decisions)


@dataclass
class Tables:
    hw: HardwareTable
    scheds: dict[str, ScheduleTable]

    @property
    def structural_size(self) -> int:
        return self.hw.size * math.prod(s.size for s in self.scheds.values())


def build_tables(inst: Instance) -> Tables:
    """Hardware and schedule feature tables over the whole (structurally feasible) space."""
    hw = hardware_table(inst)
    scheds = {w.name: schedule_table(inst, w.name) for w in inst.workloads}
    return Tables(hw, scheds)


@dataclass
class BruteForceResult:
    feasible: bool
    objective: float | None  # user's objective (tokens/s or a weighted mean)
    internal: float | None  # Σ weight × metric, minimised
    design: dict[str, Any] | None
    points: int  # structurally feasible design points covered
    seconds: float
    optimal_count: int  # designs within rel_tol of the optimum (ties)
    complete: bool = True  # False: a deadline stopped the enumeration (the best of the part done)

    @property
    def points_per_s(self) -> float:
        return self.points / self.seconds if self.seconds > 0 else float("inf")


def _feasible_mask(inst, tables, cons, rows) -> np.ndarray:
    """(H_chunk,) mask of hardware-only constraints."""
    mask = np.ones(len(rows), dtype=bool)
    for c in cons:
        if c.workload is None:
            lhs = constraint_lhs(c, tables.hw, None, hw_rows=rows)[:, 0]
            rhs = c.rhs + (tables.hw.column(c.rhs_hw)[rows] if c.rhs_hw else 0.0)
            mask &= holds(lhs, rhs)
    return mask


def _outer(h: np.ndarray, a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """h ⊗ a with 0·inf = 0 (the model's rule for an unused tier of a design that lacks it),
    written into ``out`` when given (shape (len(h), len(a)))."""
    with np.errstate(invalid="ignore"):
        out = np.multiply(h[:, None], a[None, :], out=out)
    zero = a == 0.0
    if zero.any() and not np.isfinite(h).all():
        out[:, zero] = 0.0
    return out


def fast_eval_form(
    form: Form,
    hw: HardwareTable,
    st: ScheduleTable,
    hw_rows: np.ndarray,
    hcols: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """The same values as :func:`codesign.model.evaluate.eval_form` (shape (H, S)), computed
    faster: the linear products with finite hardware columns are one matrix product
    (H×K)·(K×S); the others and the max groups are outer products written into one scratch
    array (no temporaries per product). Equal to the model up to the order of floating-point
    additions (a few ulps).

    ``hcols``: a cache of whole hardware columns (name -> column over every hardware row)
    shared by the calls of one enumeration, so that a chunked enumeration computes each
    product column ``a*b`` once instead of once per chunk."""
    cache: dict[str, np.ndarray] = {}

    def h(name: str) -> np.ndarray:
        if name not in cache:
            if hcols is None:
                cache[name] = hw.column(name)[hw_rows]
            else:
                cache[name] = _hcol(hcols, hw, name)[hw_rows]
        return cache[name]

    n_h, n_s = len(hw_rows), st.size
    fin_h, fin_a, other = [], [], []
    for p in form.linear:
        hv, av = h(p.hw), st.column(p.sched)
        if np.isfinite(hv).all():
            fin_h.append(hv)
            fin_a.append(av)
        else:
            other.append((hv, av))
    buf: np.ndarray | None = None
    if other or not fin_h:
        total = np.zeros((n_h, n_s))
        for hv, av in other:
            buf = _outer(hv, av, buf)
            total += buf
        if fin_h:
            total += np.column_stack(fin_h) @ np.vstack(fin_a)
    else:
        # 0 + M == M exactly: the matrix product is the running total
        total = np.column_stack(fin_h) @ np.vstack(fin_a)
    for group in form.maxes:
        if any(isinstance(b, tuple) for b in group):  # branches that sum products (eq. 5.3a)
            m = None
            for b in group:
                v = np.zeros((n_h, n_s))
                for p in terms(b):
                    buf = _outer(h(p.hw), st.column(p.sched), buf)
                    v += buf
                m = v if m is None else np.maximum(m, v, out=m)
            if m is not None:
                total += m
            continue
        cols = [(h(p.hw), st.column(p.sched)) for p in group]
        if not cols:
            continue
        if all((hv >= 0).all() and (av >= 0).all() for hv, av in cols):
            # a product that is 0 everywhere never raises a max of nonnegative products
            cols = [(hv, av) for hv, av in cols if (av != 0).any()] or cols[:1]
        m = _outer(*cols[0])
        for hv, av in cols[1:]:
            buf = _outer(hv, av, buf)
            np.maximum(m, buf, out=m)
        total += m
    return total


def _hcol(hcols: dict[str, np.ndarray], hw: HardwareTable, name: str) -> np.ndarray:
    """A whole hardware column, from the cache ``hcols`` (filled on first use)."""
    col = hcols.get(name)
    if col is None:
        col = hcols[name] = hw.column(name)
    return col


def constraint_values(
    c, hw: HardwareTable, st: ScheduleTable, rows: np.ndarray, hcols: dict[str, np.ndarray] | None = None
) -> np.ndarray:
    """Left-hand side of a per-workload constraint for every (hardware row, schedule) pair."""
    total = None
    for coef, form in c.lhs:
        v = fast_eval_form(form, hw, st, rows, hcols)
        if coef != 1.0:
            v *= coef
        total = v if total is None else total + v
    return total


@dataclass
class HardwareValues:
    """Per hardware design: the best value of Σ weight × metric over every workload's schedules
    (each workload optimised independently: exact, because every constraint involves the
    hardware alone or one workload and the hardware), ``inf`` where no schedule is feasible."""

    rows: np.ndarray  # hardware-table rows evaluated
    total: np.ndarray  # (len(rows),) Σ_w weight_w × min_s metric_w, inf if infeasible
    arg: dict[str, np.ndarray]  # workload -> best schedule row per hardware row (-1: none)
    ties: dict[str, np.ndarray]  # workload -> schedules within rel_tol of the best
    pairs: int  # (hardware, schedule) pairs evaluated
    complete: bool = True  # False: a deadline stopped it (the rows not reached have total inf)


def hardware_values(
    inst: Instance,
    tables: Tables,
    rows: np.ndarray | None = None,
    *,
    cons: list | None = None,
    chunk_points: int = 4_000_000,
    rel_tol: float = 1e-9,
    hardware_checked: bool = False,
    progress: Callable[[int, int], None] | None = None,
    prune: bool = False,
    deadline: float | None = None,
) -> HardwareValues:
    """Decomposed exact evaluation of the hardware designs ``rows`` (default all), chunk by chunk.

    ``cons``: the constraints (default the instance's); ``hardware_checked``: the rows are
    known to pass the hardware-only constraints (skip re-checking them).

    ``prune``: bound-based pruning across workloads. Workloads are evaluated one after the
    other; after the first, the best design so far is completed exactly (the incumbent), and a
    design whose partial sum already exceeds it is dropped (its ``total`` is inf). Exact for
    the optimum because every objective metric is >= 0 (checked; pruning stops otherwise);
    ``arg``/``ties`` are then only meaningful for designs left.

    ``deadline`` (a ``time.perf_counter()`` value, not with ``prune``): no chunk is started after
    it but the first; the rows not reached keep ``total`` inf and ``complete`` is False."""
    if prune and len(inst.workloads) > 1:
        return _hardware_values_pruned(inst, tables, rows, cons=cons, chunk_points=chunk_points,
                                       rel_tol=rel_tol, hardware_checked=hardware_checked)
    hw = tables.hw
    rows = np.arange(hw.size) if rows is None else np.asarray(rows)
    cons = constraints(inst, hw, tables.scheds) if cons is None else cons
    terms = objective_terms(inst)
    total = np.full(len(rows), np.inf)
    arg = {w.name: np.full(len(rows), -1) for w in inst.workloads}
    ties = {w.name: np.zeros(len(rows), dtype=np.int64) for w in inst.workloads}
    if any(s.size == 0 for s in tables.scheds.values()) or len(rows) == 0:
        return HardwareValues(rows, total, arg, ties, 0)
    max_s = max(s.size for s in tables.scheds.values())
    chunk = max(1, chunk_points // max_s)
    specs = {w.name: w for w in inst.workloads}
    forms = {w: workload_forms(tables.scheds[w], specs[w].precision) for w, _, _ in terms}
    pairs = 0
    if not hardware_checked:
        # designs breaking a hardware-only constraint are infeasible whatever the schedules
        idx = np.flatnonzero(_feasible_mask(inst, tables, cons, rows))
    else:
        idx = np.arange(len(rows))
    hcols: dict[str, np.ndarray] = {}  # whole hardware columns, computed once for every chunk
    complete = True
    for start in range(0, len(idx), chunk):
        if start and deadline is not None and time.perf_counter() > deadline:
            complete = False
            break
        sl = idx[start : start + chunk]
        part = rows[sl]
        acc = np.zeros(len(part))
        for wname, metric, weight in terms:
            st = tables.scheds[wname]
            obj = fast_eval_form(forms[wname][metric], hw, st, part, hcols)
            bad = ~np.isfinite(obj)
            for c in cons:
                if c.workload != wname:
                    continue
                lhs = constraint_values(c, hw, st, part, hcols)
                rhs = c.rhs + (_hcol(hcols, hw, c.rhs_hw)[part][:, None] if c.rhs_hw else 0.0)
                bad |= ~holds(lhs, rhs)
            obj[bad] = np.inf
            a = np.argmin(obj, axis=1)
            val = obj[np.arange(len(part)), a]
            arg[wname][sl] = np.where(np.isfinite(val), a, -1)
            ties[wname][sl] = np.sum(obj <= val[:, None] * (1 + rel_tol), axis=1)
            acc = acc + weight * val
            pairs += obj.size
        total[sl] = acc
        if progress:
            progress(start + len(part), len(idx))
    return HardwareValues(rows, total, arg, ties, pairs, complete)


def _hardware_values_pruned(inst, tables, rows, *, cons, chunk_points, rel_tol, hardware_checked) -> HardwareValues:
    hw = tables.hw
    rows = np.arange(hw.size) if rows is None else np.asarray(rows)
    cons = constraints(inst, hw, tables.scheds) if cons is None else cons
    idx = np.arange(len(rows)) if hardware_checked else np.flatnonzero(_feasible_mask(inst, tables, cons, rows))
    total = np.full(len(rows), np.inf)
    arg = {w.name: np.full(len(rows), -1) for w in inst.workloads}
    ties = {w.name: np.zeros(len(rows), dtype=np.int64) for w in inst.workloads}
    partial = np.zeros(len(idx))
    incumbent = np.inf
    # every metric >= 0 (all its products have nonnegative factors): a partial sum is a bound
    nonneg = all(w >= 0 for _, _, w in objective_terms(inst))
    for w in inst.workloads:
        st = tables.scheds[w.name]
        metric = dict((t[0], t[1]) for t in objective_terms(inst))[w.name]
        form = workload_forms(st, w.precision)[metric]
        for p in form.products:
            hcol = hw.column(p.hw)[rows]
            nonneg &= bool((hcol >= 0).all() and (st.column(p.sched) >= 0).all())
    pairs = 0
    for k, w in enumerate(inst.workloads):
        if len(idx) == 0:
            break
        one = hardware_values(
            _OneWorkload(inst, w.name), tables, rows[idx], cons=[c for c in cons if c.workload == w.name],
            chunk_points=chunk_points, rel_tol=rel_tol, hardware_checked=True,
        )
        pairs += one.pairs
        partial = partial + one.total
        arg[w.name][idx] = one.arg[w.name]
        ties[w.name][idx] = one.ties[w.name]
        if k == 0 and np.isfinite(partial).any() and len(inst.workloads) > 1:
            r = idx[int(np.argmin(partial))]
            incumbent = float(hardware_values(inst, tables, rows[[r]], cons=cons, hardware_checked=True).total[0])
        if nonneg:
            keep = np.isfinite(partial) & (partial <= incumbent + 1e-12 * abs(incumbent))
            idx, partial = idx[keep], partial[keep]
    total[idx] = partial
    return HardwareValues(rows, total, arg, ties, pairs)


def workload_values(
    inst: Instance,
    tables: Tables,
    rows: np.ndarray | None = None,
    *,
    cons: list | None = None,
    hardware_checked: bool = False,
    deadline: float | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], bool]:
    """Per workload, on each hardware design of ``rows`` (default all): its least objective metric
    (unweighted, SI: s/token for a throughput objective) over its feasible schedules, ``inf`` where
    none is feasible or the hardware breaks a hardware-only constraint, and the schedule row that
    reaches it (-1: none). Exact for the same reason as :func:`hardware_values`: a workload's
    constraints involve the hardware and that workload only. The third value is False when
    ``deadline`` stopped an evaluation (rows not reached are ``inf``)."""
    rows = np.arange(tables.hw.size) if rows is None else np.asarray(rows)
    cons = constraints(inst, tables.hw, tables.scheds) if cons is None else cons
    values: dict[str, np.ndarray] = {}
    args: dict[str, np.ndarray] = {}
    complete = True
    for w in inst.workloads:
        own = [c for c in cons if c.workload in (None, w.name)]
        hv = hardware_values(_OneWorkload(inst, w.name), tables, rows, cons=own, hardware_checked=hardware_checked,
                             deadline=deadline)
        values[w.name] = hv.total / w.weight
        args[w.name] = hv.arg[w.name]
        complete &= hv.complete
    return values, args, complete


class _OneWorkload:
    """An instance seen through one of its workloads (for per-workload evaluation)."""

    def __init__(self, inst: Instance, workload: str):
        self._inst = inst
        self.workloads = [w for w in inst.workloads if w.name == workload]

    def __getattr__(self, name):
        return getattr(self._inst, name)


def brute_force(
    inst: Instance,
    tables: Tables | None = None,
    *,
    chunk_points: int = 4_000_000,
    rel_tol: float = 1e-9,
    progress: Callable[[int, int], None] | None = None,
    deadline: float | None = None,
) -> BruteForceResult:
    """Exact optimum by enumeration (see module docstring); a ``deadline``
    (``time.perf_counter()``) stops it between chunks with the best design of the part done
    (``complete`` False)."""
    t0 = time.perf_counter()
    tables = tables or build_tables(inst)
    hw = tables.hw
    if any(s.size == 0 for s in tables.scheds.values()):
        return BruteForceResult(False, None, None, None, 0, time.perf_counter() - t0, 0)
    hv = hardware_values(inst, tables, chunk_points=chunk_points, rel_tol=rel_tol, progress=progress, deadline=deadline)
    total_count = hw.size * math.prod(s.size for s in tables.scheds.values())
    all_vals = hv.total
    h = int(np.argmin(all_vals))
    best_val = float(all_vals[h])
    if not np.isfinite(best_val):
        return BruteForceResult(False, None, None, None, total_count, time.perf_counter() - t0, 0, hv.complete)
    design = design_of(inst, tables, h, {w: int(hv.arg[w][h]) for w in hv.arg})
    near = np.flatnonzero(all_vals <= best_val * (1 + rel_tol))
    ties = int(sum(math.prod(int(hv.ties[w][r]) for w in hv.ties) for r in near))
    return BruteForceResult(
        True, objective_from_internal(inst, best_val), best_val, design, total_count, time.perf_counter() - t0, ties,
        hv.complete,
    )


def design_of(inst: Instance, tables: Tables, hw_row: int, sched_rows: dict[str, int]) -> dict[str, Any]:
    """The design (decision name -> value) of a hardware row and one schedule row per workload."""
    design: dict[str, Any] = {}
    for d in inst.hardware_decisions:
        design[d.name] = _py(tables.hw.decisions[d.name][hw_row])
    for w in inst.workloads:
        st = tables.scheds[w.name]
        for d in inst.schedule_decisions(w.name):
            design[d.name] = _py(st.decisions[d.key][sched_rows[w.name]])
    return design


def _py(x: Any) -> Any:
    """numpy scalar -> plain Python (for JSON and domain membership)."""
    return x.item() if hasattr(x, "item") else x
