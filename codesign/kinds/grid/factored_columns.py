"""The hardware columns of a stacked-3D instance as functions of the individual knobs
(formulations/factored.md §1), for the factored formulation (:mod:`codesign.kinds.grid.factored`).

A column is a :class:`Col`: a sum of :class:`Term` plus groups of branches whose max (or min) is
taken. A term is ``coef × Π_k f_k(knob_k) × footprint^p`` with every ``f_k`` a nonnegative table
over one knob's domain and ``p`` in {-1, 0, 1}; the footprint is itself a sum of such terms
(compute + SRAM + vertical-connection + fixed area). Every column the model derives is of this
shape (model.md §3): bandwidth is a min of four limits, the time per local byte the max of their
reciprocals, capacity and bank bandwidth grow with layers × footprint, power and temperature are
sums of products of per-knob quantities plus the min-bandwidth term.

Per-knob tables are computed by the model's own functions (:mod:`codesign.model.compute`,
``memory``, ``thermal``) on each knob's domain; a column that varies with at most one knob is read
from the model's hardware table on a *star* of designs (one knob varied at a time).
:func:`verify_columns` then evaluates every factored column at the corners of the grid and at
random designs and compares with :func:`codesign.model.hardware.hardware_table` (the model):
any difference beyond round-off is a :class:`~codesign.errors.ModelError`, never a silent answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from codesign.errors import ModelError
from codesign.kinds.grid.spec import Instance
from codesign.model import compute, memory, thermal
from codesign.model.hardware import hardware_table, load_family, math_format, precisions_of
from codesign.model.units import GBps, GiB, MiB

#: factored and model columns agree to this relative difference (round-off of re-associated
#: products and sums; the driver re-evaluates every design with the model anyway)
COLUMN_RTOL = 1e-9
#: random designs (besides the grid's corners) at which every factored column is checked
CHECK_SAMPLES = 256
#: columns the model clamps at 0 (usable capacity: u·raw − reserve, at least 0); their factored
#: form omits the clamp, which every use accounts for (formulations/factored.md §1)
CLAMPED_AT_ZERO = frozenset({"capacity_B"})


class Unsupported(Exception):
    """The instance has a column or constraint the factored formulation does not compile."""


@dataclass
class Term:
    """coef × Π_k factors[k][value index of knob k] × footprint^fp."""

    coef: float
    factors: dict[str, np.ndarray] = field(default_factory=dict)
    fp: int = 0

    def times(self, other: Term) -> Term:
        f = dict(self.factors)
        for k, v in other.factors.items():
            f[k] = f[k] * v if k in f else v
        return Term(self.coef * other.coef, f, self.fp + other.fp)


@dataclass
class Col:
    """Σ base terms + Σ over groups of the max ("max") or min ("min") of the branches' sums."""

    base: list[Term] = field(default_factory=list)
    groups: list[tuple[str, list[list[Term]]]] = field(default_factory=list)

    def times(self, other: Col) -> Col:
        """The product (at most one factor with groups; the other is >= 0, so it enters each
        branch of a max or min)."""
        if self.groups and other.groups:
            raise Unsupported("a product of two columns that both have a max or min")
        g, s = (self, other) if self.groups else (other, self)
        base = [a.times(b) for a in g.base for b in s.base]
        groups = [(kind, [[a.times(b) for a in br for b in s.base] for br in branches]) for kind, branches in g.groups]
        return Col(base, groups)

    @property
    def constant(self) -> float | None:
        """The column's value when it is one constant term (else None)."""
        if not self.groups and len(self.base) == 1 and not self.base[0].factors and self.base[0].fp == 0:
            return self.base[0].coef
        return None


def const(v: float) -> Col:
    return Col([Term(float(v))])


@dataclass
class Columns:
    """The knobs (name -> domain values), the footprint's terms and the factored columns."""

    knobs: dict[str, np.ndarray]
    footprint: list[Term]
    cols: dict[str, Col]

    def column(self, name: str) -> Col:
        """A column or a product of columns written ``a*b`` (as :meth:`HardwareTable.column`)."""
        parts = name.split("*")
        out = self._one(parts[0])
        for p in parts[1:]:
            out = out.times(self._one(p))
        return out

    def _one(self, name: str) -> Col:
        if name not in self.cols:
            raise Unsupported(f"hardware column {name!r} has no factored form")
        return self.cols[name]

    # --- evaluation (for checks) -------------------------------------------------------------
    def term_values(self, t: Term, at: dict[str, np.ndarray], n: int) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            v = np.full(n, t.coef)
            for k, f in t.factors.items():
                v = v * f[at[k]]
            if t.fp:
                v = v * self.sum_values(self.footprint, at, n) ** t.fp
        return v

    def sum_values(self, terms: list[Term], at: dict[str, np.ndarray], n: int) -> np.ndarray:
        out = np.zeros(n)
        for t in terms:
            out = out + self.term_values(t, at, n)
        return out

    def values(self, col: Col, at: dict[str, np.ndarray]) -> np.ndarray:
        """The column at designs given by knob value indices ``at`` (knob -> index array)."""
        n = len(next(iter(at.values())))
        out = self.sum_values(col.base, at, n)
        for kind, branches in col.groups:
            vals = np.array([self.sum_values(br, at, n) for br in branches])
            out = out + (vals.max(axis=0) if kind == "max" else vals.min(axis=0))
        return out

    def upper(self, terms: list[Term]) -> float:
        """An upper bound of a sum of terms with coef >= 0 and fp in {0, 1} over the grid."""
        fp_max = sum(t.coef * np.prod([f.max() for f in t.factors.values()]) for t in self.footprint)
        out = 0.0
        for t in terms:
            if t.coef < 0 or t.fp < 0:
                raise Unsupported("an upper bound of a term with a negative sign")
            out += t.coef * float(np.prod([f.max() for f in t.factors.values()])) * fp_max**t.fp
        return out

    def footprint_min(self) -> float:
        return float(sum(t.coef * np.prod([f.min() for f in t.factors.values()]) for t in self.footprint))


def _star(inst: Instance, knobs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[tuple[str, int, int]]]:
    """Designs varying one knob at a time around the first value of each: the decision arrays
    and, per knob, the (knob, start, stop) rows of its segment."""
    names = list(knobs)
    segments, cols = [], {n: [] for n in names}
    for k in names:
        start = len(cols[names[0]])
        for i in range(len(knobs[k])):
            for n in names:
                cols[n].append(i if n == k else 0)
        segments.append((k, start, len(cols[names[0]])))
    return {n: np.array(v) for n, v in cols.items()}, segments


def _table(inst: Instance, at: dict[str, np.ndarray]):
    """The model's hardware table at designs given by value indices."""
    designs = {}
    for d in inst.hardware_decisions:
        dom = np.array(d.domain, dtype=object if isinstance(d.domain[0], str) else None)
        designs[d.name] = dom[at[d.name]]
    return hardware_table(inst, designs)


def stacked_columns(inst: Instance) -> Columns:
    """The factored columns of a stacked-3D instance (see the module docstring)."""
    if inst.hardware.family != "stacked-3d":
        raise Unsupported("only stacked-3D hardware has knobs to factor (catalog chips are one choice)")
    knobs = {d.name: np.array(d.domain, dtype=float) for d in inst.hardware_decisions}
    fam = load_family(inst.hardware.stack)
    cal = inst.calibration.for_chip(fam.id, stacked=True)
    c, d, v, th = fam.compute, fam.dram, fam.vertical, fam.thermal
    L, T, P, A, C, S = (knobs[k] for k in ("dram_layers", "tsv_count", "tsv_pitch_um", "compute_area_mm2",
                                              "clock_GHz", "sram_MiB"))
    cols: dict[str, Col] = {}
    # columns that vary with at most one knob: straight from the model (star of designs)
    at, segments = _star(inst, knobs)
    star = _table(inst, at)
    for name, vals in star.features.items():
        varying = [k for k, a, b in segments if not np.array_equal(vals[a:b], np.full(b - a, vals[a]), equal_nan=True)]
        if not varying:
            cols[name] = const(vals[0])
        elif len(varying) == 1:
            k, a, b = next(s for s in segments if s[0] == varying[0])
            cols[name] = Col([Term(1.0, {k: vals[a:b].astype(float)})])
    # footprint = compute + SRAM + vertical connections (count × area of one) + fixed logic
    fp = [Term(1.0, {"compute_area_mm2": A}), Term(1.0, {"sram_MiB": S / fam.sram.density_MiB_per_mm2}),
          Term(1.0, {"tsv_count": T, "tsv_pitch_um": memory.tsv_area_mm2(1.0, P, v.keep_out_factor)}),
          Term(c.fixed_logic_area_mm2)]
    cols["area_mm2"] = Col(list(fp))
    cols["tsv_area_mm2"] = Col([fp[2]])
    volt = compute.voltage_V(C, c.vf_curve_GHz, c.vf_curve_V)
    v_ref = float(compute.voltage_V(c.reference_clock_GHz, c.vf_curve_GHz, c.vf_curve_V))
    o = float(cal.stream_overlap)
    for prec in precisions_of(inst):
        fmt = math_format(c.dense_TFLOPS_per_mm2, prec, f"family {fam.id} compute.dense_TFLOPS_per_mm2")
        per_area = compute.peak_flops(A, 1.0, c.dense_TFLOPS_per_mm2[fmt], c.reference_clock_GHz)
        cols[f"peak_flops@{prec}"] = Col([Term(1.0, {"compute_area_mm2": per_area, "clock_GHz": C})])
        s = Term(1.0 / cal.compute_efficiency_at(fmt), {"compute_area_mm2": 1.0 / per_area, "clock_GHz": 1.0 / C})
        cols[f"s_per_flop@{prec}"] = Col([s])
        cols[f"s_per_flop_ovl@{prec}"] = Col([Term(o * s.coef, s.factors)])
        cols[f"s_per_flop_seq@{prec}"] = Col([Term((1.0 - o) * s.coef, s.factors)])
    # the four bandwidth limits (eq. 3.7); the local bandwidth is their min
    bank = float(memory.bank_bandwidth_Bps(1.0, 1.0, d.banks_per_mm2, d.bytes_per_activation, d.tRC_ns,
                                           d.max_active_bank_fraction))
    lat = memory.access_latency_s(L, d.base_latency_ns, d.per_layer_latency_ns)
    limits = [Term(1.0, {"tsv_count": memory.vertical_bandwidth_Bps(T, v.rate_Gbps)}),
              Term(bank, {"dram_layers": L}, fp=1),
              Term(MiB, {"sram_MiB": S, "dram_layers": 1.0 / lat}),
              Term(c.logic_bandwidth_GBps_per_mm2 * GBps, {"compute_area_mm2": A})]
    cols["bandwidth_Bps"] = Col(groups=[("min", [[t] for t in limits])])
    # 1 / achieved bandwidth = max over the limits of 1/(e·limit), and 1/cap (eq. 3.21a)
    e = cal.memory_efficiency
    recip = [Term(1.0 / (e * t.coef), {k: 1.0 / f for k, f in t.factors.items()}, -t.fp) for t in limits]
    cap = cal.memory_bandwidth_cap_GBps
    if cap is not None and np.isfinite(cap):
        recip.append(Term(1.0 / (cap * GBps)))
    for suffix, share in (("", 1.0), ("_ovl", o), ("_seq", 1.0 - o)):
        cols[f"s_per_B_local{suffix}"] = Col(groups=[("max", [[Term(share * t.coef, t.factors, t.fp)] for t in recip])])
    if o == 0.0:
        cols["s_per_B_local_ovl"] = const(0.0)
    if o == 1.0:
        cols["s_per_B_local_seq"] = const(0.0)
    # J per local byte: array + vertical (pitch) + per layer × layers/2 (eq. 3.9), additive
    e0 = float(memory.stacked_energy_J_per_B(0.0, 0.0, d.array_energy_pJ_per_bit, d.per_layer_energy_pJ_per_bit,
                                             v.energy_pJ_per_bit_at_reference, v.reference_pitch_um))
    e_l = memory.stacked_energy_J_per_B(L, 0.0, d.array_energy_pJ_per_bit, d.per_layer_energy_pJ_per_bit,
                                        v.energy_pJ_per_bit_at_reference, v.reference_pitch_um) - e0
    e_p = memory.stacked_energy_J_per_B(0.0, P, d.array_energy_pJ_per_bit, d.per_layer_energy_pJ_per_bit,
                                        v.energy_pJ_per_bit_at_reference, v.reference_pitch_um) - e0
    j_local = [Term(e0), Term(1.0, {"dram_layers": e_l}), Term(1.0, {"tsv_pitch_um": e_p})]
    cols["J_per_B_local"] = Col(list(j_local))
    # capacity: u × layers × footprint × density − reserve (eq. 3.5a; the model's max(·, 0) is
    # handled where it is used: every schedule needs some memory)
    raw = Term(float(memory.stack_capacity_B(1.0, 1.0, d.capacity_GiB_per_mm2)), {"dram_layers": L}, fp=1)
    cols["raw_capacity_B"] = Col([raw])
    cols["capacity_B"] = Col([Term(cal.usable_memory_fraction * raw.coef, raw.factors, 1),
                              Term(-cal.runtime_reserve_GiB * GiB)])
    # power: compute at peak + logic leakage + DRAM refresh + DRAM at full bandwidth + I/O
    ref = "bf16" if "bf16" in c.dense_TFLOPS_per_mm2 else next(iter(c.dense_TFLOPS_per_mm2))
    p_comp = Term(1.0, {"compute_area_mm2": compute.peak_flops(A, 1.0, c.dense_TFLOPS_per_mm2[ref], c.reference_clock_GHz),
                        "clock_GHz": C * compute.energy_per_flop_J(c.energy_pJ_per_FLOP[ref], volt, v_ref)})
    p_leak = Term(c.static_W_per_mm2 / v_ref, {"clock_GHz": volt}, fp=1)
    p_refresh = Term(d.static_W_per_layer, {"dram_layers": L})
    dram = [[lim.times(j) for j in j_local] for lim in limits]
    io = cols["io_power_W"].constant
    if io is None:
        raise Unsupported("link I/O power varies with a knob")
    cols["static_W"] = Col([p_leak, p_refresh])
    cols["power_static_W"] = Col([p_leak, p_refresh])
    cols["power_compute_W"] = Col([p_comp])
    cols["power_dram_W"] = Col(groups=[("min", dram)])
    power = Col([p_comp, p_leak, p_refresh, Term(io)], [("min", dram)])
    cols["power_W"] = power
    r_th = Col([Term(1.0, {"dram_layers": thermal.thermal_resistance_C_per_W(L, th.r0_C_per_W, th.r_per_layer_C_per_W)})])
    hot = power.times(r_th)
    cols["temperature_C"] = Col([Term(float(inst.system.ambient_C)), *hot.base], hot.groups)
    return Columns(knobs, fp, cols)


def check_points(knobs: dict[str, np.ndarray], samples: int = CHECK_SAMPLES, seed: int = 0) -> dict[str, np.ndarray]:
    """Value indices of the designs :func:`verify_columns` checks: every corner of the grid (first
    and last value of each knob) and ``samples`` random designs."""
    names = list(knobs)
    grids = np.meshgrid(*[np.array(sorted({0, len(knobs[k]) - 1})) for k in names], indexing="ij")
    corners = {k: g.ravel() for k, g in zip(names, grids, strict=True)}
    rng = np.random.default_rng(seed)
    return {k: np.concatenate([corners[k], rng.integers(0, len(knobs[k]), samples)]) for k in names}


def verify_columns(inst: Instance, columns: Columns, names: set[str], at: dict[str, np.ndarray] | None = None) -> None:
    """Every factored column in ``names`` equals the model's at the :func:`check_points` designs
    (or at ``at``), within COLUMN_RTOL; a ModelError names the first that does not."""
    at = check_points(columns.knobs) if at is None else at
    table = _table(inst, at)
    for name in sorted(names):
        mine = columns.values(columns.column(name), at)
        if name in CLAMPED_AT_ZERO:
            mine = np.maximum(mine, 0.0)
        model = table.column(name)
        same = (mine == model) | np.isclose(mine, model, rtol=COLUMN_RTOL, atol=0.0)
        if not same.all():
            i = int(np.flatnonzero(~same)[0])
            raise ModelError(f"factored hardware column {name} disagrees with the model at "
                             f"{ {k: float(columns.knobs[k][at[k][i]]) for k in columns.knobs} }: "
                             f"{mine[i]!r} vs {model[i]!r}")


# --- bounds per knob value (the domain presolve of factored.py) ---------------------------------
def _extreme(f: np.ndarray, knob: str, k: str, high: bool) -> np.ndarray | float:
    """The factor's values over knob ``k``'s domain when it is the factor's own knob, else its
    extreme over its own domain (a scalar)."""
    return f if knob == k else float(f.max() if high else f.min())


def term_bound(cols: Columns, t: Term, k: str, high: bool) -> np.ndarray:
    """Per value of knob ``k``: a lower (``high`` False) or upper bound of term ``t`` over every
    design with that value (each factor at its extreme; footprint by the same rule)."""
    n = len(cols.knobs[k])
    up = high if t.coef >= 0 else not high
    v = np.full(n, t.coef)
    for knob, f in t.factors.items():
        v = v * _extreme(f, knob, k, up)
    if t.fp:
        # footprint^+1 grows with the footprint, footprint^-1 shrinks: pick its matching extreme
        fp = sum(term_bound(cols, p, k, up if t.fp > 0 else not up) for p in cols.footprint)
        v = v * np.asarray(fp, dtype=float) ** t.fp
    return v


def col_bound(cols: Columns, col: Col, k: str, high: bool) -> np.ndarray:
    """Per value of knob ``k``: a lower or upper bound of ``col`` over every design with that value
    (a sum of bounds; a max or min of branch bounds)."""
    out = np.zeros(len(cols.knobs[k]))
    for t in col.base:
        out = out + term_bound(cols, t, k, high)
    for kind, branches in col.groups:
        vals = np.array([sum((term_bound(cols, t, k, high) for t in br), np.zeros(len(cols.knobs[k])))
                         for br in branches])
        out = out + (vals.max(axis=0) if kind == "max" else vals.min(axis=0))
    return out


def restrict(cols: Columns, keep: dict[str, np.ndarray]) -> Columns:
    """The columns over the knob values ``keep`` (knob -> boolean mask over its domain)."""

    def term(t: Term) -> Term:
        return Term(t.coef, {k: f[keep[k]] for k, f in t.factors.items()}, t.fp)

    def col(c: Col) -> Col:
        return Col([term(t) for t in c.base], [(kind, [[term(t) for t in br] for br in brs]) for kind, brs in c.groups])

    return Columns({k: v[keep[k]] for k, v in cols.knobs.items()}, [term(t) for t in cols.footprint],
                   {n: col(c) for n, c in cols.cols.items()})
