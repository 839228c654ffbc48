"""Joint co-design scaling series (issue 29, item 5): generated joint instances of growing size,
each proven by codesign beside the best exact alternative and Optuna TPE.

The series (:func:`codesign.kinds.mapping.generate.generate_joint`): dense-1t (128 layers) over
8 to 128 pipeline stages in 4 consecutive groups, each group's chip a hardware decision (H100, H200
or B200: 81 chip assignments), 4 Photonic Fabric modules, one optical port per GPU, the layer split,
each layer's weight and KV tier (HBM, a module's HBM or DDR) and each port's module decided in the
same MIP; least energy per token within a provisioned-power envelope of 875 W per GPU (at most two groups of
B200s). A single pipeline holds at least one layer per stage, so 128 stages is its end; beyond it a
stage is a TP group (formulations/mapping.md eq. 9.2a): ``--devices 256`` is 128 stages of 2 GPUs
(``--tp``; default: 1 up to 128 devices, else the least that keeps a stage per layer), each layer
adding two all-reduces over NVLink.

Per instance:

* **codesign**: :func:`codesign.proof.driver.solve` with ``--solver auto`` (its choice recorded),
  time to the proof (build included), objective, bound, gap; ``--repeats`` runs.
* **decomposition with bound pruning** (the best exact alternative): enumerate the hardware options;
  drop those over the power envelope (a check of the hardware alone); rank the rest by their greedy
  mapping (the kind's rule) and take its best feasible design as the first incumbent; then prove each
  option's mapping with the same solver and driver, with the incumbent as a cutoff (an option that
  cannot beat it is proved so and dropped; one that does becomes the incumbent). Measured until
  ``--decomp-cap`` seconds; beyond it, extrapolated (marked ``extrapolated``): the time measured plus
  the options left x the mean time of a pruned option (they rank below the measured ones, so most
  are pruned; the mean of every proved option when fewer than 3 were pruned).
* **Optuna TPE** (3 seeds): the same design space through a decoder: the chips (categorical); per
  stage a share of the layers (the split: one layer each plus the rest by largest remainder of the
  shares), its module (categorical) and four fractions (weights local / rest in the module's HBM,
  the same for the KV cache), rounded to counts; every count vector of a one-port device is reachable
  (layers are alike, so their order within a stage does not matter). Infeasible points score their
  period plus a penalty. Budget per seed: ``min(10 x codesign's time, --tpe-cap)``; the time from the
  start of the study to the first design within 1 % of the proven optimum, or never.

Exactness: wherever the decomposition finishes, its optimum must equal codesign's (``agree``);
where it stops at the cap, no option it proved may beat codesign's optimum (``no_option_better``).

    python benchmarks/joint_scaling.py            # 8..128 devices -> results/joint_scaling.json (~20 min on 2 shared cores)
    python benchmarks/joint_scaling.py --quick    # 8 and 16 devices, shorter caps
    python benchmarks/joint_scaling.py --plot-only

Times are wall-clock on shared cores; the 1-minute load average at each step's start is recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import HERE, RESULTS, load, machine, same

from codesign.jsonio import write_json_atomic
from codesign.kinds.mapping import joint
from codesign.kinds.mapping.formulation import greedy_design
from codesign.kinds.mapping.generate import generate_joint
from codesign.kinds.mapping.problem import Mapping
from codesign.model.mapping import MappingDesign, evaluate_mapping
from codesign.proof.driver import choose_solver, confirm_with_highs, judge_problem, run, solve
from codesign.proof.tolerances import CONFIRM_RTOL

SERIES = (8, 16, 32, 64, 128)
QUICK = (8, 16)
#: the series' fixed settings (generate_joint's arguments besides devices)
SETTINGS: dict[str, Any] = {"groups": 4, "modules": 4, "tiers": ("local", "pool"), "objective": "energy_per_token_J",
                            "power_W_per_device": 875.0}
#: a TPE trial over a budget scores its period plus this (s; periods are well under 1 s)
PENALTY_S = 1e3
FIGURE = HERE / "figures" / "joint_scaling.png"


#: dense-1t's decoder layers: the most stages of one pipeline
LAYERS = 128


def tp_of(devices: int, tp: int | None) -> int:
    """The TP degree of a size: the one given, else 1 up to LAYERS devices, else the least power of 2
    that keeps a stage per layer."""
    if tp is not None:
        return tp
    t = 1
    while devices > LAYERS * t:
        t *= 2
    return t


def instance(devices: int, tp: int = 1) -> Mapping:
    extra = {"tp": tp} if tp > 1 else {}
    return Mapping.from_data(generate_joint(devices=devices, **SETTINGS, **extra),
                             source=f"generate_joint(devices={devices}{f', tp={tp}' if tp > 1 else ''})")


def log10(n: int) -> float:
    digits = str(n)
    return len(digits) - 1 + math.log10(int(digits[:15]) / 10 ** (min(len(digits), 15) - 1))


# --- codesign ----------------------------------------------------------------------------------


def codesign(p: Mapping, repeats: int, time_limit: float) -> dict[str, Any]:
    runs = []
    for _ in range(repeats):
        at = load()
        sol = solve(p, solver="auto", time_limit=time_limit)
        runs.append({"solver": sol.solver, "status": sol.status, "objective": sol.objective, "bound": sol.bound,
                     "gap": sol.gap, "time_s": sol.time_s, "build_s": sol.build_s,
                     "internal": sol.proof.get("internal_objective"),
                     "hardware": (sol.design or {}).get(joint.HARDWARE_KEY), "loadavg_at_start": at})
    proven = [r for r in runs if r["status"] == "optimal"]
    return {"runs": runs, "solver": runs[0]["solver"], "proven": len(proven) == len(runs),
            "median_time_s": statistics.median(r["time_s"] for r in runs),
            "objective": runs[0]["objective"], "internal": runs[0]["internal"], "hardware": runs[0]["hardware"]}


# --- decomposition with bound pruning ------------------------------------------------------------


def decomposition(p: Mapping, solver: str, cap_s: float) -> dict[str, Any]:
    """Every hardware option's mapping proved apart, pruned by the incumbent (module docstring)."""
    at = load()
    t0 = time.perf_counter()
    over, ranked = [], []
    for h in p.hardware.choices():
        q = p.problem_at(h)
        if q.power_budget_W is not None and q.devices_tdp_W + q.hardware_static_W > q.power_budget_W * (1 + 1e-9):
            over.append(h)
            continue
        ev = evaluate_mapping(q, greedy_design(q))
        value = ev.period_s if q.objective == "tokens_per_s" else ev.energy_per_token_J
        ranked.append((not ev.feasible, value, h))
    ranked.sort(key=lambda r: (r[0], r[1]))
    best = next((v for infeasible, v, _ in ranked if not infeasible), math.inf)
    best_hw = ranked[0][2] if math.isfinite(best) else None
    screen_s = time.perf_counter() - t0
    parts: list[dict[str, Any]] = []
    complete = True
    for _, _, h in ranked:
        left = cap_s - (time.perf_counter() - t0)
        if left <= 0:
            complete = False
            break
        s0 = time.perf_counter()
        q = Mapping(joint.instance_at(p.inst, h))
        form = q.formulate(solver)
        cutoff = None if not math.isfinite(best) else best * (1 - CONFIRM_RTOL)
        r = run(form, judge_problem(q), solver, time_limit=left, cutoff=cutoff,
                confirm_infeasible=confirm_with_highs(q, cutoff) if solver == "cpsat" else None)
        took = time.perf_counter() - s0
        proved = r.status in ("optimal", "infeasible")
        parts.append({"hardware": h, "status": r.status, "internal": None if r.best is None else r.best_internal,
                      "time_s": took, "pruned": r.status == "infeasible" and cutoff is not None})
        if r.status == "optimal" and r.best_internal < best:
            best, best_hw = r.best_internal, h
        if not proved:
            complete = False
            break
    measured = time.perf_counter() - t0
    done = [x for x in parts if x["status"] in ("optimal", "infeasible")]
    left_n = len(ranked) - len(done)
    pruned = [x["time_s"] for x in done if x["pruned"]]
    # the options left rank below those measured (their greedy mapping is worse), so most are pruned:
    # each is charged the mean time of a pruned option (of every proved one when fewer than 3 were)
    per = statistics.mean(pruned) if len(pruned) >= 3 else statistics.mean(x["time_s"] for x in done) if done else None
    unfinished = sum(x["time_s"] for x in parts if x["status"] not in ("optimal", "infeasible"))
    total = measured if left_n == 0 else (None if per is None else measured - unfinished + per * left_n)
    return {"solver": solver, "options": len(ranked) + len(over), "over_power_budget": len(over),
            "screen_s": screen_s, "proved": len(done), "pruned": sum(x["pruned"] for x in done),
            "left": left_n, "complete": complete and left_n == 0, "measured_s": measured,
            "mean_per_option_s": per, "mean_proved_s": statistics.mean(x["time_s"] for x in done) if done else None, "total_s": total, "extrapolated": left_n > 0,
            "best_internal": best if math.isfinite(best) else None, "best_hardware": best_hw,
            "per_option": parts, "cap_s": cap_s, "loadavg_at_start": at}


# --- Optuna TPE ---------------------------------------------------------------------------------


def split(shares: list[float], layers: int) -> list[int]:
    """One layer per stage, the rest by largest remainder of the shares."""
    D = len(shares)
    w = np.asarray(shares, dtype=float) + 1e-12
    raw = (layers - D) * w / w.sum()
    n = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - n))[: layers - D - int(n.sum())]:
        n[i] += 1
    return [int(x) + 1 for x in n]


def decoder(p: Mapping):
    """trial -> (hardware, fixed-hardware problem, mapping design) over the whole design space."""
    space = p.hardware
    base = p.model
    D, L = base.stages, base.layers
    kinds = sorted({t.label.split(":")[2] for t in base.tiers if t.kind == "pool"})

    def decode(trial: Any) -> tuple[dict[str, Any], Any, MappingDesign]:
        chips = {g: trial.suggest_categorical(f"chip[{g}]", list(ids)) for g, ids in space.chips.items()}
        mods = trial.suggest_categorical("modules", list(space.modules)) if len(space.modules) > 1 else \
            (space.modules[0] if space.modules else None)
        ports = {g: trial.suggest_categorical(f"ports[{g}]", list(v)) if len(v) > 1 else v[0] for g, v in space.ports.items()}
        hw = space.design(mods, ports, chips or None)
        q = p.problem_at(hw)
        n = split([trial.suggest_float(f"share[{d}]", 0.0, 1.0) for d in range(D)], L)
        weights: list[str] = []
        kv: list[str] = []
        attach: list[list[int]] = []
        for d in range(D):
            j = trial.suggest_int(f"module[{d}]", 0, base.modules - 1) if base.modules else 0
            uses = False
            for out, what in ((weights, "w"), (kv, "k")):
                local = round(trial.suggest_float(f"{what}_local[{d}]", 0.0, 1.0) * n[d])
                rest = n[d] - local
                first = round(trial.suggest_float(f"{what}_{kinds[0]}[{d}]", 0.0, 1.0) * rest) if kinds else 0
                out += ["local"] * local
                if rest and (q.modules == 0 or j >= q.modules or q.devices[d].ports == 0):
                    out += ["local"] * rest  # no reachable module: all local
                    continue
                out += [f"pool:{j}:{kinds[0]}"] * first + [f"pool:{j}:{kinds[-1]}"] * (rest - first)
                uses = uses or rest > 0
            attach.append([j] if uses else [])
        return hw, q, MappingDesign(tuple(n), tuple(weights), tuple(kv), tuple(tuple(a) for a in attach))

    return decode


def tpe(p: Mapping, opt_internal: float | None, budget_s: float, seed: int) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    decode = decoder(p)
    trace: list[tuple[float, int, float]] = []  # (seconds, trial, best internal) at each improvement
    best = [math.inf]
    t0 = time.perf_counter()

    def objective(trial: Any) -> float:
        _, q, design = decode(trial)
        ev = evaluate_mapping(q, design)
        value = ev.period_s if q.objective == "tokens_per_s" else ev.energy_per_token_J
        if ev.feasible and value < best[0]:
            best[0] = value
            trace.append((time.perf_counter() - t0, trial.number, value))
        return value if ev.feasible else PENALTY_S + value

    at = load()
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, timeout=budget_s)
    first = None
    if opt_internal is not None:
        first = next(((s, k) for s, k, v in trace if v <= opt_internal * 1.01), None)
    return {"seed": seed, "budget_s": budget_s, "trials": len(study.trials), "best_internal": best[0] if trace else None,
            "gap_at_end": None if not trace or opt_internal is None else best[0] / opt_internal - 1,
            "within_1pct_s": None if first is None else first[0], "within_1pct_trial": None if first is None else first[1],
            "trace": trace, "loadavg_at_start": at}


# --- the series ---------------------------------------------------------------------------------


def row(devices: int, a: argparse.Namespace) -> dict[str, Any]:
    tp = tp_of(devices, a.tp)
    p = instance(devices, tp)
    out: dict[str, Any] = {"name": p.name, "devices": devices, "tp": tp, "stages": devices // tp,
                           "options": len(p.hardware.choices()),
                           "space_log10": log10(p.space_size()), "metric": p.metric, "sense": p.sense}
    print(f"{p.name}: {out['options']} hardware options, 1e{out['space_log10']:.0f} points", flush=True)
    cd = codesign(p, a.repeats, a.time_limit)
    # peak resident memory so far (Linux: KiB): this process (the build, in-process solvers) and its children
    cd["peak_rss_MiB_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cd["peak_rss_MiB_children"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out["codesign"] = cd
    t = cd["median_time_s"]
    print(f"  codesign ({cd['solver']}): {[r['status'] for r in cd['runs']]} {cd['objective']} in {t:.2f} s", flush=True)
    opt = cd["internal"] if cd["proven"] else None
    if not a.no_decomposition:
        dc = decomposition(p, choose_solver(p, "auto"), a.decomp_cap)
        dc["agree"] = same(dc["best_internal"], opt) if dc["complete"] and opt is not None else None
        dc["no_option_better"] = None if opt is None else all(
            x["internal"] is None or x["internal"] >= opt * (1 - 1e-9) for x in dc["per_option"])
        dc["ratio_to_codesign"] = None if dc["total_s"] is None else dc["total_s"] / t
        out["decomposition"] = dc
        print(f"  decomposition: {dc['proved']}/{dc['options'] - dc['over_power_budget']} options proved "
              f"({dc['pruned']} pruned), {'~' if dc['extrapolated'] else ''}{dc['total_s']} s, "
              f"agree {dc['agree']}, ratio {dc['ratio_to_codesign']}", flush=True)
    if not a.no_tpe and opt is not None:
        budget = min(10 * t, a.tpe_cap)
        seeds = [tpe(p, opt, budget, s) for s in range(a.seeds)]
        hits = [s["within_1pct_s"] for s in seeds if s["within_1pct_s"] is not None]
        out["tpe"] = {"budget_s": budget, "conclusive": budget >= 10 * t, "seeds": seeds, "within_1pct": len(hits),
                      "median_within_1pct_s": statistics.median(hits) if len(hits) * 2 > len(seeds) else None,
                      "fastest_within_1pct_s": min(hits) if hits else None,
                      "ratio_fastest_to_codesign": min(hits) / t if hits else None}
        print(f"  TPE ({budget:.0f} s/seed): within 1 % on {len(hits)}/{len(seeds)} seeds; "
              f"gaps {[None if s['gap_at_end'] is None else round(s['gap_at_end'], 4) for s in seeds]}", flush=True)
    return out


def figure_of(out: Path) -> Path:
    """The figure of a results file: figures/<its name>.png for one in results/ (joint_scaling.png for the
    default), else a .png beside it."""
    return FIGURE.with_name(f"{out.stem}.png") if out.resolve().parent == RESULTS.resolve() else out.with_suffix(".png")


def plot(doc: dict[str, Any], path: Path = FIGURE) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["instances"]
    x = [r["devices"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(x, [r["codesign"]["median_time_s"] for r in rows], "-", color="C0")
    for r in rows:
        ax.plot(r["devices"], r["codesign"]["median_time_s"], "o", color="C0", mfc="C0" if r["codesign"]["proven"] else "none")
    ax.plot([], [], "o-", color="C0", label="codesign (auto), proof (hollow: not proven at its limit)")
    dec = [(r["devices"], r["decomposition"]) for r in rows if r.get("decomposition", {}).get("total_s")]
    if dec:
        ax.plot([d for d, _ in dec], [v["total_s"] for _, v in dec], "-", color="C1")
        for d, v in dec:
            ax.plot(d, v["total_s"], "s", color="C1", mfc="none" if v["extrapolated"] else "C1")
        ax.plot([], [], "s-", color="C1", label="decomposition + pruning (hollow: extrapolated)")
    for r in rows:
        tp = r.get("tpe")
        if not tp:
            continue
        if tp["median_within_1pct_s"] is not None:
            ax.plot(r["devices"], tp["median_within_1pct_s"], "^", color="C2")
        else:
            ax.plot(r["devices"], tp["budget_s"], "x", color="C2", ms=9)
    ax.plot([], [], "^", color="C2", label="TPE within 1 % (median; x: most seeds never, at the budget)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(x, [str(v) for v in x])
    ax.set_xlabel("devices (pipeline stages; beyond 128: stages of TP 2), 81 chip assignments each")
    ax.set_ylabel("seconds")
    ax.set_title("Joint chip choice and mapping (dense-1t): time to the optimum")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path



def _s(v: float | None) -> str:
    return "–" if v is None else (f"{v:.3g}" if v < 100 else f"{v:.0f}")


def section(doc: dict[str, Any] | None) -> dict[str, str]:
    """BENCHMARKS.md's joint scaling series (``{{JOINT_SCALING_*}}``) from results/joint_scaling.json."""
    if not doc:
        return {"JOINT_SCALING_NOTES": "Not measured yet (`python benchmarks/joint_scaling.py`).",
                "JOINT_SCALING_TABLE": "", "JOINT_SCALING_TARGETS": ""}
    rows, m = doc["instances"], doc["machine"]
    loads = [x for r in rows for x in [*(u["loadavg_at_start"] for u in r["codesign"]["runs"]),
                                       r.get("decomposition", {}).get("loadavg_at_start")] if x is not None]
    notes = (f"Command: `python benchmarks/joint_scaling.py` → `results/joint_scaling.json`; recorded {m['date']}, "
             f"commit {m['git']}, load {min(loads):.1f}–{max(loads):.1f}, {_s(doc.get('wall_s'))} s in all. "
             f"codesign: {doc['repeats']} run(s) per size, `--solver auto`; decomposition measured up to "
             f"{doc['decomp_cap_s']:.0f} s per size, then extrapolated; TPE {doc['seeds']} seeds, "
             f"min(10 × codesign's time, {doc['tpe_cap_s']:.0f} s) each.")
    head = ["| devices | points | codesign (auto) | decomposition + pruning | decomposition / codesign "
            "| TPE within 1 % | TPE / codesign | exact |", "|---|---|---|---|---|---|---|---|"]
    lines, dec_ratios, tpe_cells = [], [], []
    for r in rows:
        cd = r["codesign"]
        st = cd["runs"][0]
        c = (f"{cd['median_time_s']:.1f} s ({cd['solver']})" if cd["proven"] else
             f"{st['status']} at {st['time_s']:.0f} s, gap {st['gap'] if st['gap'] is not None else '–'}")
        dc = r.get("decomposition")
        d = "–" if not dc or dc["total_s"] is None else (
            f"{'~' if dc['extrapolated'] else ''}{_s(dc['total_s'])} s ({dc['proved']} of "
            f"{dc['options'] - dc['over_power_budget']} options proved, {dc['pruned']} pruned)")
        ratio = None if not dc or not cd["proven"] else dc["ratio_to_codesign"]
        if ratio is not None:
            dec_ratios.append((ratio, r["devices"]))
        tp = r.get("tpe")
        if tp:
            n = len(tp["seeds"])
            fast = tp["fastest_within_1pct_s"]
            gaps = [x["gap_at_end"] for x in tp["seeds"] if x["gap_at_end"] is not None]
            t_cell = (f"{tp['within_1pct']}/{n} seeds in {tp['budget_s']:.0f} s" + (f", fastest {fast:.1f} s" if fast else "")
                      + (f"; best seed's gap at the end {min(gaps) * 100:.1f} %" if gaps and not fast else "")
                      + (f"; {n - len(gaps)} found no feasible design" if len(gaps) < n else ""))
            if fast:
                tr = f"{tp['ratio_fastest_to_codesign']:.1f}×"
            else:
                tr = f"> {tp['budget_s'] / cd['median_time_s']:.1f}×"
            tpe_cells.append((r["devices"], tp, cd["median_time_s"]))
        else:
            t_cell, tr = "–", "–"
        partial_same = dc and cd["proven"] and same(dc["best_internal"], cd["internal"])
        ex = "–" if not dc else ("same optimum" if dc["agree"] else "differs!" if dc["agree"] is False else
                                 ("no option proved better" + ("; its best so far is codesign's optimum" if partial_same else ""))
                                 if dc["no_option_better"] else "–")
        lines.append(f"| {r['devices']} | 1e{r['space_log10']:.0f} | {c} | {d} | "
                     f"{'–' if ratio is None else f'{ratio:.1f}×'} | {t_cell} | {tr} | {ex} |")
    targets = []
    if dec_ratios:
        lo = min(dec_ratios)
        met = sum(x >= 100 for x, _ in dec_ratios)
        targets.append(f"- **≥ 100× faster than the best exact alternative** (decomposition with bound pruning): "
                       f"{', '.join(f'{x:.1f}× at {d}' for x, d in dec_ratios)}; lowest {lo[0]:.1f}× ({lo[1]} devices); "
                       f"met on {met} of {len(dec_ratios)} sizes.")
    if tpe_cells:
        parts, met, open_ = [], 0, 0
        for d, tp, t in tpe_cells:
            if tp["fastest_within_1pct_s"] is not None:
                x = tp["fastest_within_1pct_s"] / t
                met += x >= 10
                parts.append(f"{x:.1f}× at {d}")
            elif tp["conclusive"]:
                met += 1
                parts.append(f"> 10× at {d} (no seed within 1 %)")
            else:
                open_ += 1
                parts.append(f"> {tp['budget_s'] / t:.1f}× at {d} (no seed within 1 % in a budget under 10× codesign's time)")
        targets.append(f"- **Proven optimum ≥ 10× sooner than TPE gets within 1 %** (its fastest seed): {'; '.join(parts)}; "
                       f"met on {met} of {len(tpe_cells)} sizes" + (f", {open_} inconclusive" if open_ else "") + ".")
    return {"JOINT_SCALING_NOTES": notes, "JOINT_SCALING_TABLE": "\n".join(head + lines),
            "JOINT_SCALING_TARGETS": "\n".join(targets)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 and 16 devices; decomposition cap 30 s, TPE cap 15 s")
    ap.add_argument("--devices", type=int, nargs="*", help="the sizes (default: 8 16 32 64 128; 256 is 128 stages of TP 2)")
    ap.add_argument("--tp", type=int, default=None,
                    help="devices per stage (default: 1 up to 128 devices, else the least power of 2 keeping a stage per layer)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=150.0, help="codesign's limit per solve")
    ap.add_argument("--decomp-cap", type=float, default=None, help="decomposition measured up to this, s (default 60; quick 30)")
    ap.add_argument("--tpe-cap", type=float, default=None, help="TPE budget per seed at most this, s (default 30; quick 15)")
    ap.add_argument("--no-decomposition", action="store_true")
    ap.add_argument("--no-tpe", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "joint_scaling.json")
    ap.add_argument("--plot-only", action="store_true")
    a = ap.parse_args()
    if a.plot_only:
        print(f"wrote {plot(json.loads(a.out.read_text()), figure_of(a.out))}")
        return
    a.decomp_cap = a.decomp_cap or (30.0 if a.quick else 60.0)
    a.tpe_cap = a.tpe_cap or (15.0 if a.quick else 30.0)
    sizes = a.devices or (QUICK if a.quick else SERIES)
    for d in sizes:
        t = tp_of(d, a.tp)
        if t < 1 or d % t or not 4 <= d // t <= LAYERS:  # SETTINGS: 4 groups of stages
            ap.error(f"--devices {d} with tp {t}: need tp dividing the devices into 4..{LAYERS} stages")
    t0 = time.perf_counter()
    rows = []
    for d in sizes:
        rows.append(row(d, a))
        doc = {"machine": machine(), "command": " ".join(sys.argv), "settings": {**SETTINGS, "tiers": list(SETTINGS["tiers"])},
               "repeats": a.repeats, "seeds": a.seeds, "time_limit_s": a.time_limit, "decomp_cap_s": a.decomp_cap,
               "tpe_cap_s": a.tpe_cap, "instances": rows, "wall_s": time.perf_counter() - t0}
        write_json_atomic(a.out, doc)  # after every size: a long run keeps what it measured
    print(f"wrote {a.out} and {plot(doc, figure_of(a.out))}")


if __name__ == "__main__":
    main()
