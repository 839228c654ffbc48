"""Box branch-and-bound over the hardware knobs of a stacked-3D grid instance (formulations/factored.md §6).

An exact alternative to the factored MIP for grids far beyond enumeration. A *box* is a product of
one contiguous index range per knob (over the values the domain presolve keeps). Over a box, every
factored hardware column (:mod:`codesign.kinds.grid.factored_columns`: sums of products of
nonnegative per-knob tables, times footprint^{-1,0,1}, inside max/min groups) has an interval
[lo, hi] from the tables' least and largest values on the box's ranges (range-extreme queries),
which is exact when the box is one design. Because every schedule coefficient a(S) of a form is
>= 0 and every constraint's terms have positive coefficients, the forms evaluated
(:class:`boxes_bound.Form`, the same sums as the model's) on the ``lo`` columns give, per schedule,
a lower bound of the objective and of each constraint's left side over the box; a schedule whose
lower left side exceeds the upper right side (by ``PRUNE_RTOL``) is infeasible on the whole box.
The box's bound is Σ_w weight_w × min over its still-possible schedules. Before the forms are
evaluated, the bandwidth cap (:mod:`codesign.kinds.grid.boxes_bound`) raises the time per local
byte to what the box's thermal and power budgets allow (the one coupling of objective and
budgets the intervals miss that matters on the benchmark grids).

Best-first search, a batch of the boxes with the least bound per round. Each box is *shaved*
(:func:`_shave`): every knob's range is cut into sections (single values on knobs with at most
``SECTIONS`` values left, else halves) and each is bounded; a section whose bound is no better
than the incumbent (by ``CONFIRM_RTOL``) or that is infeasible is cut, the box shrinks to what is
left, its bound becomes the largest over the knobs of their least section bound, and it is then
split along the knob whose worse child has the largest bound (branching "strong"; "widest"
splits the knob with most values left, without shaving). Every new box's middle
design is evaluated with the model (:func:`codesign.kinds.grid.space.hardware_values`): the
incumbent is always a design the model verified. Single-design boxes are evaluated and closed.
Every new incumbent starts a local search with the model (single-knob moves of ±1, ±2, ±4, ...
values and small pair moves, :func:`_moves`). A grid with more than COARSE_MIN_DESIGNS designs
is first solved on its coarse sub-grid (every COARSE_STEP-th value of each knob with more than
COARSE_KEEP values, and the last: :func:`_coarse`), by this search and so recursively, within
COARSE_SHARE of the time left; that optimum, a design of the grid, is the first incumbent. The
incumbent only prunes: the search is exact whatever it starts from.
When no box is left, the incumbent is optimal up to CONFIRM_RTOL (no design is better by more
than that); a time limit (checked after the first round) leaves the least open bound as the
proven bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codesign.errors import InputError, ModelError
from codesign.kinds.grid import boxes_bound as bb
from codesign.kinds.grid import factored as fz
from codesign.kinds.grid import factored_columns as fc
from codesign.kinds.grid.space import Tables, hardware_values
from codesign.kinds.grid.spec import Instance
from codesign.model.evaluate import (
    constraint_lhs,
    constraints,
    objective_terms,
    workload_forms,
)
from codesign.model.hardware import HardwareTable, hardware_table
from codesign.model.schedule import ScheduleTable, schedule_table
from codesign.proof import records
from codesign.proof.tolerances import CONFIRM_RTOL

#: a box is infeasible only when a lower left side exceeds the upper right side by this (relative;
#: factored and model columns agree to COLUMN_RTOL = 1e-9, far below)
PRUNE_RTOL = fz.PRUNE_RTOL
#: boxes split per round (children are bounded and their middle designs evaluated in one batch)
BATCH = 1024
#: sections each knob of a box is cut into and bounded separately when the box is shaved (2:
#: halves, the bound before issue 29's coupling work; more: single values on narrow knobs)
SECTIONS = 8
#: the box bounds: "coupled" (sectioned shaving and the bandwidth cap of boxes_bound), "interval"
#: (halves and column intervals only: the search before issue 29's coupling work, for A/B runs)
BOUNDS = {"coupled": {"sections": SECTIONS, "coupled": True}, "interval": {"sections": 2, "coupled": False}}
#: how the knob to split is chosen: "widest" (most values left), "strong" (the split whose smaller
#: child bound is largest, every knob tried)
BRANCHING = ("strong", "widest")
#: a grid with more designs than this (after the presolve) is first solved on its coarse sub-grid
#: (:func:`_coarse`), by this search (so recursively), and starts from that optimum
COARSE_MIN_DESIGNS = 1e9
#: the coarse sub-grid keeps every COARSE_STEP-th value of each knob (and its last)
COARSE_STEP = 4
#: knobs with at most this many values are not coarsened (a layer count's neighbours differ most)
COARSE_KEEP = 32
#: the share of what is left of the time limit a coarse solve may take
COARSE_SHARE = 0.25
#: the local search's pair moves go up to ±2^(PAIR_MOVES − 1) values on each of the two knobs
PAIR_MOVES = 6


@dataclass
class Bounder:
    """Interval bounds of the factored columns and the model's forms over batches of boxes."""

    inst: Instance
    cols: fc.Columns
    scheds: dict[str, ScheduleTable]
    cons: list
    knobs: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)  # hardware columns the forms and constraints read
    _ext: dict[int, bb.Extremes] = field(default_factory=dict)
    _keep: list = field(default_factory=list)
    _seen: dict[int, tuple] = field(default_factory=dict)  # range extremes of the current batch
    _sliced: tuple | None = None  # (parent, parent lo, parent hi, rows narrowed on each knob)
    cap: bb.BandwidthCap | None = None  # the coupled bound (boxes_bound); None: intervals only
    budgets: bb.Budgets | None = None  # knob-range tightening before shaving (boxes_bound)

    def __post_init__(self) -> None:
        self.knobs = list(self.cols.knobs)
        for c in self.cons:
            if any(coef <= 0 for coef, _ in c.lhs):
                raise fc.Unsupported(f"constraint {c.name} has a term with a coefficient <= 0")
            for _, form in c.lhs:
                self._read(form, c.workload)
            if c.rhs_hw:
                self.names.add(c.rhs_hw)
        for w, metric, weight in objective_terms(self.inst):
            if weight < 0:
                raise fc.Unsupported("a negative objective weight")
            spec = next(x for x in self.inst.workloads if x.name == w)
            self._read(workload_forms(self.scheds[w], spec.precision)[metric], w)

    def _read(self, form, workload: str | None) -> None:
        for p in form.products:
            self.names.update(p.hw.split("*"))
            if workload is not None and p.sched != "one" and (self.scheds[workload].column(p.sched) < 0).any():
                raise fc.Unsupported(f"schedule column {p.sched} has negative values")

    def _range(self, f: np.ndarray, k: int, lo: np.ndarray, hi: np.ndarray):
        got = self._seen.get(id(f))
        if got is not None:
            return got
        e = self._ext.get(id(f))
        if e is None:
            if (f < 0).any() or not np.isfinite(f).all():
                raise fc.Unsupported("a per-knob table with negative or infinite values")
            e = self._ext[id(f)] = bb.Extremes(f)
            self._keep.append(f)  # (ids stay unique while the table lives)
        if self._sliced is None:
            got = e.query(lo[:, k], hi[:, k])
        else:  # rows are boxes of a few parents, each narrowed on one knob: query the parents
            parent, plo, phi, rows = self._sliced  # and the rows narrowed on knob k only
            a, b = e.query(plo[:, k], phi[:, k])
            a, b = a[parent], b[parent]
            if len(rows[k]):
                a[rows[k]], b[rows[k]] = e.query(lo[rows[k], k], hi[rows[k], k])
            got = a, b
        self._seen[id(f)] = got
        return got

    def _term(self, t: fc.Term, lo, hi, fp) -> tuple[np.ndarray, np.ndarray]:
        n = len(lo)
        a, b = np.ones(n), np.ones(n)
        for knob, f in t.factors.items():
            mn, mx = self._range(f, self.knobs.index(knob), lo, hi)
            a, b = a * mn, b * mx
        if t.fp == 1:
            a, b = a * fp[0], b * fp[1]
        elif t.fp == -1:
            a, b = a / fp[1], b / fp[0]
        elif t.fp:
            raise fc.Unsupported(f"footprint to the power {t.fp}")
        if not math.isfinite(t.coef):
            return np.full(n, t.coef), np.full(n, t.coef)
        return (t.coef * a, t.coef * b) if t.coef >= 0 else (t.coef * b, t.coef * a)

    def _sum(self, terms, lo, hi, fp):
        a, b = np.zeros(len(lo)), np.zeros(len(lo))
        for t in terms:
            x, y = self._term(t, lo, hi, fp)
            a, b = a + x, b + y
        return a, b

    def column(self, col: fc.Col, lo, hi, fp) -> tuple[np.ndarray, np.ndarray]:
        a, b = self._sum(col.base, lo, hi, fp)
        for kind, branches in col.groups:
            ends = [self._sum(br, lo, hi, fp) for br in branches]
            pick = np.max if kind == "max" else np.min
            a = a + pick(np.array([x for x, _ in ends]), axis=0)
            b = b + pick(np.array([y for _, y in ends]), axis=0)
        return a, b

    def tables(self, lo: np.ndarray, hi: np.ndarray) -> tuple[HardwareTable, HardwareTable]:
        """Hardware tables of the boxes' lower and upper column bounds (one row per box)."""
        self._seen = {}
        fp = self._fp = self._sum(self.cols.footprint, lo, hi, (None, None))
        low = HardwareTable({"box": np.arange(len(lo))})
        up = HardwareTable({"box": np.arange(len(lo))})
        for name in self.names:
            if name == "one":
                a = b = np.ones(len(lo))
            else:
                a, b = self.column(self.cols.column(name), lo, hi, fp)
            if name in fc.CLAMPED_AT_ZERO:
                a, b = np.maximum(a, 0.0), np.maximum(b, 0.0)
            low.features[name], up.features[name] = a, b
        return low, up

    def compile(self) -> None:
        """The forms the bound reads, with their hardware-constant products summed once per
        schedule (:class:`boxes_bound.Form`)."""
        self._in_products = {n for p in self._products() if "*" in p for n in p.split("*")}
        self._objective = []
        for w, metric, weight in objective_terms(self.inst):
            spec = next(x for x in self.inst.workloads if x.name == w)
            form = workload_forms(self.scheds[w], spec.precision)[metric]
            cons = [(c, [(coef, bb.Form(f, self.scheds[w], self.cols)) for coef, f in c.lhs])
                    for c in self.cons if c.workload == w]
            self._objective.append((weight, bb.Form(form, self.scheds[w], self.cols), cons))

    def bound(self, lo: np.ndarray, hi: np.ndarray, sliced: tuple | None = None) -> np.ndarray:
        """Per box: a lower bound of the internal objective over its designs (inf: no design of
        the box is feasible). ``sliced`` = (parent, parent lo, parent hi, knob): each box is its
        parent box narrowed on that one knob (only the narrowed ranges are queried)."""
        if not hasattr(self, "_objective"):
            self.compile()
        if sliced is not None:
            parent, plo, phi, knob = sliced
            sliced = (parent, plo, phi, [np.flatnonzero(knob == j) for j in range(lo.shape[1])])
        self._sliced = sliced
        try:
            low, up = self.tables(lo, hi)
            capped = None if self.cap is None else self.cap.apply(self, low, up, lo, hi, self._fp, PRUNE_RTOL)
        finally:
            self._sliced = None
        n = len(lo)
        for name in self._in_products:  # a product a*b of lower bounds is one only for a, b >= 0
            if (low.features[name] < 0).any():
                raise fc.Unsupported(f"column {name} can be negative inside a product")
        ok = np.ones(n, dtype=bool) if capped is None else ~capped
        for c in self.cons:
            if c.workload is None:
                lhs = constraint_lhs(c, low, None)[:, 0]
                rhs = c.rhs + (up.column(c.rhs_hw) if c.rhs_hw else 0.0)
                ok &= lhs <= rhs + PRUNE_RTOL * np.abs(rhs)
        total = np.where(ok, 0.0, np.inf)
        for weight, form, cons in self._objective:
            obj = form.lower(low)
            for c, lhs_forms in cons:
                lhs = sum(coef * f.lower(low) for coef, f in lhs_forms)
                rhs = c.rhs + (up.column(c.rhs_hw)[:, None] if c.rhs_hw else 0.0)
                obj[lhs > rhs + PRUNE_RTOL * np.abs(rhs)] = np.inf
            total = total + weight * obj.min(axis=1)
        return total

    def _products(self) -> list[str]:
        out = []
        for c in self.cons:
            out += [p.hw for _, f in c.lhs for p in f.products]
        for w, metric, _ in objective_terms(self.inst):
            spec = next(x for x in self.inst.workloads if x.name == w)
            out += [p.hw for p in workload_forms(self.scheds[w], spec.precision)[metric].products]
        return out


@dataclass
class BoxResult:
    """What a box search proved: the best design the model verified, the least bound of the boxes
    left open (the incumbent's own value when none is), and the search's counters."""

    design: dict[str, Any] | None
    internal: float  # the incumbent's internal objective (inf: none)
    bound: float  # a proven lower bound of the internal objective over the whole grid
    complete: bool  # no box left open: the incumbent is optimal within CONFIRM_RTOL (or none is feasible)
    boxes: int  # boxes bounded
    evaluated: int  # designs evaluated with the model
    rounds: int
    open_boxes: int
    peak_open: int
    seconds: float
    pruned_values: int  # knob values the domain presolve removed
    trace: list[tuple[float, float, float]] = field(default_factory=list)  # (s, incumbent, bound)
    capped: bool = False  # the bandwidth cap (boxes_bound) was part of the bound
    left: tuple | None = None  # (lo, hi, bound) of the boxes left open (value indices)
    coarse: list[dict[str, Any]] = field(default_factory=list)  # the coarse solves that seeded it, coarsest first


class _PruneView:
    """What :func:`factored.prune_domains` reads of a factored build."""

    def __init__(self, inst, cols, scheds):
        self.inst, self.cols, self.scheds = inst, cols, scheds


def search(inst: Instance, *, time_limit: float | None = None, branching: str = "strong", batch: int = BATCH,
           rtol: float = CONFIRM_RTOL, start: list[dict[str, Any]] | None = None, sections: int = SECTIONS,
           wide: int = 2, coupled: bool = True, coarse: float = COARSE_MIN_DESIGNS, descend: bool = True) -> BoxResult:
    """Best-first box branch-and-bound (module docstring). ``rtol``: a box is dropped when its
    bound is at least incumbent × (1 − rtol); ``start``: designs evaluated first (each must use
    knob values the presolve keeps); ``sections``/``wide``: how shaving cuts narrow/wide knobs
    (:func:`_shave`); ``coupled``: add the bandwidth cap (:mod:`codesign.kinds.grid.boxes_bound`)
    where the model confirms it; ``coarse``: a grid with more designs than this (after the
    presolve) is first solved on its coarse sub-grid (:func:`_coarse`; inf: never), whose optimum
    is a start design; ``descend``: a pattern search with the model from every new incumbent
    (:func:`_moves`)."""
    if branching not in BRANCHING:
        raise ValueError(f"branching {branching!r}: one of {BRANCHING}")
    t0 = time.perf_counter()
    reason = fz.unsupported_reason(inst)
    if reason:
        raise fc.Unsupported(reason)
    full = fc.stacked_columns(inst)
    scheds = {w.name: schedule_table(inst, w.name) for w in inst.workloads}
    sample_at = fc.check_points(full.knobs, samples=64, seed=1)
    sample = Tables(fc._table(inst, sample_at), scheds)
    cons = constraints(inst, sample.hw, scheds)
    keep = fz.prune_domains(_PruneView(inst, full, scheds), cons)
    pruned = int(sum((~m).sum() for m in keep.values()))
    if any(not m.any() for m in keep.values()) or any(s.size == 0 for s in scheds.values()):
        return BoxResult(None, math.inf, math.inf, True, 0, 0, 0, 0, 0, time.perf_counter() - t0, pruned)
    setup = (inst, full, scheds, cons, {d.name: np.asarray(d.domain) for d in inst.hardware_decisions})
    opts = {"branching": branching, "batch": batch, "rtol": rtol, "sections": sections, "wide": wide,
            "coupled": coupled, "coarse": coarse, "descend": descend}
    r = _branch(setup, keep, t0, time_limit, list(start or []), opts, verify=True)
    r.pruned_values = pruned
    return r


def _coarse(keep: dict[str, np.ndarray], step: int = COARSE_STEP) -> dict[str, np.ndarray]:
    """The coarse sub-grid of the kept knob values: every ``step``-th of each knob's, and its
    last, on knobs with more than COARSE_KEEP values (a subset of the grid: its designs are
    designs of the grid)."""
    out = {}
    for k, m in keep.items():
        idx = np.flatnonzero(m)
        if len(idx) <= COARSE_KEEP:
            out[k] = m
            continue
        sub = np.zeros_like(m)
        sub[idx[::step]] = True
        sub[idx[-1]] = True
        out[k] = sub
    return out


def _branch(setup: tuple, keep: dict[str, np.ndarray], t0: float, time_limit: float | None,
            start: list[dict[str, Any]], opts: dict[str, Any], verify: bool = False) -> BoxResult:
    """The search (:func:`search`) over the knob values ``keep`` (knob -> mask over its domain)."""
    inst, full, scheds, cons, domains = setup
    branching, batch, rtol, descend = opts["branching"], opts["batch"], opts["rtol"], opts["descend"]
    kept = {k: np.flatnonzero(m) for k, m in keep.items()}
    cols = fc.restrict(full, keep)
    b = Bounder(inst, cols, scheds, cons)
    b.cap = bb.bandwidth_cap(inst, cols, cons) if opts["coupled"] else None
    b.budgets = bb.budgets(cols, cons) if opts["coupled"] else None
    if verify:
        fc.verify_columns(inst, full, b.names - {"one"})
    sizes = np.array([len(kept[k]) for k in b.knobs])

    best_val, best_design, best_idx = math.inf, None, None
    evaluated, boxes, levels = 0, 0, []
    designs_here = float(np.prod(sizes.astype(float)))
    if designs_here > opts["coarse"]:
        sub = _coarse(keep)
        if float(np.prod([float(m.sum()) for m in sub.values()])) < designs_here:
            t1 = time.perf_counter()
            left = None if time_limit is None else max(0.0, time_limit - (t1 - t0)) * COARSE_SHARE
            r = _branch(setup, sub, t1, left, start, opts)
            levels = [*r.coarse, {"designs": float(np.prod([float(m.sum()) for m in sub.values()])),
                                  "seconds": r.seconds, "internal": r.internal, "complete": r.complete,
                                  "design": r.design}]
            evaluated, boxes = r.evaluated, r.boxes
            if r.design is not None:
                start = [*start, r.design]

    def evaluate(idx: np.ndarray) -> bool:
        """Evaluate the designs (value indices) with the model; True when the incumbent improved."""
        nonlocal best_val, best_design, best_idx, evaluated
        if not len(idx):
            return False
        idx = np.unique(idx, axis=0)
        designs = {k: domains[k][kept[k][idx[:, j]]] for j, k in enumerate(b.knobs)}
        hv = hardware_values(inst, Tables(hardware_table(inst, designs), scheds), cons=cons)
        evaluated += len(idx)
        i = int(np.argmin(hv.total))
        if hv.total[i] >= best_val:
            return False
        best_val, best_idx = float(hv.total[i]), idx[i].copy()
        design = {k: designs[k][i].item() for k in b.knobs}
        for w in inst.workloads:
            st = scheds[w.name]
            r = int(hv.arg[w.name][i])
            for d in inst.schedule_decisions(w.name):
                v = st.decisions[d.key][r]
                design[d.name] = v.item() if hasattr(v, "item") else v
        best_design = design
        return True

    def polish() -> None:
        """Pattern search with the model from the incumbent (:func:`_moves`) until nothing improves."""
        while best_idx is not None and evaluate(_moves(best_idx, sizes)):
            pass

    lo = np.zeros((1, len(b.knobs)), dtype=np.int64)
    hi = (sizes - 1)[None, :].astype(np.int64)
    bnd = b.bound(lo, hi)
    seeds = [(lo + hi)[0] // 2]
    for d in start:
        seeds.append(np.array([np.flatnonzero(domains[k][kept[k]] == d[k])[0] for k in b.knobs]))
    if evaluate(np.array(seeds)) and descend:
        polish()
    boxes, rounds, peak = boxes + 1, 0, 1
    trace = [(time.perf_counter() - t0, best_val, float(bnd.min()))]
    keep_open = np.isfinite(bnd) & ~(lo == hi).all(axis=1)
    lo, hi, bnd = lo[keep_open], hi[keep_open], bnd[keep_open]
    while len(bnd):
        cut = best_val * (1 - rtol) if math.isfinite(best_val) else math.inf
        alive = bnd < cut
        lo, hi, bnd = lo[alive], hi[alive], bnd[alive]
        if not len(bnd) or (rounds and time_limit is not None and time.perf_counter() - t0 > time_limit):
            break
        rounds += 1
        take = np.argsort(bnd, kind="stable")[:batch] if len(bnd) > batch else np.arange(len(bnd))
        rest = np.ones(len(bnd), dtype=bool)
        rest[take] = False
        plo, phi = lo[take], hi[take]
        width = phi - plo + 1
        if branching == "widest":
            knob = np.argmax(width, axis=1)
            clo, chi, cb = _split(b, plo, phi, knob)
        else:
            cut = best_val * (1 - rtol) if math.isfinite(best_val) else math.inf
            clo, chi, cb, nb = _shave(b, plo, phi, bnd[take], cut, opts["sections"], opts["wide"])
            boxes += nb
        boxes += len(cb) if branching == "widest" else 0
        if evaluate((clo + chi) // 2) and descend:
            polish()
        leaf = (clo == chi).all(axis=1)
        cut = best_val * (1 - rtol) if math.isfinite(best_val) else math.inf
        new = ~leaf & (cb < cut)
        lo = np.concatenate([lo[rest], clo[new]])
        hi = np.concatenate([hi[rest], chi[new]])
        bnd = np.concatenate([bnd[rest], cb[new]])
        peak = max(peak, len(bnd))
        trace.append((time.perf_counter() - t0, best_val, float(min(bnd.min(), best_val)) if len(bnd) else best_val))
    complete = not len(bnd)
    bound = best_val if complete else float(min(bnd.min(), best_val))
    return BoxResult(best_design, best_val, bound, complete, boxes, evaluated, rounds, len(bnd), peak,
                     time.perf_counter() - t0, 0, trace, capped=b.cap is not None, left=(lo, hi, bnd),
                     coarse=levels)


def _moves(at: np.ndarray, sizes: np.ndarray, pair: int = PAIR_MOVES) -> np.ndarray:
    """Designs (value indices) that differ from ``at`` in one knob by ±1, ±2, ±4, ... values, or
    in two knobs by 0, ±1, ±2, ... ±2^(pair−1) values each (a trade along a budget's boundary
    moves two knobs at once); only those inside the knobs' ranges."""
    out = []
    for j, n in enumerate(sizes):
        steps = 2 ** np.arange(int(n).bit_length())
        v = np.concatenate([at[j] - steps, at[j] + steps])
        v = v[(v >= 0) & (v < n)]
        d = np.repeat(at[None], len(v), axis=0)
        d[:, j] = v
        out.append(d)
    small = 2 ** np.arange(pair)
    steps = np.concatenate([-small[::-1], [0], small])
    a, c = (x.ravel() for x in np.meshgrid(steps, steps, indexing="ij"))
    for j1 in range(len(at)):
        for j2 in range(j1 + 1, len(at)):
            d = np.repeat(at[None], len(a), axis=0)
            d[:, j1] += a
            d[:, j2] += c
            out.append(d[((d >= 0) & (d < sizes)).all(axis=1)])
    return np.concatenate(out)


def _halves(lo, hi, knob):
    """The two halves of each box along its ``knob``."""
    rows = np.arange(len(lo))
    mid = (lo[rows, knob] + hi[rows, knob]) // 2
    lo1, hi1, lo2, hi2 = lo.copy(), hi.copy(), lo.copy(), hi.copy()
    hi1[rows, knob] = mid
    lo2[rows, knob] = np.minimum(mid + 1, hi[rows, knob])  # (a knob with one value: never chosen)
    return np.concatenate([lo1, lo2]), np.concatenate([hi1, hi2])


def _split(b: Bounder, lo, hi, knob):
    clo, chi = _halves(lo, hi, knob)
    return clo, chi, b.bound(clo, chi)


def _shave(b: Bounder, lo, hi, bnd, cut: float, sections: int = 2, wide: int = 2):
    """Cut every knob of each box into contiguous sections — its single values where it has at
    most ``sections`` values left, else ``wide`` equal parts — and bound each section's sub-box
    (the box with that knob restricted to the section; one batch). A section whose bound reaches ``cut`` (or that is
    empty) holds no better design: the box shrinks on that knob to its first to last live
    section (none live: the box is dropped). Each knob's least live section bound is a bound of
    the whole box (its sections cover it), so the box's bound becomes the largest of them — with
    single-value sections this is the box's least bound over that knob's values, which couples
    the knob's effect on the objective and on the constraints that the interval bound takes at
    opposite ends (formulations/factored.md §6). The shrunk box is split along the knob, among
    those not shrunk, whose worse child (a split at the middle section boundary) has the largest
    bound (ties to the widest); each child's bound is the larger of the box's and the least of
    its sections'. A box with no such knob is returned whole. With ``b.budgets``, each box's knob
    ranges are first tightened to what its hardware budgets allow."""
    if b.budgets is not None:
        lo, hi = b.budgets.tighten(b, lo, hi, PRUNE_RTOL)
        ok = (lo <= hi).all(axis=1)
        lo, hi, bnd = lo[ok], hi[ok], bnd[ok]
    n, k = lo.shape
    if not n:  # (every box had a budget no design of it meets)
        return lo, hi, bnd, 0
    width = hi - lo + 1
    parts = np.where(width <= sections, width, wide)  # (n, k) sections of each knob
    m = int(parts.max())
    idx = np.minimum(np.arange(m + 1)[None, None, :], parts[:, :, None])
    edge = lo[:, :, None] + (idx * width[:, :, None] + parts[:, :, None] - 1) // parts[:, :, None]
    s0, s1 = edge[:, :, :-1], edge[:, :, 1:] - 1  # section s: [s0, s1] (empty when s1 < s0)
    empty = s1 < s0
    L = np.repeat(lo[:, None, None, :], k, axis=1).repeat(m, axis=2)  # (n, k, m, k)
    H = np.repeat(hi[:, None, None, :], k, axis=1).repeat(m, axis=2)
    for j in range(k):
        L[:, j, :, j] = np.where(empty[:, j], lo[:, j, None], s0[:, j])
        H[:, j, :, j] = np.where(empty[:, j], lo[:, j, None], s1[:, j])
    cb = np.full(n * k * m, np.inf)
    full = ~empty.reshape(-1)
    parent = np.repeat(np.arange(n), k * m)[full]
    knob = np.tile(np.repeat(np.arange(k), m), n)[full]
    cb[full] = b.bound(L.reshape(-1, k)[full], H.reshape(-1, k)[full], sliced=(parent, lo, hi, knob))
    cb = cb.reshape(n, k, m)
    live = cb < cut
    M = np.where(live, cb, np.inf)
    alive = live.any(axis=2).all(axis=1)
    box = np.maximum(bnd, M.min(axis=2).max(axis=1))
    first = np.argmax(live, axis=2)
    last = m - 1 - np.argmax(live[:, :, ::-1], axis=2)
    take = lambda a, i: np.take_along_axis(a, i[:, :, None], axis=2)[:, :, 0]  # noqa: E731
    nlo, nhi = take(s0, first), take(s1, last)
    shrunk = (nlo > lo) | (nhi < hi)
    t = (first + last + 1) // 2
    sec = np.arange(m)[None, None, :]
    c1 = np.where((sec >= first[:, :, None]) & (sec < t[:, :, None]), M, np.inf).min(axis=2)
    c2 = np.where((sec >= t[:, :, None]) & (sec <= last[:, :, None]), M, np.inf).min(axis=2)
    free = (last > first) & ~shrunk
    pick = np.where(free, np.minimum(c1, c2), -np.inf)
    top = pick.max(axis=1, keepdims=True)
    knob = np.argmax(np.where(free & (pick >= top), nhi - nlo + 1, -1), axis=1)
    has = free.any(axis=1) & alive
    whole = ~free.any(axis=1) & alive
    r = np.flatnonzero(has)
    j = knob[has]
    a = np.arange(len(r))
    lo1, hi1, lo2, hi2 = nlo[has], nhi[has].copy(), nlo[has].copy(), nhi[has]
    hi1[a, j] = s0[r, j, t[r, j]] - 1
    lo2[a, j] = s0[r, j, t[r, j]]
    b1, b2 = np.maximum(box[r], c1[r, j]), np.maximum(box[r], c2[r, j])
    return (np.concatenate([lo1, lo2, nlo[whole]]), np.concatenate([hi1, hi2, nhi[whole]]),
            np.concatenate([b1, b2, box[whole]]), int(full.sum()))


def solve(problem: Any, *, time_limit: float | None = None, branching: str = "strong", bound: str = "coupled") -> Any:
    """The box search on a grid problem (:class:`codesign.kinds.grid.problem.Grid`) as the solve
    record the driver writes (:func:`codesign.proof.records.solution`): status ``optimal`` only when
    no box is left (the bound is then the incumbent's value: no design is better by more than
    CONFIRM_RTOL), else the least open bound. The best design is re-assessed with the model, which
    must agree with the search's value (else a ModelError). ``bound``: one of :data:`BOUNDS`."""
    if bound not in BOUNDS:
        raise ValueError(f"bound {bound!r}: one of {tuple(BOUNDS)}")
    t0 = time.perf_counter()
    try:
        r = search(problem.inst, time_limit=time_limit, branching=branching, **BOUNDS[bound])
        how = bound
    except fc.Unsupported as exc:
        raise InputError(f"the box search cannot solve {problem.name}: {exc}", key="--formulation", value="boxes",
                         suggestion="use --formulation factored or enumerated") from None
    best = None if r.design is None else problem.assess(r.design)
    if best is not None and not (best.feasible and math.isclose(best.internal, r.internal, rel_tol=1e-9)):
        raise ModelError(f"box search: the model gives {best.internal!r} (feasible {best.feasible}) for the design "
                         f"the search valued {r.internal!r}")

    def user(v: float) -> float | None:
        if not math.isfinite(v):
            return None
        if v <= 0 and problem.sense == "max":
            return None
        return problem.to_user(v)

    if r.complete:
        status = "optimal" if best is not None else "infeasible"
    else:
        status = "feasible" if best is not None else "no_solution"
    # a closed search proves the incumbent's own value (as the driver states it)
    bound = best.objective if r.complete and best is not None else (None if best is None else user(r.bound))
    termination = ("every box closed: " + ("the incumbent is optimal" if best else "no feasible design")
                   if r.complete else f"time limit: {r.open_boxes} boxes open")
    stats = {"formulation": "boxes", "box_bound": how, "hardware_designs": fz.hardware_designs(problem.inst), "boxes": r.boxes,
             "model_evaluations": r.evaluated, "rounds": r.rounds, "peak_open_boxes": r.peak_open,
             "pruned_values": r.pruned_values, "bandwidth_cap": r.capped,
             "coarse_solves": [{k: v for k, v in c.items() if k != "design"} for c in r.coarse]}
    proof = {"internal_objective": None if best is None else r.internal, "internal_bound": r.bound,
             "open_boxes": r.open_boxes, "prune_rtol": rtol_note()}
    return records.solution(problem, solver="boxes", status=status, best=best, bound=bound, termination=termination,
                            stats=stats, build_s=0.0, solve_s=r.seconds, time_s=time.perf_counter() - t0, proof=proof)


def rtol_note() -> str:
    return (f"boxes whose bound is at least incumbent x (1 - {CONFIRM_RTOL:g}) are closed; a box is infeasible "
            f"when a lower left side exceeds the upper right side by {PRUNE_RTOL:g} relative")
