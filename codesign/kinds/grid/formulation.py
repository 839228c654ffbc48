"""The recipe: decision encodings -> constraint families -> objective (formulations/codesign.md).

``build(inst)`` compiles the analytical model of an instance into a solver-neutral MIP that is
exact on the finite design space:

1. ``add_hardware_choice``: one-hot x_h over the hardware designs that pass every hardware-only
   constraint (thermal junction, appliance ports, power/area/temperature budgets) — removing a
   design that violates a constraint involving it alone is exact.
2. ``add_schedule_choice``: per workload, one-hot y_s over the layouts that satisfy the
   divisibility rules (the schedule table holds only those) and fit the largest local memory.
3. ``add_memory_capacity`` (memory rows, linear in both one-hots) and ``add_form_upper`` (every
   other per-workload constraint: SLOs, the energy budget, custom budgets), each the model's form
   compiled by :func:`compile_form`.
4. ``add_objective``: Σ_w weight_w × metric_w (minimised); ``explain`` minimises one constraint's
   violation instead (``add_violation_objective``).

Every form is Σ a(S)·h(H) + Σ max(...): products become exact disaggregated expressions
(:func:`linearize.product`), maxes epigraph variables (exact because they are only minimised or
bounded above). Each form is expressed in its own unit (its value at the baseline design) so that
coefficients stay near 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codesign.kinds.base import Formulation
from codesign.kinds.grid.space import Tables, build_tables, design_of, hardware_values
from codesign.kinds.grid.spec import Instance
from codesign.mip import linearize as lin
from codesign.mip.program import MIP
from codesign.model.evaluate import (
    WORKLOAD_METRICS,
    Constraint,
    Form,
    constraint_lhs,
    constraints,
    eval_form,
    holds,
    objective_terms,
    terms,
    workload_forms,
)


@dataclass
class Compiled:
    """A built MIP and what is needed to read a design back from its solution."""

    inst: Instance
    tables: Tables
    mip: MIP
    hw_rows: np.ndarray  # hardware-table row of each x variable
    x: np.ndarray  # variable indices of x
    sched_rows: dict[str, np.ndarray]
    y: dict[str, np.ndarray]
    objective_unit: float  # internal objective = MIP objective x objective_unit
    pruned: dict[str, int] = field(default_factory=dict)
    empty_reason: str | None = None
    #: products encoded on an integer grid (for CP-SAT) instead of the convex-hull form
    integer_grid: bool = False
    #: Σ weight × metric of the best design found by the bound presolve (None: not run)
    presolve_best: float | None = None

    def decode(self, values: np.ndarray) -> dict[str, Any]:
        """Design named by a solution vector (binaries read through one tolerance)."""
        h = self.hw_rows[_chosen(values[self.x])]
        s = {w: int(self.sched_rows[w][_chosen(values[idx])]) for w, idx in self.y.items()}
        return design_of(self.inst, self.tables, int(h), s)


def formulation_of(comp: Compiled) -> Formulation:
    """The solve driver's view of a compiled grid MIP: the one-hots of the hardware design and of
    each workload's schedule identify a design."""
    inst, tables = comp.inst, comp.tables
    if comp.empty_reason:
        return Formulation(mip=comp.mip, objective_unit=comp.objective_unit, decode=comp.decode,
                           design_vars=np.zeros(0, dtype=np.int64), empty_reason=comp.empty_reason,
                           stats={**comp.mip.stats(), "pruned": dict(comp.pruned)})
    first = {w: int(rows[0]) for w, rows in comp.sched_rows.items()}
    hw_names = {d.name for d in inst.hardware_decisions}
    owner = {int(v): ("hw", int(r)) for v, r in zip(comp.x, comp.hw_rows, strict=True)}
    for w, ys in comp.y.items():
        owner.update({int(v): (w, int(r)) for v, r in zip(ys, comp.sched_rows[w], strict=True)})

    def describe(var: int) -> dict[str, Any]:
        what, row = owner[var]
        if what == "hw":
            design = design_of(inst, tables, row, first)
            return {k: v for k, v in design.items() if k in hw_names}
        design = design_of(inst, tables, int(comp.hw_rows[0]), {**first, what: row})
        names = {d.name for d in inst.schedule_decisions(what)}
        return {k: v for k, v in design.items() if k in names}

    return Formulation(
        mip=comp.mip, objective_unit=comp.objective_unit, decode=comp.decode,
        design_vars=np.concatenate([comp.x, *comp.y.values()]), onehot=True, integer_grid=comp.integer_grid,
        stats={**comp.mip.stats(), "pruned": dict(comp.pruned)}, describe=describe,
    )


#: step of the integer grid, relative to each form's unit (forms are O(1) in their unit): every
#: product is under-estimated by less than this; the solve loop restores exactness
INTEGER_RESOLUTION = 1e-6

#: memory rows on integer grids count whole MiB
MEMORY_STEP_B = 2.0**20

#: a binary counts as chosen when its value exceeds this (solvers return 1 ± 1e-6)
BINARY_ON = 0.5


def _chosen(vals: np.ndarray) -> int:
    on = np.flatnonzero(vals > BINARY_ON)
    if len(on) != 1:
        raise ValueError(f"one-hot has {len(on)} chosen values")
    return int(on[0])


def _hardware_ok(inst: Instance, tables: Tables, cons: list[Constraint]) -> np.ndarray:
    hw = tables.hw
    ok = np.ones(hw.size, dtype=bool)
    for c in cons:
        if c.workload is None:
            lhs = constraint_lhs(c, hw, None)[:, 0]
            rhs = c.rhs + (hw.column(c.rhs_hw) if c.rhs_hw else 0.0)
            ok &= holds(lhs, rhs)
    return ok


def compile_form(
    mip: MIP, name: str, form: Form, comp: Compiled, workload: str, unit: float, *, exact: bool = False
) -> lin.Expr:
    """Exact linear expression of form/unit over the one-hots (products + maxes).

    A max becomes an epigraph variable, exact when the form is minimised or bounded above; with
    ``exact`` (the form enters with a negative sign) it becomes an exact max (binary branch)."""
    hw = comp.tables.hw
    st = comp.tables.scheds[workload]
    srows = comp.sched_rows[workload]
    y = comp.y[workload]

    def prod(p) -> lin.Expr:
        a = st.column(p.sched)[srows]
        h = hw.column(p.hw)[comp.hw_rows]
        if comp.integer_grid:
            return lin.product_indicator(mip, f"{name}:{p.name}", a, y, h, comp.x, unit, INTEGER_RESOLUTION, two_sided=exact)
        return lin.product(mip, f"{name}:{p.name}", a, y, h, comp.x, unit)

    parts = [prod(p) for p in form.linear]
    shared: dict = {}  # a product several branches sum (eq. 5.3a) is compiled once
    for g, group in enumerate(form.maxes):
        exprs = [lin.add(*[shared[p] if p in shared else shared.setdefault(p, prod(p)) for p in terms(b)])
                 for b in group]
        exprs = [e for e in exprs if len(e[0])]
        if not exprs:
            continue
        if len(exprs) == 1:
            parts.append(exprs[0])
            continue
        bounds = [mip.row_bounds(*e) for e in exprs]
        if exact and len(exprs) > 1:
            parts.append(lin.exact_max(mip, f"{name}:max{g}", exprs, bounds))
        else:
            step = INTEGER_RESOLUTION if comp.integer_grid else None
            parts.append(lin.epigraph_max(mip, f"{name}:max{g}", exprs, max(b[1] for b in bounds), step))
    return lin.add(*parts) if parts else lin.empty()


def _unit(value: float) -> float:
    return value if np.isfinite(value) and value > 0 else 1.0


def build(
    inst: Instance,
    tables: Tables | None = None,
    *,
    include: set[str] | None = None,
    objective: Constraint | None = None,
    integer_grid: bool = False,
    extra_constraints: list[Constraint] | None = None,
    decompose: bool = False,
) -> Compiled:
    """Compile ``inst`` into an exact MIP (see module docstring).

    ``include``: names of the constraints to keep (default all; ``explain`` drops some).
    ``objective``: minimise this constraint's left-hand side minus its right-hand side instead of
    the instance objective (``explain`` asks how far a limit must move).
    ``decompose``: run the decomposed bound presolve (:func:`bound_presolve`) when it applies
    (``solve`` does; ``export`` and ``explain`` keep every design).
    """
    tables = tables or build_tables(inst)
    mip = MIP(name=inst.name)
    cons = [c for c in constraints(inst, tables.hw, tables.scheds) if include is None or c.name in include]
    cons += list(extra_constraints or [])
    comp = Compiled(inst, tables, mip, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), {}, {}, 1.0)
    comp.integer_grid = integer_grid
    add_hardware_choice(comp, cons, extra=objective, decompose=decompose)
    add_schedule_choice(comp, memory=any(c.name.startswith("memory-capacity") for c in cons))
    if comp.empty_reason:
        return comp
    base = add_workload_constraints(comp, cons)
    if objective is None:
        add_objective(comp, base)
    else:
        add_violation_objective(comp, objective)
    return comp


#: the decomposed bound presolve runs when it evaluates at most this many (hardware, schedule)
#: pairs (about 1e8 pairs/s vectorised on one core)
DECOMPOSE_MAX_PAIRS = 300_000_000
#: with the bound presolve on, the skyline stops once it keeps this many designs (the bound
#: presolve then runs first, and the skyline on what it leaves)
SKYLINE_MAX_KEEP = 1000
#: hardware designs whose exact best value is within this relative distance of the best one are
#: kept for the MIP (ties and near-ties); every other design is provably worse
DECOMPOSE_KEEP_RTOL = 1e-6


def add_hardware_choice(
    comp: Compiled, cons: list[Constraint], extra: Constraint | None = None, decompose: bool = True
) -> None:
    """x_h: one hardware design among those meeting every hardware-only constraint, not
    provably worse than the best (:func:`bound_presolve`) and not dominated by another
    (see :func:`nondominated`)."""
    ok = _hardware_ok(comp.inst, comp.tables, cons)
    comp.pruned["hardware"] = int((~ok).sum())
    rows = np.flatnonzero(ok)
    costs, gains = hardware_columns(comp.inst, comp.tables, cons, objective=extra is None, extra=extra)
    hw = comp.tables.hw

    def skyline(rows: np.ndarray, max_keep: int | None = None) -> np.ndarray | None:
        return nondominated(
            np.column_stack([hw.column(c)[rows] for c in costs]) if costs else np.zeros((len(rows), 0)),
            np.column_stack([hw.column(c)[rows] for c in gains]) if gains else np.zeros((len(rows), 0)),
            max_keep=max_keep,
        )

    decompose = decompose and extra is None
    n0 = len(rows)
    keep = skyline(rows, SKYLINE_MAX_KEEP if decompose else None)
    if keep is None:
        # many mutually non-dominated designs (energy objectives): the bound presolve first is
        # cheaper, then the skyline of what is left
        rows = bound_presolve(comp, cons, rows)
        keep = skyline(rows)
        comp.pruned["hardware-dominated"] = int(len(rows) - keep.sum())
        rows = rows[keep]
    else:
        comp.pruned["hardware-dominated"] = int(n0 - keep.sum())
        rows = rows[keep]
        if decompose:
            rows = bound_presolve(comp, cons, rows)
    comp.hw_rows = rows
    if len(comp.hw_rows) == 0:
        comp.empty_reason = comp.empty_reason or "no hardware design meets the hardware-only constraints"
        return
    comp.x = lin.onehot(comp.mip, "hw", [str(int(r)) for r in comp.hw_rows])


def hardware_columns(
    inst: Instance, tables: Tables, cons: list[Constraint], *, objective: bool = True, extra: Constraint | None = None
) -> tuple[list[str], list[str]]:
    """Hardware columns the per-workload rows use: ``costs`` (the left side grows with them) and
    ``gains`` (right-hand sides such as capacity, and columns entering with a negative sign).
    ``extra`` is a constraint minimised as the objective (``explain``); even a hardware-only one
    counts then."""
    costs: set[str] = set()
    gains: set[str] = set()
    for c in [*cons, *([extra] if extra else [])]:
        if c.workload is None and c is not extra:
            continue
        for coef, form in c.lhs:
            cols = {p.hw for p in form.products if p.hw != "one"}
            (costs if coef > 0 else gains).update(cols)
        if c.rhs_hw:
            gains.add(c.rhs_hw)
    if not objective:
        return sorted(costs), sorted(gains)
    for w, metric, _ in objective_terms(inst):
        spec = next(x for x in inst.workloads if x.name == w)
        form = workload_forms(tables.scheds[w], spec.precision)[metric]
        costs.update(p.hw for p in form.products if p.hw != "one")
    return sorted(costs), sorted(gains)


def bound_presolve(comp: Compiled, cons: list[Constraint], rows: np.ndarray) -> np.ndarray:
    """Decomposition inside the solve: keep only the hardware designs that can be optimal.

    Every constraint involves the hardware alone or one workload and the hardware, and the
    objective is Σ_w weight_w × metric_w; so for a fixed hardware design j the best design is
    each workload's best feasible schedule on j, taken independently, and its value
    v(j) = Σ_w weight_w min_s metric_w(s, j) is exact (:func:`codesign.kinds.grid.space.hardware_values`,
    the model's own vectorised evaluation). v* = min_j v(j) is the optimum; a design with
    v(j) > v*(1 + ``DECOMPOSE_KEEP_RTOL``) cannot be optimal and gets no binary. The MIP then
    proves the optimum over the designs left (near-ties), and its bound holds for all designs.

    When no design is feasible (v(j) = inf for every j) the enumeration is the proof: no rows are
    returned and ``comp.empty_reason`` says so (the MIP is not solved; proving it infeasible took
    HiGHS 110 s on deepstack-qwen3-235b under an energy budget just below the minimum).

    Skipped (rows returned unchanged) when the evaluation would exceed ``DECOMPOSE_MAX_PAIRS``
    pairs, when a constraint couples workloads, or when a workload has no valid layout (the MIP
    then says infeasible).
    """
    inst, tables = comp.inst, comp.tables
    names = {w.name for w in inst.workloads}
    if any(c.workload is not None and c.workload not in names for c in cons):
        return rows
    pairs = len(rows) * sum(s.size for s in tables.scheds.values())
    if pairs == 0 or pairs > DECOMPOSE_MAX_PAIRS or any(s.size == 0 for s in tables.scheds.values()):
        return rows  # (a workload without a valid layout: the MIP says infeasible)
    hv = hardware_values(inst, tables, rows, cons=cons, hardware_checked=True, prune=True)
    finite = np.isfinite(hv.total)
    comp.pruned["hardware-bound"] = int(len(rows) - finite.sum())
    if not finite.any():
        comp.empty_reason = (f"the bound presolve's enumeration of {hv.pairs} (hardware, schedule) pairs finds no "
                             "feasible design")
        return rows[:0]
    best = float(hv.total[finite].min())
    keep = finite & (hv.total <= best + DECOMPOSE_KEEP_RTOL * abs(best))
    comp.pruned["hardware-bound"] = int(len(rows) - keep.sum())
    comp.presolve_best = best
    return rows[keep]


def nondominated(
    costs: np.ndarray, gains: np.ndarray, block: int = 256, max_keep: int | None = None
) -> np.ndarray | None:
    """Mask of rows not dominated by another row (a skyline).

    Row j dominates row i when costs[j] <= costs[i] and gains[j] >= gains[i] everywhere and the
    rows differ (identical rows: the first is kept). Every per-workload form is a sum of
    products a(S)·h(H) with a >= 0 and maxima of such products, compared with right-hand sides
    from ``gains``; so any schedule feasible on i is feasible on j with no larger objective, and
    removing i keeps the optimum (an exact presolve).

    Rows are visited in lexicographic order, so every dominator of a row comes before it; a row
    is kept when no kept row dominates it (transitivity covers dominated dominators).
    Returns None when ``max_keep`` is given and more rows than that would be kept.
    """
    n = len(costs)
    f = np.column_stack([costs, -gains]) if gains.size else np.asarray(costs, dtype=float)
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    if f.shape[1] == 0:
        keep[0] = True
        return keep
    order = np.lexsort(f.T[::-1])
    fo = f[order]
    sky = np.empty_like(fo)
    k = 0
    # blocks of rows in order: one vectorised test against the skyline of earlier blocks, then
    # row by row against what this block added (same result as the plain sequential scan)
    for start in range(0, n, block):
        blk = fo[start : start + block]
        dom = np.zeros(len(blk), dtype=bool)
        step = max(1, 4_000_000 // (len(blk) * f.shape[1]))
        for s0 in range(0, k, step):
            dom |= np.any(np.all(sky[None, s0 : min(k, s0 + step)] <= blk[:, None, :], axis=2), axis=1)
        k0 = k
        for i in np.flatnonzero(~dom):
            row = blk[i]
            if k > k0 and np.any(np.all(sky[k0:k] <= row, axis=1)):
                continue  # dominated by (or identical to) a kept row
            sky[k] = row
            k += 1
            keep[order[start + i]] = True
        if max_keep is not None and k > max_keep:
            return None
    return keep


def add_schedule_choice(comp: Compiled, memory: bool = True) -> None:
    """y_{w,s}: one layout per workload among the structurally feasible ones that fit the largest
    local memory of the remaining hardware designs (``memory`` False: memory limits dropped)."""
    if comp.empty_reason:
        return
    cap = comp.tables.hw.features["capacity_B"][comp.hw_rows].max() if memory else np.inf
    pool_cap = comp.tables.hw.features["pool_capacity_B"][comp.hw_rows].max() if memory else np.inf
    for w in comp.inst.workloads:
        st = comp.tables.scheds[w.name]
        if st.size == 0:
            comp.empty_reason = f"workload {w.name}: no layout satisfies the divisibility rules"
            return
        fits = st.features["memory_local_B"] <= cap
        if comp.inst.system.appliance:
            fits &= st.features["memory_pool_B"] <= pool_cap
        rows = np.flatnonzero(fits)
        # layouts with identical features are interchangeable for the model: keep the first
        feats = np.column_stack([st.features[k][rows] for k in sorted(st.features)])
        _, first = np.unique(feats, axis=0, return_index=True)
        comp.pruned[f"schedule[{w.name}]-duplicate"] = int(len(rows) - len(first))
        rows = rows[np.sort(first)]
        comp.pruned[f"schedule[{w.name}]"] = int(st.size - len(rows))
        if len(rows) == 0:
            comp.empty_reason = f"workload {w.name}: no layout fits in memory"
            return
        comp.sched_rows[w.name] = rows
        comp.y[w.name] = lin.onehot(comp.mip, f"sched[{w.name}]", [str(int(r)) for r in rows])


def add_workload_constraints(comp: Compiled, cons: list[Constraint]) -> dict:
    """Every per-workload constraint of ``cons`` as rows (memory capacity, every other form as an
    upper bound in its baseline unit); returns those baseline units."""
    base = _baseline_units(comp.inst, comp.tables)
    for c in cons:
        if c.workload is None:
            continue
        if c.name.startswith("memory-capacity"):
            add_memory_capacity(comp, c)
        else:
            add_form_upper(comp, c, _unit(base.get((c.workload, c.name), 1.0)))
    return base


def add_memory_capacity(comp: Compiled, c: Constraint) -> None:
    """Σ_s m_s y_s <= Σ_h cap_h x_h   (linear in both one-hots; row ``<constraint name>``): each
    term's hardware factor is one number over the remaining designs. A factor that varies (the
    copies of the pooled weights over several appliances, model/appliances.py) makes it a form."""
    st = comp.tables.scheds[c.workload]
    rows = comp.sched_rows[c.workload]
    cap = comp.tables.hw.column(c.rhs_hw)[comp.hw_rows]
    unit = _unit(float(cap.max()))
    factors = [comp.tables.hw.column(p.hw)[comp.hw_rows] for p in c.form.linear]
    if c.form.maxes or any(np.ptp(h) > 0 for h in factors):
        add_form_upper(comp, c, unit)
        return
    m = sum(st.column(p.sched)[rows] * float(h[0]) for p, h in zip(c.form.linear, factors, strict=True))
    if comp.integer_grid:
        # whole MiB, rounded towards feasibility (a relaxation by < 2 MiB; the loop re-checks)
        unit = MEMORY_STEP_B
        m, cap = np.floor(m / unit), np.ceil(cap / unit)
        unit = 1.0
    idx = np.concatenate([comp.y[c.workload], comp.x])
    val = np.concatenate([m / unit, -cap / unit])
    comp.mip.add_row(c.name, idx, val, ub=0.0)


def add_form_upper(comp: Compiled, c: Constraint, unit: float) -> None:
    """Σ coef·form(S, H) <= rhs: SLOs and per-workload budgets (row ``<constraint name>``)."""
    comp.mip.add_row(c.name, *constraint_expr(comp, c, unit), ub=c.rhs / unit)


def constraint_expr(comp: Compiled, c: Constraint, unit: float) -> lin.Expr:
    """(Σ coef·form − rhs_hw)/unit as a linear expression (exact for either sign of coef).

    Each term is compiled in its own unit, unit/|coef|, and only its sign applied after: the
    helper variables of a form then carry its share of the row at order one. Compiled in the row's
    unit and multiplied by a large coefficient (``1e7*ttft_s <= 538000``), they were ~1/coef in
    size, below the solvers' feasibility tolerance, which then accepted designs that break the row."""
    parts = []
    for k, (coef, form) in enumerate(c.lhs):
        if coef == 0.0:
            continue
        e = compile_form(comp.mip, f"{c.name}#{k}", form, comp, c.workload, unit / abs(coef), exact=coef < 0)
        parts.append(lin.scale(e, 1.0 if coef > 0 else -1.0))
    if c.rhs_hw:
        cap = comp.tables.hw.column(c.rhs_hw)[comp.hw_rows]
        parts.append((comp.x, -cap / unit))
    return lin.add(*parts)


def add_violation_objective(comp: Compiled, c: Constraint) -> None:
    """minimise Σ coef·form − rhs_hw − rhs: how far constraint ``c`` must be relaxed."""
    unit = 1.0
    if c.workload is not None:
        unit = _unit(abs(float(np.median(constraint_value_sample(comp, c)))))
    elif c.rhs:
        unit = abs(c.rhs)
    if c.workload is None:
        hw = comp.tables.hw
        lhs = constraint_lhs(c, hw, None, hw_rows=comp.hw_rows)[:, 0]
        rhs_hw = hw.column(c.rhs_hw)[comp.hw_rows] if c.rhs_hw else 0.0
        idx, val = comp.x, (lhs - rhs_hw) / unit
    else:
        idx, val = constraint_expr(comp, c, unit)
    comp.mip.set_objective(idx, val, constant=-c.rhs / unit)
    comp.objective_unit = unit


def constraint_value_sample(comp: Compiled, c: Constraint) -> np.ndarray:
    st = comp.tables.scheds[c.workload]
    rows_h = comp.hw_rows[: min(16, len(comp.hw_rows))]
    rows_s = comp.sched_rows[c.workload][: min(16, len(comp.sched_rows[c.workload]))]
    v = constraint_lhs(c, comp.tables.hw, st, hw_rows=rows_h, sched_rows=rows_s).ravel()
    v = v[np.isfinite(v) & (v != 0)]
    return v if len(v) else np.ones(1)


def add_objective(comp: Compiled, base: dict) -> None:
    """minimise Σ_w weight_w × metric_w, each metric in its baseline unit."""
    inst = comp.inst
    parts = []
    total_unit = 0.0
    for w, metric, weight in objective_terms(inst):
        total_unit += weight * base.get((w, metric), 1.0)
    total_unit = _unit(total_unit)
    for w, metric, weight in objective_terms(inst):
        spec = next(x for x in inst.workloads if x.name == w)
        form = workload_forms(comp.tables.scheds[w], spec.precision)[metric]
        parts.append(compile_form(comp.mip, f"objective[{w}]", form, comp, w, total_unit / weight))
    idx, val = lin.add(*parts)
    comp.mip.set_objective(idx, val)
    comp.objective_unit = total_unit


def _baseline_units(inst: Instance, tables: Tables) -> dict[tuple[str, str], float]:
    """Each workload metric's value at a representative design (its unit in the MIP)."""
    out: dict[tuple[str, str], float] = {}
    hw = tables.hw
    # only the units that are read: the objective's metrics and the per-workload constraints
    used = {(w, m) for w, m, _ in objective_terms(inst)}
    all_cons = constraints(inst, hw, tables.scheds)
    for w in inst.workloads:
        st = tables.scheds[w.name]
        forms = workload_forms(st, w.precision)
        # the median over a sample of pairs is robust to infeasible extremes
        rng = np.random.default_rng(0)
        hr = rng.integers(0, hw.size, size=min(64, hw.size))
        sr = rng.integers(0, st.size, size=min(64, st.size)) if st.size else np.zeros(0, dtype=int)
        for m in WORKLOAD_METRICS:
            if (w.name, m) not in used:
                continue
            vals = eval_form(forms[m], hw, st, hw_rows=hr, sched_rows=sr).ravel() if st.size else np.zeros(0)
            vals = vals[np.isfinite(vals) & (vals > 0)]
            out[(w.name, m)] = float(np.median(vals)) if len(vals) else 1.0
        for c in all_cons:
            if c.workload == w.name and not c.name.startswith("memory"):
                vals = np.abs(constraint_lhs(c, hw, st, hw_rows=hr, sched_rows=sr).ravel()) if st.size else np.zeros(0)
                vals = vals[np.isfinite(vals) & (vals > 0)]
                out[(w.name, c.name)] = float(np.median(vals)) if len(vals) else _unit(abs(c.rhs))
    return out
