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

from codesign.instance import Instance
from codesign.model.evaluate import (
    constraint_lhs,
    constraints,
    eval_form,
    holds,
    objective_from_internal,
    objective_terms,
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


def brute_force(
    inst: Instance,
    tables: Tables | None = None,
    *,
    chunk_points: int = 4_000_000,
    rel_tol: float = 1e-9,
    progress: Callable[[int, int], None] | None = None,
) -> BruteForceResult:
    """Exact optimum by enumeration (see module docstring)."""
    t0 = time.perf_counter()
    tables = tables or build_tables(inst)
    hw = tables.hw
    cons = constraints(inst, hw, tables.scheds)
    terms = objective_terms(inst)
    if any(s.size == 0 for s in tables.scheds.values()):
        return BruteForceResult(False, None, None, None, 0, time.perf_counter() - t0, 0)
    max_s = max(s.size for s in tables.scheds.values())
    chunk = max(1, chunk_points // max_s)
    best_val = np.inf
    best: tuple[int, dict[str, int]] | None = None
    total_count = 0
    # per hardware row: best objective contribution and argmin per workload
    all_vals = np.full(hw.size, np.inf)
    all_arg: dict[str, np.ndarray] = {w.name: np.full(hw.size, -1) for w in inst.workloads}
    all_ties: dict[str, np.ndarray] = {w.name: np.zeros(hw.size, dtype=np.int64) for w in inst.workloads}
    for start in range(0, hw.size, chunk):
        rows = np.arange(start, min(hw.size, start + chunk))
        ok_hw = _feasible_mask(inst, tables, cons, rows)
        acc = np.where(ok_hw, 0.0, np.inf)
        for wname, metric, weight in terms:
            st = tables.scheds[wname]
            spec = next(w for w in inst.workloads if w.name == wname)
            forms = workload_forms(st, spec.precision)
            obj = eval_form(forms[metric], hw, st, hw_rows=rows)
            feas = np.ones_like(obj, dtype=bool)
            for c in cons:
                if c.workload != wname:
                    continue
                lhs = constraint_lhs(c, hw, st, hw_rows=rows)
                rhs = c.rhs + (hw.column(c.rhs_hw)[rows][:, None] if c.rhs_hw else 0.0)
                feas &= holds(lhs, rhs)
            obj = np.where(feas & np.isfinite(obj), obj, np.inf)
            arg = np.argmin(obj, axis=1)
            val = obj[np.arange(len(rows)), arg]
            ties = np.sum(obj <= val[:, None] * (1 + rel_tol), axis=1)
            all_arg[wname][rows] = arg
            all_ties[wname][rows] = ties
            acc = acc + weight * val
        all_vals[rows] = acc
        total_count += len(rows) * math.prod(s.size for s in tables.scheds.values())
        if progress:
            progress(int(rows[-1]) + 1, hw.size)
    h = int(np.argmin(all_vals))
    best_val = float(all_vals[h])
    if not np.isfinite(best_val):
        return BruteForceResult(False, None, None, None, total_count, time.perf_counter() - t0, 0)
    best = (h, {w: int(all_arg[w][h]) for w in all_arg})
    design = design_of(inst, tables, best[0], best[1])
    near = np.flatnonzero(all_vals <= best_val * (1 + rel_tol))
    ties = int(sum(math.prod(int(all_ties[w][r]) for w in all_ties) for r in near))
    return BruteForceResult(
        True, objective_from_internal(inst, best_val), best_val, design, total_count, time.perf_counter() - t0, ties
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
