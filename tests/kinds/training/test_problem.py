"""codesign.kinds.training: the training kind behind the Problem protocol: brute force = HiGHS =
CP-SAT on tiny-pf-train, the baseline is the best NVLink/IB-only design, the command line's
solve / evaluate / show / instances / check-solution, and bad input (exit 2, no traceback)."""

from __future__ import annotations

import copy
import json

import pytest

from codesign.errors import InputError
from codesign.kinds.registry import from_data
from codesign.kinds.training.problem import Training
from codesign.model.training import best, enumerate_designs
from codesign.proof.driver import solve

TINY = "tiny-pf-train"


@pytest.fixture(scope="module")
def tiny(named):
    return named(TINY)


def test_the_question(tiny):
    assert isinstance(tiny, Training) and tiny.kind == "training"
    assert tiny.metric == "energy_per_step_J" and tiny.sense == "min"
    assert [d.name for d in tiny.decisions()] == ["tp", "pp", "zero", "micro_batch", "recompute",
                                                  "tp_path", "dp_path", "pp_path"]
    assert tiny.space_size() == len(enumerate_designs(tiny.setup)) == 256


@pytest.mark.parametrize("objective", ["energy_per_step_J", "tokens_per_s", "network_energy_per_step_J"])
def test_brute_force_equals_both_solvers(tiny, objective, solvers_match_brute_force):
    p = tiny.with_objective(objective)
    solvers_match_brute_force(p)


def test_a_budget_row_is_exact(tiny, solvers_match_brute_force):
    """A power budget just under the unconstrained energy optimum's power moves the optimum (that
    optimum is also the fastest design, so a step-time budget under it leaves none)."""
    free = tiny.brute_force().best
    raw = copy.deepcopy(tiny.data)
    raw["budgets"] = {"power_W": free.metrics["system_power_W"] * 0.999}
    p = from_data(raw, source="budgeted")
    bf = solvers_match_brute_force(p)
    assert bf.metrics["system_power_W"] <= free.metrics["system_power_W"] * 0.999 and bf.objective > free.objective
    raw["budgets"] = {"step_time_s": free.metrics["step_s"] * 0.999}
    assert from_data(raw, source="too fast").brute_force().best is None


def test_the_baseline_is_the_best_electrical_design(tiny):
    base = tiny.baseline()
    assert {base["tp_path"], base["dp_path"], base["pp_path"]} == {"electrical"}
    electrical = [d for d in enumerate_designs(tiny.setup) if {d.tp_path, d.dp_path, d.pp_path} == {"electrical"}]
    assert best(tiny.setup, electrical)[0].as_dict() == base
    assert "best against best" in tiny.baseline_description
    sol = solve(tiny, solver="highs")
    assert sol.objective <= tiny.assess(base).objective


def test_a_partial_design_takes_the_baseline_for_the_rest(tiny):
    d = tiny.parse_design({"tp": 1, "pp": 1, "dp_path": "appliance"})
    assert d["dp_path"] == "appliance" and d["zero"] == tiny.baseline()["zero"]
    # a class without traffic has no path to choose: tp 1 keeps paths[0]
    assert tiny.parse_design({"tp": 1, "tp_path": "appliance"})["tp_path"] == "electrical"


@pytest.mark.parametrize(("design", "piece"), [
    ({"tp": 3}, "tp = 3"),
    ({"tp": 2, "pp": 4}, "does not divide the 4 devices"),
    ({"zero": 5}, "zero = 5"),
    ({"dp_path": "carrier pigeon"}, "dp_path"),
    ({"recompute": 1}, "recompute"),
    ({"dq": 1}, "dq"),
])
def test_a_design_outside_the_space_is_bad_input(tiny, design, piece):
    with pytest.raises(InputError) as info:
        tiny.parse_design(design)
    assert piece in str(info.value) or info.value.key == piece


def test_bad_files_are_input_errors(tiny):
    raw = copy.deepcopy(tiny.data)
    raw["workload"]["workload"] = "qwen3-235b-a22b"
    with pytest.raises(InputError, match="dense full-attention"):
        from_data(raw, source="moe")
    raw = copy.deepcopy(tiny.data)
    del raw["appliance"]
    with pytest.raises(InputError, match=r"needs an \[appliance\]"):
        from_data(raw, source="no-appliance")
    raw["space"]["paths"] = ["electrical"]
    # (tp, pp) in (1,1), (1,2), (1,4), (2,1), (2,2) x 4 ZeRO stages x 2 micro-batches x 2
    assert from_data(raw, source="electrical").space_size() == 5 * 4 * 2 * 2
    raw = copy.deepcopy(tiny.data)
    raw["devices"]["chip"] = "h100-sxn"
    with pytest.raises(InputError) as info:
        from_data(raw, source="typo")
    assert info.value.key == "devices.chip" and "h100-sxm" in (info.value.suggestion or "")
    with pytest.raises(InputError, match="not an objective"):
        tiny.with_objective("tpot_s")


def test_the_paper_instance_says_what_it_assumes(named):
    codes = {lint.code for lint in named("pf-train-paper").lints()}
    assert codes == {"pooled-bandwidth-exceeds-ports", "pooled-bandwidth-exceeds-switch"}
    assert named("pf-train-consistent").lints() == []
    # consistent: one 900 GB/s port, the switch's 14,375 GB/s over 16 GPUs = 898.4 GB/s
    s = named("pf-train-consistent").setup
    assert s.appliance_Bps == pytest.approx(14_375e9 / 16 * named("pf-train-consistent").calibration.for_chip("h100-sxm").network_efficiency)


# --- the command line ---------------------------------------------------------------------------


def test_solve_evaluate_show_and_check_solution(cli, cli_json, tmp_path):
    sol = cli_json("solve", TINY, "--save", "--out-dir", tmp_path)
    assert sol["status"] == "optimal" and sol["kind"] == "training"
    assert cli_json("check-solution", tmp_path / f"{TINY}.json")["ok"] is True
    design = tmp_path / "d.json"
    design.write_text(json.dumps(sol["design"]))
    ev = cli_json("evaluate", TINY, "--design", design)
    assert ev["objective"] == pytest.approx(sol["objective"], rel=1e-12) and ev["feasible"] is True
    shown = cli_json("show", TINY)
    assert shown["kind"] == "training" and shown["space_size"] == 256
    assert shown["decision_groups"] == ["parallelism", "mapping"]
    rows = {r["name"]: r for r in cli_json("instances")}
    assert rows["pf-train-paper"]["kind"] == "training" and rows["pf-train-paper"]["space_size"] == 1536
    r = cli("solve", TINY, "--cross-check")
    assert r.exit_code == 0 and "agree" in r.stdout


def test_bad_input_on_the_command_line(cli, input_error, tmp_path):
    input_error(cli("solve", TINY, "--objective", "tpot_s"), "--objective", "tpot_s")
    input_error(cli("evaluate", TINY, "--budget", "power_W <= 1"), "--budget", "does not apply")
    bad = tmp_path / "d.json"
    bad.write_text(json.dumps({"tp": 3}))
    input_error(cli("evaluate", TINY, "--design", bad), "tp = 3")
