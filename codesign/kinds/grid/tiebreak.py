"""The least value of a hardware metric over the feasible designs of a grid instance.

``pareto`` optimises one metric under a budget on the other; when the budgeted metric is one of
the hardware (``power_W``, ``area_mm2``, a hardware decision, ...), which is no objective of the
kind, the designs tied with an optimum are told apart here instead of by one ε-solve each
(``deepstack-qwen3-235b`` tokens/s against area: 145 solves for 12 points).

Exact by the model's own decomposed enumeration, the bound presolve's
(:func:`codesign.kinds.grid.space.hardware_values`): every constraint involves the hardware alone
or one workload and the hardware, so a hardware design admits a feasible design iff it meets the
hardware-only constraints and every workload has a feasible layout on it. Among those hardware
designs the least metric (ties: the best objective, then the first) is the answer; the metric of a
hardware design is the left side of the budget ``metric <= ...`` as the model compiles it
(``system_power_W`` = devices x ``power_W``). The chosen design is re-evaluated by the model.
"""

from __future__ import annotations

import numpy as np

from codesign.errors import ModelError
from codesign.kinds.base import Assessment
from codesign.kinds.grid import spec as grid_spec
from codesign.kinds.grid.formulation import DECOMPOSE_MAX_PAIRS
from codesign.kinds.grid.space import build_tables, design_of, hardware_values
from codesign.model.budgets import DECISION_METRICS, HARDWARE_METRICS
from codesign.model.evaluate import constraint_lhs, constraints, holds


class NotApplicable(Exception):
    """The enumeration does not apply (not a hardware metric, coupled workloads, too many pairs)."""


def least_hardware_metric(problem, metric: str) -> Assessment | None:
    """The feasible design of ``problem`` (a :class:`~codesign.kinds.grid.problem.Grid`, its budgets
    included) with the least ``metric``, as the model assesses it; None when no design is feasible.
    Raises :class:`NotApplicable` where the enumeration does not apply."""
    if metric not in HARDWARE_METRICS and metric not in DECISION_METRICS:
        raise NotApplicable(f"{metric} is no hardware metric")
    inst = problem.inst
    tables = build_tables(inst)
    hw = tables.hw
    names = {w.name for w in inst.workloads}
    cons = constraints(inst, hw, tables.scheds)
    if any(c.workload is not None and c.workload not in names for c in cons):
        raise NotApplicable("a constraint couples workloads")
    if any(s.size == 0 for s in tables.scheds.values()):
        return None
    ok = np.ones(hw.size, dtype=bool)
    for c in cons:
        if c.workload is None:
            rhs = c.rhs + (hw.column(c.rhs_hw) if c.rhs_hw else 0.0)
            ok &= holds(constraint_lhs(c, hw, None)[:, 0], rhs)
    rows = np.flatnonzero(ok)
    if len(rows) * sum(s.size for s in tables.scheds.values()) > DECOMPOSE_MAX_PAIRS:
        raise NotApplicable("too many (hardware, layout) pairs to enumerate")
    text = f"{metric} <= 1"
    probe = grid_spec.with_budgets(inst, [text])
    measure = [c for c in constraints(probe, hw, tables.scheds) if c.name.startswith("budget[") and c.text == text][-1]
    value = constraint_lhs(measure, hw, None)[:, 0][rows]
    hv = hardware_values(inst, tables, rows, cons=cons, hardware_checked=True)
    feasible = np.flatnonzero(np.isfinite(hv.total))
    if len(feasible) == 0:
        return None
    best = feasible[np.lexsort((hv.total[feasible], value[feasible]))[0]]
    design = design_of(inst, tables, int(rows[best]), {w: int(hv.arg[w][best]) for w in hv.arg})
    a = problem.assess(design)
    if not a.feasible:
        raise ModelError(f"the enumeration's design {design} is infeasible by the model: {'; '.join(a.violations)}")
    return a
