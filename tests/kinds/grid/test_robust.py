"""codesign.kinds.grid.robust (``solve --robust``): the hardware minimising the worst relative
regret against each workload's own optimum.

The reference is an enumeration written here with the model alone: every design of each workload
alone (the instance with that workload only) is assessed; its own optimum is the best feasible
tokens/s; on each hardware design a workload's best schedule gives its regret
1 - tokens/s / own optimum; the robust design minimises the worst regret over the hardware."""

from __future__ import annotations

import copy
import itertools
import json

import pytest
import tomli_w

from codesign.kinds.grid.problem import Grid
from codesign.kinds.grid.robust import RobustGrid, regret, solve_robust
from codesign.kinds.registry import load
from codesign.proof.driver import judge_problem, run, solve

#: 3 x 2 x 1 x 2 x 2 x 2 = 48 hardware designs; 2 x 2 schedules each for two workloads: 768 points
HARDWARE = dict(dram_layers=[4, 6, 8], tsv_count=[16384, 32768], tsv_pitch_um=[15.0], compute_area_mm2=[100.0, 120.0],
                clock_GHz=[1.0, 1.5], sram_MiB=[1.0, 4.0])
SCHEDULES = {"llama8b": dict(tp=[2, 4], batch=[256, 512]), "gptoss120b": dict(tp=[4, 8], batch=[256, 512])}


def tiny_data(workloads=tuple(SCHEDULES)) -> dict:
    """deepstack-multi-workload cut down to two workloads on a 48-design hardware space."""
    d = copy.deepcopy(load("deepstack-multi-workload").data)
    d["hardware"]["decisions"] = HARDWARE
    d["workloads"] = [dict(w, decisions=SCHEDULES[w["name"]]) for w in d["workloads"] if w["name"] in workloads]
    d.pop("baseline")
    d["name"] = "tiny-robust" if len(workloads) > 1 else f"tiny-robust-{workloads[0]}"
    return d


def without_none(x):
    """TOML has no null: the keys a validated instance leaves unset are dropped."""
    if isinstance(x, dict):
        return {k: without_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [without_none(v) for v in x]
    return x


@pytest.fixture(scope="module")
def tiny() -> Grid:
    return Grid.from_data(tiny_data(), source="test")


@pytest.fixture(scope="module")
def enumerated() -> dict:
    """By the model alone: each workload's own optimum, and the worst regret of every hardware design."""
    hw_names = list(HARDWARE)
    best: dict[str, dict[tuple, float]] = {}
    for w in SCHEDULES:
        alone = Grid.from_data(tiny_data((w,)), source="test")
        best[w] = {}
        for hw in itertools.product(*HARDWARE.values()):
            for sched in itertools.product(*SCHEDULES[w].values()):
                a = alone.assess(alone.parse_design({**dict(zip(hw_names, hw, strict=True)), **dict(zip(SCHEDULES[w], sched, strict=True))}))
                if a.feasible:
                    best[w][hw] = max(best[w].get(hw, 0.0), a.metrics["tokens_per_s"])
    own = {w: max(b.values()) for w, b in best.items()}
    worst = {hw: max(1 - best[w][hw] / own[w] for w in SCHEDULES)
             for hw in itertools.product(*HARDWARE.values()) if all(hw in best[w] for w in SCHEDULES)}
    weight = {w["name"]: w["weight"] for w in tiny_data()["workloads"]}
    mix = {hw: sum(weight.values()) / sum(weight[w] / best[w][hw] for w in SCHEDULES) for hw in worst}
    return {"own": own, "best": best, "worst": worst, "robust": min(worst.values()), "mix": mix}


def test_regret_by_hand():
    assert regret("max", 1.25) == pytest.approx(0.2)  # 100 tokens/s against 125: 1 - 100/125
    assert regret("min", 1.25) == pytest.approx(0.25)  # 1.25 J against 1 J: (1.25 - 1) / 1
    assert regret("max", 1.0) == regret("min", 1.0) == 0.0


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_the_robust_design_is_the_enumerated_one(tiny, enumerated, solver):
    sol = solve_robust(tiny, solver=solver)
    assert sol.status == "optimal" and sol.gap == 0.0 and sol.objective_metric == "worst_regret"
    assert sol.objective == pytest.approx(enumerated["robust"], rel=1e-7)
    assert enumerated["robust"] > 0.01  # the workloads disagree: no design is best for both
    robust = sol.proof["robust"]
    for w, own in enumerated["own"].items():
        assert robust["workload_optima"][w]["status"] == "optimal"
        assert robust["workload_optima"][w]["objective"] == pytest.approx(own, rel=1e-9)
        # the regret the record states is the model's tokens/s of the design against the own optimum
        assert robust["regret"][w] == pytest.approx(1 - sol.metrics[f"{w}.tokens_per_s"] / own, rel=1e-9, abs=1e-12)
    assert max(robust["regret"].values()) == pytest.approx(sol.objective, rel=1e-12)
    hw = tuple(sol.design[k] for k in HARDWARE)
    assert enumerated["worst"][hw] == pytest.approx(enumerated["robust"], rel=1e-7)
    # among the designs of least worst regret, the best weighted mix, each workload on its best schedule
    tied = [h for h, v in enumerated["worst"].items() if v <= enumerated["robust"] * (1 + 1e-9) + 1e-12]
    assert sol.proof["tie_break"]["used"]
    assert sol.metrics["tokens_per_s"] == pytest.approx(max(enumerated["mix"][h] for h in tied), rel=1e-9)
    for w, own in enumerated["own"].items():
        assert robust["regret"][w] == pytest.approx(1 - enumerated["best"][w][hw] / own, rel=1e-9, abs=1e-12)
    assert tiny.assess(tiny.parse_design(sol.design)).feasible


def test_brute_and_the_mip_without_presolve_agree(tiny, enumerated):
    sol = solve_robust(tiny, solver="highs")
    optima = {w: o["value_SI"] for w, o in sol.proof["robust"]["workload_optima"].items()}
    p = RobustGrid(tiny, optima)
    assert solve(p, solver="brute").objective == pytest.approx(enumerated["robust"], rel=1e-9)
    full = p.formulate("highs", presolve=False)
    assert full.stats["pruned"].get("hardware-robust-bound") is None
    r = run(full, judge_problem(p), "highs")
    assert r.status == "optimal" and p.to_user(r.best_internal) == pytest.approx(enumerated["robust"], rel=1e-7)


def test_the_weighted_sum_stays_the_default(tiny):
    sol = solve(tiny, solver="highs")
    assert sol.objective_metric == "tokens_per_s" and "robust" not in sol.proof


def test_the_command_line_reports_each_regret(tmp_path, cli):
    path = tmp_path / "tiny-robust.toml"
    path.write_text(tomli_w.dumps(without_none(tiny_data())))
    r = cli("solve", str(path), "--robust", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["status"] == "optimal" and set(d["regret"]) == set(SCHEDULES) == set(d["workload_optima"])
    assert max(d["regret"].values()) == pytest.approx(d["objective"])


@pytest.mark.parametrize("args", [("tiny-3d-llama8b",), ("tiny-placement-mixtral",),
                                  ("deepstack-multi-workload", "--save"),
                                  ("deepstack-multi-workload", "--budget", "llama8b.tpot_s <= 0.05")])
def test_refusals_are_input_errors(cli, args):
    r = cli("solve", *args, "--robust")
    assert r.exit_code == 2, r.output
    assert "robust" in r.output
