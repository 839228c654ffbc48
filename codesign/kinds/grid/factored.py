"""The factored hardware formulation of the grid kind (formulations/factored.md).

The enumerated formulation (:mod:`codesign.kinds.grid.formulation`) gives every hardware design
a binary, so its size grows with the *product* of the knob domains. Here each knob k gets its own
one-hot x_k (Σ_v x_{k,v} = 1) and every hardware column is compiled from the per-knob tables of
:mod:`codesign.kinds.grid.factored_columns`:

- a product E·f_k(knob k) of a bounded nonnegative linear expression E (a schedule quantity
  Σ_s a_s y_s, or an expression built before) and a per-knob table is disaggregated over k:
  Σ_v W_v = E, 0 <= W_v <= ub(E)·x_{k,v}, E·f_k = Σ_v f_k(v)·W_v — exact for a one-hot x_k
  (the chosen v has W_v = E, every other W_v = 0), with |dom k| new variables;
- a term with the footprint (a sum of per-knob terms) multiplies E by each of its terms;
  a term with 1/footprint becomes an epigraph t with t·footprint >= E (t·footprint is again
  disaggregated), exact where the term is minimised or bounded above;
- a max of branches is an epigraph (minimised or bounded above), a min (the local bandwidth inside
  the power, bounded above) an exact disjunction: a one-hot δ picks a branch, δ_j => m >= branch_j.

Hardware-only constraints (thermal junction, power, area, temperature budgets) become rows over
these expressions instead of a filter over an enumeration, so the model has O(Σ_k |dom k|)
variables per product instead of O(Π_k |dom k|). The designs it decodes are the same dicts as
the enumerated formulation's, so the driver's verify/exclude/confirm loop runs unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codesign.errors import InputError
from codesign.kinds.base import Formulation
from codesign.kinds.grid import factored_columns as fc
from codesign.kinds.grid.formulation import _baseline_units, _unit
from codesign.kinds.grid.space import Tables
from codesign.kinds.grid.spec import Instance
from codesign.mip.linearize import groups
from codesign.mip.program import MIP
from codesign.model.budgets import parsed_budgets
from codesign.model.evaluate import (
    Constraint,
    Form,
    constraint_lhs,
    constraints,
    objective_terms,
    terms,
    workload_forms,
)
from codesign.model.schedule import ScheduleTable, schedule_table

#: ``--formulation`` values: ``auto`` factors the hardware when the enumeration would hold more
#: than AUTO_FACTORED_MIN_DESIGNS designs and the instance is supported, else enumerates
FORMULATIONS = ("auto", "enumerated", "factored", "boxes")
#: above this many hardware designs ``auto`` uses the factored formulation. Wherever the
#: enumeration fits in memory (~1.2 GB per 1e6 designs, benchmarks/results/factored.json; 7.2e6
#: designs took 5.7 GB in issue 29) it builds and proves faster, thanks to its skyline and bound
#: presolve (1e6 designs: 10 s against 35 s factored); beyond, only the factored MIP can be built
AUTO_FACTORED_MIN_DESIGNS = 10_000_000
#: constraints on the junction temperature, compiled as power <= (limit − ambient)/R_th(layers)
TEMPERATURE_ROWS = ("thermal-junction-upper", "budget-temperature")
#: CP-SAT sees each continuous variable of the factored MIP on this many grid steps of its range
CPSAT_STEPS = 1e6
#: a binary counts as chosen when its value exceeds this (solvers return 1 ± 1e-6)
BINARY_ON = 0.5


@dataclass
class Expr:
    """Σ val·var + const, with ``lb`` <= its value <= ``ub`` (valid bounds over every design; an
    expression that is multiplied further is >= 0)."""

    idx: np.ndarray
    val: np.ndarray
    const: float = 0.0
    ub: float = 0.0
    lb: float = 0.0

    def scaled(self, k: float) -> Expr:
        lo, hi = sorted((self.lb * k, self.ub * k))
        return Expr(self.idx, self.val * k, self.const * k, hi, lo)


def _sum(parts: list[Expr]) -> Expr:
    if not parts:
        return Expr(np.zeros(0, dtype=np.int64), np.zeros(0))
    return Expr(np.concatenate([p.idx for p in parts]), np.concatenate([p.val for p in parts]),
                sum(p.const for p in parts), sum(p.ub for p in parts), sum(p.lb for p in parts))


def constant(c: float) -> Expr:
    return Expr(np.zeros(0, dtype=np.int64), np.zeros(0), float(c), float(c), float(c))


@dataclass
class Factored:
    """A factored MIP under construction and what decodes its solutions."""

    inst: Instance
    cols: fc.Columns
    mip: MIP
    scheds: dict[str, ScheduleTable]
    x: dict[str, np.ndarray] = field(default_factory=dict)  # knob -> one-hot variables
    y: dict[str, np.ndarray] = field(default_factory=dict)  # workload -> one-hot variables
    sched_rows: dict[str, np.ndarray] = field(default_factory=dict)
    #: knob -> indices into its domain of the values left by :func:`prune_domains` (x's order)
    kept: dict[str, np.ndarray] = field(default_factory=dict)
    objective_unit: float = 1.0
    empty_reason: str | None = None
    used: set[str] = field(default_factory=set)  # hardware columns compiled (checked against the model)
    #: pair tables z as binaries (CP-SAT: no continuous grid for them) instead of continuous
    integer_pairs: bool = False
    _cache: dict[tuple, np.ndarray] = field(default_factory=dict)
    _n: int = 0

    def _name(self, tag: str) -> str:
        self._n += 1
        return f"{tag}#{self._n}"

    # --- exact products -----------------------------------------------------------------------
    def times(self, e: Expr, knob: str, f: np.ndarray) -> Expr:
        """e × f(knob), exact for one-hot x_knob (e >= 0 bounded by e.ub; see module docstring)."""
        f = np.asarray(f, dtype=float)
        if np.all(f == f[0]):
            return e.scaled(float(f[0]))
        if len(e.idx) == 0:
            return Expr(self.x[knob], e.const * f, 0.0, e.const * float(f.max()), e.const * float(f.min()))
        if e.const != 0.0:
            raise fc.Unsupported("a product of an affine expression with a knob")
        key = (e.idx.tobytes(), e.val.tobytes(), knob)
        w = self._cache.get(key)
        if w is None:
            name = self._name(f"W[{knob}]")
            w = np.array([self.mip.add_var(f"{name}[{i}]", 0.0, e.ub) for i in range(len(f))], dtype=np.int64)
            self.mip.add_row(f"{name}-sum", np.concatenate([w, e.idx]), np.concatenate([np.ones(len(w)), -e.val]), 0.0, 0.0)
            for i, (wi, xi) in enumerate(zip(w, self.x[knob], strict=True)):
                self.mip.add_row(f"{name}[{i}]-link", [wi, xi], [1.0, -e.ub], ub=0.0)
                if e.lb > 0:
                    # W_v = E·x_v >= lb(E)·x_v: valid, not implied, and it keeps the LP from moving
                    # all of a small E onto the knob's cheapest value
                    self.mip.add_row(f"{name}[{i}]-low", [wi, xi], [1.0, -e.lb], lb=0.0)
            self._cache[key] = w
        return Expr(w, f.copy(), 0.0, e.ub * float(f.max()), e.lb * float(f.min()))

    def term(self, e: Expr, t: fc.Term, upper: bool) -> Expr:
        """e × t (``upper``: the result is minimised or bounded above, so epigraphs are exact)."""
        if t.coef == 0.0 or (len(e.idx) == 0 and e.const == 0.0):
            return constant(0.0)
        if not math.isfinite(t.coef):
            raise fc.Unsupported("an infinite hardware value inside a product")
        varying = sorted(k for k, f in t.factors.items() if not np.all(f == f[0]))
        if len(e.idx) == 0 and t.fp == 1:
            # a constant times footprint^1: one term per footprint term, each a product of tables
            return _sum([self.term(e, fc.Term(t.coef, t.factors).times(p), upper) for p in self.cols.footprint])
        if len(e.idx) == 0 and t.fp == 0 and len(varying) == 2:
            return self.pair(t, *varying).scaled(e.const)
        scale = t.coef
        for k, f in sorted(t.factors.items()):
            # each table enters divided by its largest value (every W stays within e's bound)
            top = float(np.max(f))
            if top > 0:
                e, scale = self.times(e, k, f / top), scale * top
            else:
                return constant(0.0)
        if t.fp == 1:
            e = _sum([self.term(e, p, upper) for p in self.cols.footprint])
        elif t.fp == -1:
            if not upper or t.coef < 0:
                raise fc.Unsupported("1/footprint where it is bounded below")
            # τ·(footprint/fp_max) >= e, and e/footprint = τ/fp_max
            fp_max = self.cols.upper(self.cols.footprint)
            ub = e.ub * fp_max / self.cols.footprint_min()
            v = self.mip.add_var(self._name("inv-footprint"), e.lb, ub)  # τ = E·F_max/F >= E
            et = Expr(np.array([v], dtype=np.int64), np.ones(1), 0.0, ub, e.lb)
            prod = _sum([self.term(et, fc.Term(p.coef / fp_max, p.factors), upper) for p in self.cols.footprint])
            self.mip.add_row(self._name("inv-footprint-ge"), np.concatenate([prod.idx, e.idx]),
                             np.concatenate([prod.val, -e.val]), lb=e.const - prod.const)
            e, scale = et, scale / fp_max
        elif t.fp != 0:
            raise fc.Unsupported(f"footprint to the power {t.fp}")
        return e.scaled(scale)

    def pair(self, t: fc.Term, k1: str, k2: str) -> Expr:
        """A term over two knobs as a table over their joint values: z_{ij} >= 0 with the marginals
        Σ_j z_ij = x_{k1,i}, Σ_i z_ij = x_{k2,j} (for one-hot x, z_ij = x_i·x_j exactly); the term is
        Σ coef·f1_i·f2_j·z_ij. Its LP relaxation keeps the knobs' fractions (a chain of
        disaggregations lets a fraction of the largest area buy the whole speed-up)."""
        key = ("pair", k1, k2)
        z = self._cache.get(key)
        n1, n2 = len(self.x[k1]), len(self.x[k2])
        if z is None:
            name = self._name(f"Z[{k1},{k2}]")
            z = np.array([self.mip.add_var(f"{name}[{i},{j}]", 0.0, 1.0, integer=self.integer_pairs)
                          for i in range(n1) for j in range(n2)],
                         dtype=np.int64).reshape(n1, n2)
            for i in range(n1):
                self.mip.add_row(f"{name}[{i},:]", np.concatenate([z[i], [self.x[k1][i]]]),
                                 np.concatenate([np.ones(n2), [-1.0]]), 0.0, 0.0)
            for j in range(n2):
                self.mip.add_row(f"{name}[:,{j}]", np.concatenate([z[:, j], [self.x[k2][j]]]),
                                 np.concatenate([np.ones(n1), [-1.0]]), 0.0, 0.0)
            self._cache[key] = z
        table = t.coef * np.outer(t.factors[k1], t.factors[k2])
        for k, f in t.factors.items():
            if k not in (k1, k2):
                table = table * float(f[0])  # (constant tables)
        return Expr(z.ravel(), table.ravel(), 0.0, float(table.max()), float(table.min()))

    def col(self, e: Expr, col: fc.Col, upper: bool) -> Expr:
        """e × col: its sum, an epigraph per max group, an exact disjunction per min group."""
        parts = [self.term(e, t, upper) for t in col.base]
        for kind, branches in col.groups:
            exprs = [_sum([self.term(e, t, upper) for t in br]) for br in branches]
            if not upper:
                raise fc.Unsupported(f"a {kind} bounded below")
            group = self.max_of(exprs) if kind == "max" else self.min_of(exprs)
            if len(e.idx) == 0 and e.const > 0:
                self.knob_cuts(group, fc.Col(groups=[(kind, branches)]), e.const)
            parts.append(group)
        return _sum(parts)

    def knob_cuts(self, m: Expr, col: fc.Col, scale: float) -> None:
        """Valid rows m >= scale·Σ_v lb_k(v)·x_{k,v}, one per knob k, with lb_k(v) a lower bound of
        ``col`` over every design with knob k at v (:func:`factored_columns.col_bound`). A min's
        disjunction alone lets the LP spread δ and drop the min to its smallest bound."""
        for k, xs in self.x.items():
            lb = fc.col_bound(self.cols, col, k, high=False) * scale
            if np.all(lb <= 0) or (np.all(lb == lb[0]) and lb[0] <= m.lb):
                continue
            unit = float(np.max(np.abs(lb))) or 1.0
            self.mip.add_row(self._name(f"knob-cut[{k}]"), np.concatenate([m.idx, xs]),
                             np.concatenate([m.val / unit, -lb / unit]), lb=-m.const / unit)

    def max_of(self, exprs: list[Expr]) -> Expr:
        """Epigraph t >= each expression (exact where t is minimised or bounded above)."""
        exprs = [x for x in exprs if len(x.idx) or x.const != 0.0]
        if len(exprs) <= 1:
            return exprs[0] if exprs else constant(0.0)
        # rows in units of the largest branch bound (t in [0, 1]): coefficients stay near 1
        ub = max(x.ub for x in exprs) or 1.0
        exprs = [x.scaled(1.0 / ub) for x in exprs]
        lb = min(max(max(x.lb for x in exprs), 0.0), 1.0)
        name = self._name("max")
        t = self.mip.add_var(name, lb, 1.0)
        for j, x in enumerate(exprs):
            self.mip.add_row(f"{name}-ge[{j}]", np.concatenate([x.idx, [t]]), np.concatenate([x.val, [-1.0]]), ub=-x.const)
        return Expr(np.array([t], dtype=np.int64), np.array([ub]), 0.0, ub, lb * ub)

    def min_of(self, exprs: list[Expr]) -> Expr:
        """m >= the branch a one-hot δ picks: exact for a min bounded above (the solver picks the
        smallest branch)."""
        ub = max(x.ub for x in exprs) or 1.0
        exprs = [x.scaled(1.0 / ub) for x in exprs]
        lb = min(max(min(x.lb for x in exprs), 0.0), 1.0)
        name = self._name("min")
        m = self.mip.add_var(name, lb, 1.0)
        delta = [self.mip.add_binary(f"{name}:branch[{j}]") for j in range(len(exprs))]
        self.mip.add_row(f"{name}:branch-onehot", delta, np.ones(len(delta)), 1.0, 1.0)
        for j, x in enumerate(exprs):
            self.mip.add_indicator(f"{name}-ge[{j}]", delta[j], np.concatenate([[m], x.idx]),
                                   np.concatenate([[1.0], -x.val]), lb=x.const)
        return Expr(np.array([m], dtype=np.int64), np.array([ub]), 0.0, ub, lb * ub)

    # --- forms --------------------------------------------------------------------------------
    def product(self, sched: str, hw: str, workload: str | None, unit: float, upper: bool = True) -> Expr:
        """a(S)·h(H)/unit for one product of a form (a = 1 for hardware-only forms)."""
        self.used.update(hw.split("*"))
        col = self.cols.column(hw)
        if workload is None or sched == "one":
            # compiled at scale 1 (every W in [0, 1]), then divided by the unit
            e = constant(1.0) if workload is None else Expr(self.y[workload], np.ones(len(self.y[workload])), 0.0, 1.0, 1.0)
            return self.col(e, col, upper).scaled(1.0 / unit)
        a = self.scheds[workload].column(sched)[self.sched_rows[workload]]
        if (a < 0).any():
            raise fc.Unsupported(f"schedule column {sched} has negative values")
        if not (a != 0).any():
            return constant(0.0)
        c = col.constant
        if c is not None and not math.isfinite(c):
            # a tier the hardware lacks: schedules that use it are impossible (0·inf = 0 otherwise)
            ys = self.y[workload][a > 0]
            self.mip.add_row(self._name("no-tier"), ys, np.ones(len(ys)), ub=0.0)
            return constant(0.0)
        # the schedule side enters as a/max(a) (in [0, 1]); max(a)/unit scales the result
        top = float(a.max())
        return self.sched_col(workload, a / top, col, upper).scaled(top / unit)

    def sched_col(self, workload: str, a: np.ndarray, col: fc.Col, upper: bool) -> Expr:
        """a(S)·col(H): the hardware side compiled alone (:meth:`col` of 1), then multiplied by
        the schedule one-hot (:meth:`sched_times`); a max or min enters branch by branch
        (a >= 0: a·max(h) = max(a·h))."""
        parts = [self.sched_times(workload, a, self.col(constant(1.0), fc.Col(col.base), upper))] if col.base else []
        for kind, branches in col.groups:
            if not upper:
                raise fc.Unsupported(f"a {kind} bounded below")
            exprs = [self.sched_times(workload, a, self.col(constant(1.0), fc.Col(br), upper)) for br in branches]
            parts.append(self.max_of(exprs) if kind == "max" else self.min_of(exprs))
        return _sum(parts)

    def sched_times(self, workload: str, a: np.ndarray, h: Expr) -> Expr:
        """(Σ_s a_s y_s)·h for a hardware expression 0 <= h <= h.ub, disaggregated over the
        distinct values g of a: Σ_g B_g = h/h.ub, 0 <= B_g <= Σ_{s in g} y_s, and the product is
        h.ub·Σ_g a_g B_g — exact for one-hot y, and as tight as h itself when y is integral."""
        y = self.y[workload]
        if len(h.idx) == 0:
            return Expr(y, a * h.const, 0.0, float(a.max()) * h.const, float(a.min()) * h.const)
        reps, gid = groups(a)
        if len(reps) == 1:
            return h.scaled(float(reps[0]))
        top = h.ub or 1.0
        hn = h.scaled(1.0 / top)
        key = (hn.idx.tobytes(), hn.val.tobytes(), hn.const, a.tobytes(), workload)
        b = self._cache.get(key)
        if b is None:
            name = self._name(f"B[{workload}]")
            b = np.array([self.mip.add_var(f"{name}[{g}]", 0.0, 1.0) for g in range(len(reps))], dtype=np.int64)
            self.mip.add_row(f"{name}-sum", np.concatenate([b, hn.idx]), np.concatenate([np.ones(len(b)), -hn.val]),
                             hn.const, hn.const)
            low = max(hn.lb, 0.0)
            for g in range(len(reps)):
                members = y[gid == g]
                self.mip.add_row(f"{name}[{g}]-link", np.concatenate([[b[g]], members]),
                                 np.concatenate([[1.0], -np.ones(len(members))]), ub=0.0)
                if low > 0:  # B_g = (h/h̄)·[y in g] >= lb(h/h̄)·[y in g]
                    self.mip.add_row(f"{name}[{g}]-low", np.concatenate([[b[g]], members]),
                                     np.concatenate([[1.0], -low * np.ones(len(members))]), lb=0.0)
            self._cache[key] = b
        return Expr(b, reps * top, 0.0, float(reps.max()) * top, float(reps.min()) * max(h.lb, 0.0))

    def form(self, form: Form, workload: str | None, unit: float) -> Expr:
        """form/unit, minimised or bounded above (maxima become epigraphs)."""
        parts = [self.product(p.sched, p.hw, workload, unit) for p in form.linear]
        for group in form.maxes:
            parts.append(self.max_of([_sum([self.product(p.sched, p.hw, workload, unit) for p in terms(b)])
                                      for b in group]))
        return _sum(parts)

    def constraint(self, c: Constraint, unit: float) -> None:
        """Σ coef·form <= rhs_hw + rhs as a row (coefficients > 0; rhs_hw a sum of terms)."""
        if any(coef < 0 for coef, _ in c.lhs):
            raise fc.Unsupported(f"constraint {c.name} has a term with a negative coefficient")
        lhs = _sum([self.form(form, c.workload, unit / coef) for coef, form in c.lhs if coef > 0])
        if c.rhs_hw:
            self.used.add(c.rhs_hw)
            cap = self.cols.column(c.rhs_hw)
            if c.rhs_hw in fc.CLAMPED_AT_ZERO and c.workload is not None:
                # usable capacity max(u·raw − R, 0): every schedule needs memory, so m <= max(X, 0)
                # holds exactly when m <= X
                a = self.scheds[c.workload].column(c.form.linear[0].sched)[self.sched_rows[c.workload]]
                if len(c.lhs) != 1 or not (a > 0).all():
                    raise fc.Unsupported(f"{c.name}: a schedule that needs no memory")
            rhs = self.col(constant(1.0), cap, upper=False).scaled(1.0 / unit)
            lhs = _sum([lhs, rhs.scaled(-1.0)])
        self.mip.add_row(c.name, lhs.idx, lhs.val, ub=c.rhs / unit - lhs.const)

    def temperature(self, c: Constraint) -> None:
        """T_amb + power·R_th(L) <= T_max as power <= (T_max − T_amb)/R_th(L): the right side is a
        table over the layers (linear in x_L), so the power's terms need no product with R_th."""
        (coef, form), = c.lhs
        (p,) = form.linear
        if coef != 1.0 or p.hw != "temperature_C" or p.sched != "one":
            raise fc.Unsupported(f"{c.name}: not a bound on the junction temperature")
        limit = c.rhs + (self.cols.column(c.rhs_hw).constant if c.rhs_hw else 0.0)
        ambient = float(self.inst.system.ambient_C)
        r_th = self.cols.column("r_th_C_per_W")
        if r_th.groups or len(r_th.base) != 1 or r_th.base[0].fp or set(r_th.base[0].factors) - {"dram_layers"}:
            raise fc.Unsupported("a thermal resistance that depends on more than the layers")
        t = r_th.base[0]
        r = t.coef * t.factors.get("dram_layers", np.ones(len(self.x["dram_layers"])))
        cap = (limit - ambient) / r  # W per value of dram_layers
        unit = _unit(float(np.max(np.abs(cap))))
        self.used.update({"temperature_C", "power_W", "r_th_C_per_W"})
        power = self.col(constant(1.0), self.cols.column("power_W"), upper=True).scaled(1.0 / unit)
        idx = np.concatenate([power.idx, self.x["dram_layers"]])
        val = np.concatenate([power.val, -cap / unit])
        self.mip.add_row(c.name, idx, val, ub=-power.const)

    # --- decoding -----------------------------------------------------------------------------
    def decode(self, values: np.ndarray) -> dict[str, Any]:
        design: dict[str, Any] = {}
        for d in self.inst.hardware_decisions:
            design[d.name] = d.domain[int(self.kept[d.name][_chosen(values[self.x[d.name]])])]
        for w in self.inst.workloads:
            row = int(self.sched_rows[w.name][_chosen(values[self.y[w.name]])])
            design.update(self._schedule_design(w.name, row))
        return design

    def _schedule_design(self, workload: str, row: int) -> dict[str, Any]:
        st = self.scheds[workload]
        out = {}
        for d in self.inst.schedule_decisions(workload):
            v = st.decisions[d.key][row]
            out[d.name] = v.item() if hasattr(v, "item") else v
        return out

    def describe(self, var: int) -> dict[str, Any]:
        for d in self.inst.hardware_decisions:
            hit = np.flatnonzero(self.x[d.name] == var)
            if len(hit):
                return {d.name: d.domain[int(self.kept[d.name][int(hit[0])])]}
        for w, ys in self.y.items():
            hit = np.flatnonzero(ys == var)
            if len(hit):
                return self._schedule_design(w, int(self.sched_rows[w][int(hit[0])]))
        return {}


def _chosen(vals: np.ndarray) -> int:
    on = np.flatnonzero(vals > BINARY_ON)
    if len(on) != 1:
        raise ValueError(f"one-hot has {len(on)} chosen values")
    return int(on[0])


def hardware_designs(inst: Instance) -> int:
    """Number of hardware designs (the product of the hardware knobs' domains)."""
    return math.prod(len(d.domain) for d in inst.hardware_decisions)


def chosen(inst: Instance, formulation: str) -> bool:
    """Does ``formulation`` (:data:`FORMULATIONS`) compile ``inst`` factored? ``auto``: a
    stacked-3D instance with more than AUTO_FACTORED_MIN_DESIGNS hardware designs whose
    constraints the factored formulation compiles."""
    if formulation not in FORMULATIONS:
        raise InputError("unknown formulation", key="--formulation", value=formulation, expected=" | ".join(FORMULATIONS))
    if formulation == "enumerated":
        return False
    if formulation in ("factored", "boxes"):  # (the box search reads the factored columns)
        return True
    return inst.hardware.family == "stacked-3d" and hardware_designs(inst) > AUTO_FACTORED_MIN_DESIGNS \
        and unsupported_reason(inst) is None


def unsupported_reason(inst: Instance) -> str | None:
    """Why the factored formulation cannot compile ``inst`` (None: it can)."""
    if inst.hardware.family != "stacked-3d":
        return "only stacked-3D hardware has knobs to factor (catalog chips are one choice)"
    for b in parsed_budgets(inst):
        if any(t.coef < 0 for t in b.terms):
            return f"budget {b.name}: a term with a negative coefficient (a max bounded below)"
    return None


def build_factored(inst: Instance, *, check: bool = True, integer_pairs: bool = False) -> Factored:
    """Compile ``inst`` into the factored MIP (module docstring); ``check``: compare every
    compiled hardware column with the model at the grid's corners and random designs."""
    columns = fc.stacked_columns(inst)
    scheds = {w.name: schedule_table(inst, w.name) for w in inst.workloads}
    comp = Factored(inst, columns, MIP(name=inst.name), scheds, integer_pairs=integer_pairs)
    sample_at = fc.check_points(columns.knobs, samples=64, seed=1)
    sample = Tables(fc._table(inst, sample_at), scheds)
    cons = constraints(inst, sample.hw, scheds)
    keep = prune_domains(comp, cons)
    comp.kept = {k: np.flatnonzero(m) for k, m in keep.items()}
    empty = [k for k, m in keep.items() if not m.any()]
    if empty:
        comp.empty_reason = (f"no value of {empty[0]} meets the hardware-only constraints and the least memory "
                             "a layout needs, whatever the other knobs (per-knob bounds)")
        return comp
    comp.cols = fc.restrict(columns, keep)
    for d in inst.hardware_decisions:
        idx = [comp.mip.add_binary(f"hw[{d.name}={d.domain[int(i)]}]") for i in comp.kept[d.name]]
        comp.mip.add_row(f"hw[{d.name}]-onehot", idx, np.ones(len(idx)), 1.0, 1.0)
        comp.x[d.name] = np.array(idx, dtype=np.int64)
    if not _add_schedules(comp, cons):
        return comp
    base = _baseline_units(inst, sample)
    for c in cons:
        if c.workload is None:
            lhs = np.abs(constraint_lhs(c, sample.hw, None)[:, 0])
            lhs = lhs[np.isfinite(lhs) & (lhs > 0)]
            unit = _unit(float(np.median(lhs)) if len(lhs) else abs(c.rhs))
        elif c.name.startswith("memory-capacity"):
            unit = _unit(max(float(comp.scheds[c.workload].column(p.sched).max()) for p in c.form.linear))
        else:
            unit = _unit(base.get((c.workload, c.name), 1.0))
        if c.name in TEMPERATURE_ROWS:
            comp.temperature(c)
        else:
            comp.constraint(c, unit)
    total_unit = _unit(sum(weight * base.get((w, m), 1.0) for w, m, weight in objective_terms(inst)))
    parts = []
    for w, metric, weight in objective_terms(inst):
        spec = next(x for x in inst.workloads if x.name == w)
        parts.append(comp.form(workload_forms(scheds[w], spec.precision)[metric], w, total_unit / weight))
    obj = _sum(parts)
    comp.mip.set_objective(obj.idx, obj.val, constant=obj.const)
    comp.objective_unit = total_unit
    if check:
        fc.verify_columns(inst, columns, comp.used)
    return comp


#: the domain presolve removes a knob value only when a bound exceeds a limit by more than this
#: (relative; the model's own tolerance is FEASIBILITY_RTOL = 1e-9, round-off far below both)
PRUNE_RTOL = 1e-6


def prune_domains(comp: Factored, cons: list[Constraint]) -> dict[str, np.ndarray]:
    """Knob values no feasible design has (an exact presolve over Σ_k |dom k| values).

    For every knob value, bounds over all designs with that value (each other factor at its
    extreme, :func:`factored_columns.col_bound`): a value is removed when even the least power is
    above the junction limit's power cap, the least left side of a hardware-only budget is above
    it, or the largest usable capacity is below the least memory any layout of a workload needs.
    Repeated until nothing changes (removing values tightens the others' bounds)."""
    cols = comp.cols
    keep = {k: np.ones(len(v), dtype=bool) for k, v in cols.knobs.items()}
    hw_rows = [c for c in cons if c.workload is None and c.name not in TEMPERATURE_ROWS and len(c.lhs) == 1
               and c.lhs[0][0] > 0 and not c.rhs_hw and all(p.sched == "one" for p in c.lhs[0][1].products)]
    temps = [c for c in cons if c.name in TEMPERATURE_ROWS]
    need = [float(comp.scheds[c.workload].column(c.form.linear[0].sched).min()) for c in cons
            if c.name.startswith("memory-capacity-local") and comp.scheds[c.workload].size]
    changed = True
    while changed:
        changed = False
        cur = fc.restrict(cols, keep)
        for k in cur.knobs:
            bad = np.zeros(len(cur.knobs[k]), dtype=bool)
            for c in hw_rows:
                lo = sum((fc.col_bound(cur, cur.column(p.hw), k, high=False) for p in c.lhs[0][1].linear),
                         np.zeros(len(bad)))
                bad |= lo > c.rhs + PRUNE_RTOL * abs(c.rhs)
            if temps:
                power = fc.col_bound(cur, cur.column("power_W"), k, high=False)
                for c in temps:
                    limit = c.rhs + (cur.column(c.rhs_hw).constant if c.rhs_hw else 0.0)
                    cap = (limit - float(comp.inst.system.ambient_C)) / fc.col_bound(cur, cur.column("r_th_C_per_W"), k, high=False)
                    bad |= power > cap + PRUNE_RTOL * np.abs(cap)
            if need:
                cap = fc.col_bound(cur, cur.column("capacity_B"), k, high=True)
                bad |= cap < max(need) * (1 - PRUNE_RTOL)
            if bad.any():
                idx = np.flatnonzero(keep[k])
                keep[k][idx[bad]] = False
                changed = not bad.all()  # an empty domain: no design is feasible
                break
    return keep


def _add_schedules(comp: Factored, cons: list[Constraint]) -> bool:
    """y_{w,s}: per workload one layout among the structurally feasible ones whose memory fits the
    largest capacity of any hardware design (an upper bound: exact); identical layouts once."""
    inst, cols = comp.inst, comp.cols
    cap_terms = [t for t in cols.column("capacity_B").base if t.coef > 0]
    cap_max = cols.upper(cap_terms)
    pool = cols.column("pool_capacity_B")
    pool_max = cols.upper(pool.base) if not pool.groups else math.inf
    keep_memory = any(c.name.startswith("memory-capacity") for c in cons)
    for w in inst.workloads:
        st = comp.scheds[w.name]
        if st.size == 0:
            comp.empty_reason = f"workload {w.name}: no layout satisfies the divisibility rules"
            return False
        fits = st.features["memory_local_B"] <= cap_max if keep_memory else np.ones(st.size, dtype=bool)
        if inst.system.appliance and keep_memory:
            fits &= st.features["memory_pool_B"] <= pool_max
        rows = np.flatnonzero(fits)
        feats = np.column_stack([st.features[k][rows] for k in sorted(st.features)])
        _, first = np.unique(feats, axis=0, return_index=True)
        rows = rows[np.sort(first)]
        if len(rows) == 0:
            comp.empty_reason = f"workload {w.name}: no layout fits in memory"
            return False
        comp.sched_rows[w.name] = rows
        idx = [comp.mip.add_binary(f"sched[{w.name}][{int(r)}]") for r in rows]
        comp.mip.add_row(f"sched[{w.name}]-onehot", idx, np.ones(len(idx)), 1.0, 1.0)
        comp.y[w.name] = np.array(idx, dtype=np.int64)
    return True


def formulate(inst: Instance, solver: str) -> Formulation:
    """The driver's view of the factored MIP (``solver`` cpsat: the backend's integer grids make
    the MIP's claims approximate; the driver re-evaluates designs with the model)."""
    try:
        comp = build_factored(inst, integer_pairs=solver == "cpsat")
    except fc.Unsupported as exc:
        raise InputError(f"the factored formulation cannot compile {inst.name}: {exc}", key="--formulation",
                         value="factored", suggestion="use --formulation enumerated (or auto)") from None
    if solver == "cpsat":
        # every continuous variable on a grid of CPSAT_STEPS steps of its range: finer grids force
        # coarser coefficient rounding (CP-SAT's activity limit) and a looser integer model
        for v in comp.mip.vars:
            if not v.integer and v.ub > v.lb:
                v.resolution = (v.ub - v.lb) / CPSAT_STEPS
    stats = {**comp.mip.stats(), "formulation": "factored", "hardware_designs": hardware_designs(inst)}
    if comp.empty_reason:
        return Formulation(mip=comp.mip, objective_unit=comp.objective_unit, decode=comp.decode,
                           design_vars=np.zeros(0, dtype=np.int64), empty_reason=comp.empty_reason, stats=stats)
    design_vars = np.concatenate([*comp.x.values(), *comp.y.values()])
    return Formulation(mip=comp.mip, objective_unit=comp.objective_unit, decode=comp.decode, design_vars=design_vars,
                       onehot=True, integer_grid=solver == "cpsat", stats=stats, describe=comp.describe)
