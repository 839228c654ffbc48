"""The methods codesign is compared with, all on the same model (codesign.model) and space.

Exact methods
- :func:`naive_brute_force`: vectorised evaluation of every point of the full space (hardware x
  one layout per workload), no decomposition, no pruning; stops at a time budget and
  extrapolates.
- :func:`decomposed`: :func:`codesign.kinds.grid.space.brute_force`, "enumerate the shared hardware; for
  each, optimise each workload's schedule independently" (vectorised over hardware x layouts).
- :func:`decomposed_pruned`: the same plus bound-based pruning: workloads are taken one at a
  time and a hardware design is dropped once its partial sum (every metric is >= 0) exceeds
  the incumbent, which is the exact value of the best design after the first workload.
- :func:`deepstack_enumeration`: a DeepStack-style loop over hardware designs with hand-written
  pruning rules (hardware budgets first, then per workload: memory capacity, then SLOs), the
  surviving layouts of all workloads enumerated jointly (no decomposition across workloads).

Heuristics (:func:`random_search`, :func:`optuna_search`): uniform random sampling (vectorised),
Optuna TPE / NSGA-II (categorical decisions) and CMA-ES (decision indices as integers); the
objective is the model's Σ weight x metric, infeasible points get a penalty that grows with the
relative violation. Each records its best-so-far trace.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from codesign.kinds.grid.space import Tables, brute_force, constraint_values, fast_eval_form
from codesign.kinds.grid.spec import Instance
from codesign.model.evaluate import constraints, holds, objective_terms, workload_forms


# --- pointwise evaluation ---------------------------------------------------------------------
class Evaluator:
    """Σ weight x metric and constraint violation of design points given as rows."""

    def __init__(self, inst: Instance, tables: Tables):
        self.inst, self.tables = inst, tables
        self.hw = tables.hw
        self.cons = constraints(inst, tables.hw, tables.scheds)
        self.terms = objective_terms(inst)
        self.specs = {w.name: w for w in inst.workloads}
        self.forms = {w.name: workload_forms(tables.scheds[w.name], w.precision) for w in inst.workloads}
        self._hcol: dict[str, np.ndarray] = {}
        self._hw_index: dict | None = None
        self.sched_index = {
            w: {tuple(_py(v[i]) for v in st.decisions.values()): i for i in range(st.size)}
            for w, st in tables.scheds.items()
        }

    @property
    def hw_index(self) -> dict:
        if self._hw_index is None:
            cols = [v.tolist() for v in self.tables.hw.decisions.values()]
            self._hw_index = {t: i for i, t in enumerate(zip(*cols, strict=True))}
        return self._hw_index

    def hcol(self, name: str) -> np.ndarray:
        if name not in self._hcol:
            self._hcol[name] = self.hw.column(name)
        return self._hcol[name]

    def form(self, form, st, hr, sr) -> np.ndarray:
        def prod(p):
            h = self.hcol(p.hw)[hr]
            a = st.column(p.sched)[sr] if p.sched != "one" else np.ones(len(sr))
            with np.errstate(invalid="ignore"):
                v = h * a
            return np.where(a == 0.0, 0.0, v)

        total = np.zeros(len(hr))
        for p in form.linear:
            total += prod(p)
        for g in form.maxes:
            total += np.maximum.reduce([prod(p) for p in g])
        return total

    def lhs(self, c, st, hr, sr) -> np.ndarray:
        total = np.zeros(len(hr))
        for coef, f in c.lhs:
            total += coef * self.form(f, st, hr, sr)
        return total

    def points(self, hr: np.ndarray, srs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(internal objective, total relative violation) of points (hr[i], srs[w][i])."""
        obj = np.zeros(len(hr))
        viol = np.zeros(len(hr))
        one = self.tables.scheds[self.inst.workloads[0].name]
        for c in self.cons:
            if c.workload is None:
                lhs = self.lhs(c, one, hr, np.zeros(len(hr), dtype=int))
                rhs = c.rhs + (self.hcol(c.rhs_hw)[hr] if c.rhs_hw else 0.0)
            else:
                st = self.tables.scheds[c.workload]
                lhs = self.lhs(c, st, hr, srs[c.workload])
                rhs = c.rhs + (self.hcol(c.rhs_hw)[hr] if c.rhs_hw else 0.0)
            bad = ~holds(lhs, rhs)
            scale = np.maximum(np.abs(rhs), 1e-30)
            viol += np.where(bad, np.minimum(np.nan_to_num((lhs - rhs) / scale, posinf=1e3), 1e3), 0.0)
        for w, metric, weight in self.terms:
            st = self.tables.scheds[w]
            obj += weight * self.form(self.forms[w][metric], st, hr, srs[w])
        obj = np.where(np.isfinite(obj), obj, np.inf)
        viol = np.where(np.isfinite(obj), viol, viol + 1.0)
        return obj, viol


def _py(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else x


def within(inst: Instance, internal: float, opt_internal: float | None, rel: float = 0.01) -> bool:
    """Is a design of this internal value within ``rel`` of the optimum in the user's objective?"""
    if opt_internal is None or not np.isfinite(internal):
        return False
    if inst.objective.metric == "tokens_per_s":
        return internal <= opt_internal / (1 - rel)
    return internal <= opt_internal * (1 + rel)


@dataclass
class Trace:
    """Best-so-far (internal objective) after each improvement: (seconds, evaluations, best)."""

    points: list[tuple[float, int, float]] = field(default_factory=list)

    def add(self, t: float, n: int, best: float) -> None:
        if not self.points or best < self.points[-1][2]:
            self.points.append((t, n, best))

    def first_within(self, inst, opt, rel=0.01) -> tuple[float, int] | None:
        for t, n, b in self.points:
            if within(inst, b, opt, rel):
                return t, n
        return None


# --- exact methods ----------------------------------------------------------------------------
def naive_brute_force(inst: Instance, tables: Tables, budget_s: float, chunk_pairs: int = 262_144) -> dict:
    """Every point of the structural space evaluated (per hardware chunk the per-workload
    values, then every combination of one layout per workload summed): exact, no pruning."""
    t0 = time.perf_counter()
    hw = tables.hw
    ev = Evaluator(inst, tables)
    scheds = [tables.scheds[w] for w, _, _ in ev.terms]
    sizes = [s.size for s in scheds]
    per_hw = math.prod(sizes)
    total_points = hw.size * per_hw
    best = np.inf
    done = 0
    hw_ok = np.ones(hw.size, dtype=bool)
    for c in ev.cons:
        if c.workload is None:
            lhs = ev.lhs(c, scheds[0], np.arange(hw.size), np.zeros(hw.size, dtype=int))
            hw_ok &= holds(lhs, c.rhs + (ev.hcol(c.rhs_hw) if c.rhs_hw else 0.0))
    chunk = max(1, chunk_pairs // max(sizes))
    finished = True
    hcols: dict[str, np.ndarray] = {}  # whole hardware columns, computed once for every chunk
    for start in range(0, hw.size, chunk):
        rows = np.arange(start, min(hw.size, start + chunk))
        vals = []
        for (w, metric, weight), st in zip(ev.terms, scheds, strict=True):
            v = fast_eval_form(ev.forms[w][metric], hw, st, rows, hcols)
            if weight != 1.0:
                v *= weight
            for c in ev.cons:
                if c.workload == w:
                    rhs = c.rhs + (ev.hcol(c.rhs_hw)[rows][:, None] if c.rhs_hw else 0.0)
                    v[~holds(constraint_values(c, hw, st, rows, hcols), rhs)] = np.inf
            v[~hw_ok[rows]] = np.inf
            vals.append(v)
        if len(vals) == 1:
            best = min(best, float(vals[0].min()))
            done += vals[0].size
        else:
            # every joint point: one layout per workload, summed (the last two vectorised)
            for i in range(len(rows)):
                vs = [v[i] for v in vals]
                tail = np.add.outer(vs[-2], vs[-1]).ravel()
                for combo in itertools.product(*vs[:-2]):
                    best = min(best, float(np.min(tail + sum(combo))))
                    done += tail.size
                    if time.perf_counter() - t0 > budget_s:
                        finished = False
                        break
                if not finished:
                    break
        if not finished or (time.perf_counter() - t0 > budget_s and start + chunk < hw.size):
            finished = False
            break
    el = time.perf_counter() - t0
    rate = done / el if el > 0 else float("inf")
    return {
        "finished": finished,
        "seconds": el,
        "points_evaluated": done,
        "points_per_s": rate,
        "points_total": total_points,
        "time_s": el if finished else total_points / rate,
        "extrapolated": not finished,
        "internal": float(best) if finished and np.isfinite(best) else None,
    }


def decomposed(inst: Instance, tables: Tables) -> dict:
    t0 = time.perf_counter()
    bf = brute_force(inst, tables)
    el = time.perf_counter() - t0
    return {"seconds": el, "internal": bf.internal, "points_total": bf.points,
            "points_per_s": bf.points / el if el else None}


def decomposed_pruned(inst: Instance, tables: Tables) -> dict:
    """Decomposed exact enumeration with bound-based pruning across workloads (hardware
    budgets first; workloads one at a time; a design is dropped once its partial sum exceeds
    the incumbent; see :func:`codesign.kinds.grid.space.hardware_values` with ``prune``)."""
    from codesign.kinds.grid.space import hardware_values

    t0 = time.perf_counter()
    hv = hardware_values(inst, tables, prune=True)
    fin = np.isfinite(hv.total)
    el = time.perf_counter() - t0
    return {"seconds": el, "internal": float(hv.total[fin].min()) if fin.any() else None,
            "pairs_evaluated": hv.pairs, "hardware_left": int(fin.sum())}


def _workload_best(inst, tables, cons, w, metric, rows) -> np.ndarray:
    hw, st = tables.hw, tables.scheds[w]
    spec = next(x for x in inst.workloads if x.name == w)
    form = workload_forms(st, spec.precision)[metric]
    out = np.empty(len(rows))
    chunk = max(1, 2_000_000 // max(1, st.size))
    for s in range(0, len(rows), chunk):
        part = rows[s : s + chunk]
        v = fast_eval_form(form, hw, st, part)
        for c in cons:
            if c.workload == w:
                rhs = c.rhs + (hw.column(c.rhs_hw)[part][:, None] if c.rhs_hw else 0.0)
                v = np.where(holds(constraint_values(c, hw, st, part), rhs), v, np.inf)
        out[s : s + len(part)] = np.min(np.where(np.isfinite(v), v, np.inf), axis=1)
    return out


def deepstack_enumeration(inst: Instance, tables: Tables, budget_s: float) -> dict:
    """DeepStack-style: for each hardware design (Python loop) apply the rules, then enumerate
    the surviving layouts jointly. Rules: (1) hardware budgets / thermal; (2) a layout whose
    memory exceeds the capacity is skipped; (3) a layout breaking an SLO or energy budget is
    skipped. Stops at the budget and extrapolates from the designs done."""
    t0 = time.perf_counter()
    hw = tables.hw
    ev = Evaluator(inst, tables)
    one = tables.scheds[inst.workloads[0].name]
    hw_ok = np.ones(hw.size, dtype=bool)
    for c in ev.cons:
        if c.workload is None:
            lhs = ev.lhs(c, one, np.arange(hw.size), np.zeros(hw.size, dtype=int))
            hw_ok &= holds(lhs, c.rhs + (ev.hcol(c.rhs_hw) if c.rhs_hw else 0.0))
    best = np.inf
    joint = 0
    done = 0
    order = np.arange(hw.size)
    est_joint_total = 0.0
    finished = True
    t_joint = 0.0
    for h in order:
        if time.perf_counter() - t0 > budget_s:
            finished = False
            break
        done += 1
        if not hw_ok[h]:
            continue  # rule 1
        vals = []
        for w, metric, weight in ev.terms:
            st = tables.scheds[w]
            rows = np.array([h])
            mask = np.ones(st.size, dtype=bool)
            for c in ev.cons:  # rules 2 and 3, memory first
                if c.workload == w:
                    rhs = c.rhs + (hw.column(c.rhs_hw)[rows][:, None] if c.rhs_hw else 0.0)
                    mask &= holds(constraint_values(c, hw, st, rows), rhs)[0]
            v = (fast_eval_form(ev.forms[w][metric], hw, st, rows)[0] * weight)[mask]
            vals.append(v)
            if not mask.any():
                break
        if any(len(v) == 0 for v in vals):
            continue
        n_joint = math.prod(len(v) for v in vals)
        est_joint_total += n_joint
        if n_joint > 2e7:
            finished = False  # cannot finish this design's joint enumeration in reasonable time
            continue
        tj = time.perf_counter()
        acc = vals[0]
        for v in vals[1:]:
            acc = np.add.outer(acc, v).ravel()
        joint += n_joint
        best = min(best, float(acc.min()))
        t_joint += time.perf_counter() - tj
    el = time.perf_counter() - t0
    if finished:
        return {"finished": True, "seconds": el, "time_s": el, "internal": float(best) if np.isfinite(best) else None,
                "hardware_done": done, "joint_points": joint, "extrapolated": False}
    # extrapolate: the measured per-design loop cost (without joint sums) for every design, plus
    # every design's joint sums at the measured rate (joint sums timed above; if none was small
    # enough to run, a 2e7-element np.add.outer is timed here)
    if joint > 0 and t_joint > 0:
        add_rate = joint / t_joint
    else:
        a = np.random.default_rng(0).random(4472)
        tj = time.perf_counter()
        float(np.add.outer(a, a).ravel().min())
        add_rate = a.size**2 / (time.perf_counter() - tj)
    frac = done / hw.size
    per_design = (el - t_joint) / max(done, 1)
    est = per_design * hw.size + (est_joint_total / max(frac, 1e-12)) / add_rate
    return {"finished": False, "seconds": el, "time_s": est, "internal": None, "hardware_done": done,
            "joint_points": joint, "joint_points_estimated": est_joint_total / max(frac, 1e-12),
            "joint_sums_per_s": add_rate, "extrapolated": True}


# --- heuristics -------------------------------------------------------------------------------
def penalised(obj: np.ndarray, viol: np.ndarray, scale: float) -> np.ndarray:
    """Objective for the searches: feasible -> Σ weight x metric; infeasible -> 10·scale·(1+violation)."""
    return np.where((viol == 0) & np.isfinite(obj), obj, 10.0 * scale * (1.0 + np.minimum(viol, 1e3)))


def random_search(inst: Instance, tables: Tables, budget_s: float, seed: int, scale: float,
                  opt: float | None = None, batch: int = 4096, max_points: int | None = None) -> dict:
    """Uniform samples of (hardware row, one structural layout per workload), vectorised."""
    rng = np.random.default_rng(seed)
    ev = Evaluator(inst, tables)
    t0 = time.perf_counter()
    tr = Trace()
    best = np.inf
    n = 0
    while time.perf_counter() - t0 < budget_s and (max_points is None or n < max_points):
        hr = rng.integers(0, tables.hw.size, size=batch)
        srs = {w: rng.integers(0, st.size, size=batch) for w, st in tables.scheds.items()}
        obj, viol = ev.points(hr, srs)
        f = np.where(viol == 0, obj, np.inf)
        n += batch
        m = float(f.min())
        if m < best:
            best = m
            tr.add(time.perf_counter() - t0, n, best)
        if opt is not None and best <= opt * (1 + 1e-9):
            break
    return {"seconds": time.perf_counter() - t0, "evaluations": n, "best": best if np.isfinite(best) else None,
            "trace": tr.points, "within_1pct": tr.first_within(inst, opt)}


def optuna_search(inst: Instance, tables: Tables, sampler_name: str, seed: int, trials: int, budget_s: float,
                  scale: float, opt: float | None = None) -> dict:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ev = Evaluator(inst, tables)
    hw_names = list(tables.hw.decisions)
    hw_domains = {d.name: list(d.domain) for d in inst.hardware_decisions}
    sched_decs = {w.name: [(d.name, d.key, list(d.domain)) for d in inst.schedule_decisions(w.name)]
                  for w in inst.workloads}
    if sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    elif sampler_name == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed)
    elif sampler_name == "cmaes":
        sampler = optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    else:
        raise ValueError(sampler_name)
    as_index = sampler_name == "cmaes"  # CMA-ES needs numbers: the index into each ordered domain

    def pick(trial, name, dom):
        if as_index:
            return dom[trial.suggest_int(name, 0, len(dom) - 1)]
        return trial.suggest_categorical(name, dom)

    tr = Trace()
    t0 = time.perf_counter()
    state = {"best": np.inf, "n": 0}

    def objective(trial):
        hv = tuple(_py(pick(trial, n, hw_domains[n])) for n in hw_names)
        h = ev.hw_index[hv]
        srs = {}
        struct_bad = False
        for w, decs in sched_decs.items():
            vals = {key: pick(trial, name, dom) for name, key, dom in decs}
            st = tables.scheds[w]
            key = tuple(_py(vals[k]) for k in st.decisions)
            s = ev.sched_index[w].get(key)
            if s is None:
                struct_bad = True
                s = 0
            srs[w] = np.array([s])
        obj, viol = ev.points(np.array([h]), srs)
        if struct_bad:
            obj, viol = np.array([np.inf]), viol + 1.0
        f = float(penalised(obj, viol, scale)[0])
        state["n"] += 1
        feas = bool(viol[0] == 0 and np.isfinite(obj[0]))
        if feas and obj[0] < state["best"]:
            state["best"] = float(obj[0])
            tr.add(time.perf_counter() - t0, state["n"], state["best"])
        if opt is not None and state["best"] <= opt * (1 + 1e-9):
            trial.study.stop()
        return f

    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.optimize(objective, n_trials=trials, timeout=budget_s)
    best = state["best"]
    return {"seconds": time.perf_counter() - t0, "evaluations": state["n"],
            "best": best if np.isfinite(best) else None, "trace": tr.points,
            "within_1pct": tr.first_within(inst, opt)}
