"""The bandwidth cap of a box: the thermal and power budgets bound the achieved local bandwidth,
and with it the time per local byte (formulations/factored.md §6, "coupled bound").

The interval bound of :mod:`codesign.kinds.grid.boxes` takes the time per local byte at the box's
fastest corner (every bandwidth limit at its largest) and the junction temperature at its coolest
(every limit at its least), so the two can be different designs of the box. Both read the same
quantity, the achieved local bandwidth B = min of the four limits (model.md eq. 3.7):

    power_W       = P_rest(H) + J(H) · B(H)         J: energy per local byte (eq. 3.9)
    temperature_C = ambient + r_th(layers) · power_W
    s_per_B_local = share · max(1/(e·limit_i), 1/cap) >= share / (e · B)

so a design of the box that meets ``temperature_C <= R`` (or ``power_W <= R``) has
B <= ((R − ambient)/r_th − P_rest)/J <= ((R − ambient)/r_th_lo − P_rest_lo)/J_lo =: B_cap, each
factor at its own end of the box (a valid upper bound of B over the box's feasible designs), and
its time per local byte is at least share/(e·min(B_hi, B_cap)). A box with B_cap below its least
B has no feasible design. The three identities are checked against the model's hardware table
(:func:`codesign.model.hardware.hardware_table`) at the grid's corners and random designs when the
search starts; any that fails leaves the interval bound as it was (:func:`bandwidth_cap` is None).
:class:`Budgets` tightens a box's knob ranges; :class:`Form` evaluates a workload form on a table
of column lower bounds (one row per box) for every schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codesign.kinds.grid import factored_columns as fc
from codesign.kinds.grid.spec import Instance
from codesign.model import thermal
from codesign.model.evaluate import terms
from codesign.model.hardware import HardwareTable, hardware_table, load_family
from codesign.model.schedule import ScheduleTable

#: the columns a cap applies to: the time per local byte and its overlapped/sequential shares
SHARED = ("s_per_B_local", "s_per_B_local_ovl", "s_per_B_local_seq")
#: the identities above hold at the check designs within this (relative; they are exact up to
#: round-off)
IDENTITY_RTOL = 1e-9


class Extremes:
    """Least and largest value of a table over index ranges [lo, hi] (sparse tables, O(1) a query)."""

    def __init__(self, f: np.ndarray):
        n = len(f)
        mins, maxs = [f], [f]
        j = 1
        while (1 << j) <= n:
            h = 1 << (j - 1)
            mins.append(np.minimum(mins[-1][:-h], mins[-1][h:]))
            maxs.append(np.maximum(maxs[-1][:-h], maxs[-1][h:]))
            j += 1
        self.log = np.zeros(n + 1, dtype=np.int64)
        self.log[2:] = np.floor(np.log2(np.arange(2, n + 1))).astype(np.int64)
        self.mins = np.full((len(mins), n), np.nan)
        self.maxs = np.full((len(maxs), n), np.nan)
        for j, (a, b) in enumerate(zip(mins, maxs, strict=True)):
            self.mins[j, : len(a)] = a
            self.maxs[j, : len(b)] = b

    def query(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        j = self.log[hi - lo + 1]
        r = hi - (1 << j) + 1
        return np.minimum(self.mins[j, lo], self.mins[j, r]), np.maximum(self.maxs[j, lo], self.maxs[j, r])


@dataclass
class BandwidthCap:
    rest: list[fc.Term]  # power_W's terms outside its min group (compute, leakage, refresh, I/O)
    joule: fc.Col  # J_per_B_local
    bandwidth: fc.Col  # bandwidth_Bps
    r_th: fc.Col  # thermal resistance by dram_layers
    ambient_C: float
    limits: list[tuple[str, float, float, str | None]]  # (column, coefficient, rhs, rhs hardware column)
    per_B: dict[str, float]  # column -> share / e: the column is at least this / B

    def apply(self, b, low, up, lo, hi, fp, slack: float) -> np.ndarray:
        """Raise the lower ends of the time-per-byte columns in ``low`` (a table of the
        boxes' lower column bounds) to share/(e·B_up); return the boxes with no feasible
        design (B_cap below the box's least B). ``b``: the :class:`boxes.Bounder` (its interval
        arithmetic); ``slack``: the budgets' relative tolerance."""
        b_lo, b_hi = b.column(self.bandwidth, lo, hi, fp)
        rest_lo, _ = b._sum(self.rest, lo, hi, fp)
        j_lo, _ = b.column(self.joule, lo, hi, fp)
        r_lo, _ = b.column(self.r_th, lo, hi, fp)
        p_max = np.full(len(lo), np.inf)
        for name, coef, rhs, rhs_hw in self.limits:
            r = rhs + (up.column(rhs_hw) if rhs_hw else 0.0)
            r = (r + slack * np.abs(r)) / coef
            p_max = np.minimum(p_max, (r - self.ambient_C) / r_lo if name == "temperature_C" else r)
        with np.errstate(divide="ignore", invalid="ignore"):
            cap = (p_max - rest_lo) / j_lo
            b_up = np.minimum(b_hi, cap)
            for name, per in self.per_B.items():
                if name in low.features:
                    low.features[name] = np.maximum(low.features[name], np.where(b_up > 0, per / b_up, np.inf))
        return cap < b_lo * (1 - slack)


def bandwidth_cap(inst: Instance, cols: fc.Columns, cons: list, samples: int = 64) -> BandwidthCap | None:
    """The cap for a stacked-3D instance's hardware-only budgets on temperature_C or power_W
    (one term, positive coefficient), or None: no such budget, a column missing, or an identity
    the model does not confirm at the check designs."""
    limits = []
    for c in cons:
        if c.workload is None and len(c.lhs) == 1:
            coef, form = c.lhs[0]
            names = [p.hw for p in form.products]
            if coef > 0 and names in (["temperature_C"], ["power_W"]) and not form.maxes:
                limits.append((names[0], float(coef), float(c.rhs), c.rhs_hw))
    needed = ("power_W", "J_per_B_local", "bandwidth_Bps", *SHARED)
    if not limits or any(n not in cols.cols for n in needed):
        return None
    power = cols.cols["power_W"]
    if len(power.groups) != 1 or power.groups[0][0] != "min":
        return None
    fam = load_family(inst.hardware.stack)
    th = fam.thermal
    r_th = fc.Col([fc.Term(1.0, {"dram_layers": thermal.thermal_resistance_C_per_W(
        cols.knobs["dram_layers"], th.r0_C_per_W, th.r_per_layer_C_per_W)})])
    cal = inst.calibration.for_chip(fam.id, stacked=True)
    o, e = float(cal.stream_overlap), float(cal.memory_efficiency)
    cap = BandwidthCap(list(power.base), cols.cols["J_per_B_local"], cols.cols["bandwidth_Bps"], r_th,
                       float(inst.system.ambient_C), limits,
                       {"s_per_B_local": 1.0 / e, "s_per_B_local_ovl": o / e, "s_per_B_local_seq": (1.0 - o) / e})
    return cap if _confirmed(inst, cols, cap, samples) else None


def _confirmed(inst: Instance, cols: fc.Columns, cap: BandwidthCap, samples: int) -> bool:
    """The three identities of the module docstring, with the model's hardware table."""
    at = fc.check_points(cols.knobs, samples=samples, seed=2)
    t = hardware_table(inst, {k: cols.knobs[k][i] for k, i in at.items()})
    bw, power = t.column("bandwidth_Bps"), t.column("power_W")
    rest = cols.sum_values(cap.rest, at, len(bw))
    r = cols.values(cap.r_th, at)
    same = lambda a, b: bool(np.allclose(a, b, rtol=IDENTITY_RTOL, atol=0.0))  # noqa: E731
    if not (same(power, rest + t.column("J_per_B_local") * bw)
            and same(t.column("temperature_C"), cap.ambient_C + r * power)):
        return False
    return all(bool((t.column(name) * bw >= per * (1 - IDENTITY_RTOL)).all()) for name, per in cap.per_B.items()
               if per > 0)


@dataclass
class Budgets:
    """Feasibility-based bound tightening of a box's knob ranges from the hardware-only budgets
    whose left side is one column that is a sum of terms (area_mm2, power_W, temperature_C; a
    max/min group counts at its lower end): every term t and knob k of t must satisfy
    coef_t·f_k(x)·Π_{j≠k} min f_j·(footprint^p at its least) <= R − Σ_{t'≠t} lower end of t',
    so the values x of knob k whose table exceeds that hold no feasible design; for a table
    monotone over the knob's domain they are a prefix or suffix of the range, which is cut."""

    rows: list[tuple[fc.Col, float, float]]  # (column, coefficient, right side)
    rising: dict[int, int]  # id(table) -> +1 nondecreasing, -1 nonincreasing (others: not used)

    def tighten(self, b, lo: np.ndarray, hi: np.ndarray, slack: float, passes: int = 2):
        """The boxes shrunk (copies; a box with lo > hi on a knob has no feasible design)."""
        lo, hi = lo.copy(), hi.copy()
        for _ in range(passes):
            for col, coef, rhs in self.rows:
                b._seen = {}
                fp = b._sum(b.cols.footprint, lo, hi, (None, None))
                ends = [b._term(t, lo, hi, fp)[0] for t in col.base]
                total = sum(ends, np.zeros(len(lo)))
                for kind, branches in col.groups:
                    sums = np.array([b._sum(br, lo, hi, fp)[0] for br in branches])
                    total = total + (sums.max(axis=0) if kind == "max" else sums.min(axis=0))
                room = (rhs + slack * abs(rhs)) / coef
                for t, end in zip(col.base, ends, strict=True):
                    if t.coef <= 0 or t.fp < 0:
                        continue
                    for knob, f in t.factors.items():
                        sign = self.rising.get(id(f))
                        if sign is None:
                            continue
                        k = b.knobs.index(knob)
                        rest = np.full(len(lo), t.coef) * (fp[0] if t.fp == 1 else 1.0)
                        for other, g in t.factors.items():
                            if other != knob:
                                rest = rest * b._range(g, b.knobs.index(other), lo, hi)[0]
                        with np.errstate(divide="ignore", invalid="ignore"):
                            cap = np.where(rest > 0, (room - (total - end)) / rest, np.inf)
                        cap = np.where(np.isnan(cap), np.inf, cap)
                        if sign > 0:
                            hi[:, k] = np.minimum(hi[:, k], np.searchsorted(f, cap, side="right") - 1)
                        else:
                            lo[:, k] = np.maximum(lo[:, k], np.searchsorted(-f, -cap, side="left"))
        b._seen = {}
        return lo, hi


def budgets(cols: fc.Columns, cons: list) -> Budgets | None:
    """The :class:`Budgets` of the hardware-only budgets on one column with a constant right
    side, or None when there is none."""
    rows = []
    for c in cons:
        if c.workload is None and len(c.lhs) == 1 and c.lhs[0][0] > 0:
            coef, form = c.lhs[0]
            names = [p.hw for p in form.products]
            if len(names) != 1 or form.maxes or "*" in names[0] or names[0] not in cols.cols:
                continue
            extra = 0.0 if not c.rhs_hw else (cols.cols[c.rhs_hw].constant if c.rhs_hw in cols.cols else None)
            if extra is not None:
                rows.append((cols.cols[names[0]], float(coef), float(c.rhs) + float(extra)))
    rising = {}
    for col, _, _ in rows:
        for t in col.base:
            for f in t.factors.values():
                d = np.diff(f)
                if (d >= 0).all():
                    rising[id(f)] = 1
                elif (d <= 0).all():
                    rising[id(f)] = -1
    return Budgets(rows, rising) if rows else None


class Form:
    """A workload form Σ a(S)·h(H) + Σ max-groups (each branch a product or a sum of products), evaluated on a table of hardware lower bounds
    (one row per box) for every schedule: the products whose hardware column is one constant
    over the grid are summed once (0·inf = 0, the model's rule), the others are one matrix
    product. A lower bound because every a(S) >= 0 (checked) and the columns are lower bounds."""

    def __init__(self, form, st: ScheduleTable, cols: fc.Columns):
        def one(name: str) -> float | None:
            if name == "one":
                return 1.0
            col = cols.column(name)
            if not col.groups and all(t.coef == 0.0 for t in col.base):
                return 0.0  # (e.g. the overlapped share of a stream with no overlap)
            return col.constant

        def constant(hw: str) -> float | None:
            vals = [one(p) for p in hw.split("*")]
            return None if any(v is None for v in vals) else float(np.prod(vals))

        def times(a: np.ndarray, c: float) -> np.ndarray:
            with np.errstate(invalid="ignore"):
                return np.where(a == 0.0, 0.0, a * c)

        self.size = st.size
        self.const = np.zeros(st.size)
        self.names, rows = [], []
        for p in form.linear:
            a, c = st.column(p.sched), constant(p.hw)
            if c is None:
                self.names.append(p.hw)
                rows.append(a)
            else:
                self.const = self.const + times(a, c)
        self.a = np.vstack(rows) if rows else np.zeros((0, st.size))
        # each branch of a max group: (Σ of its hardware-constant products, [(column, a) of the others])
        self.maxes = []
        for g in form.maxes:
            group = []
            for br in g:
                vec, varying = np.zeros(st.size), []
                for p in terms(br):
                    c = constant(p.hw)
                    if c is None:
                        varying.append((p.hw, st.column(p.sched)))
                    else:
                        vec = vec + times(st.column(p.sched), c)
                group.append((vec, varying))
            self.maxes.append(group)

    def lower(self, low: HardwareTable) -> np.ndarray:
        n = low.size
        out = self.const[None, :]  # (broadcast: rows are added below)
        if self.names:
            h = np.column_stack([low.column(name) for name in self.names])
            if np.isfinite(h).all():
                out = out + h @ self.a
            else:
                for j in range(len(self.names)):
                    out = out + outer(h[:, j], self.a[j])
        for group in self.maxes:
            m = None
            for vec, varying in group:
                v = vec[None, :]
                for hw, a in varying:
                    v = v + outer(low.column(hw), a)
                m = v if m is None else np.maximum(m, v)
            if m is not None:
                out = out + m
        return np.broadcast_to(out, (n, self.size)).copy() if out.shape[0] != n else out


def outer(h: np.ndarray, a: np.ndarray) -> np.ndarray:
    """h ⊗ a with 0·inf = 0 (the model's rule)."""
    with np.errstate(invalid="ignore"):
        out = np.multiply.outer(h, a)
    return np.where(a[None, :] == 0.0, 0.0, out)
