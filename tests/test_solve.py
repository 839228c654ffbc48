"""Exactness of the whole pipeline: brute force = HiGHS = CP-SAT, verified by the model.

Every instance small enough to enumerate is solved by both solvers; the model's objective of each
returned design must equal the brute-force optimum to 1e-9 relative and the design must be one of
the optimal designs (its own evaluation equals the optimum). Random small instances (hypothesis)
do the same, including infeasible draws, which all three must agree on.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from codesign.backends import available_solvers
from codesign.cli import app
from codesign.kinds.grid.space import brute_force, space_size
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.evaluate import evaluate
from codesign.proof.driver import _provenance, check_solution, cross_check, solve_instance

SOLVERS = available_solvers()
RTOL = 1e-9
ENUMERABLE = [
    "tiny-3d-llama8b",
    "small-3d-llama8b",
    "dgx-llama70b-chip-choice",
    "pf-llama405b-consistent",
    "pf-llama405b-paper",
    "pf-dense1t-consistent",
    "pf-dense1t-paper",
]


def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(abs(a), abs(b))


@pytest.mark.parametrize("name", ENUMERABLE)
def test_brute_force_equals_both_solvers(name):
    inst = load_instance(name)
    bf = brute_force(inst)
    assert bf.feasible
    for solver in SOLVERS:
        sol = solve_instance(inst, solver=solver)
        assert sol.status == "optimal", (solver, sol.status, sol.gap)
        assert _agree(sol.objective, bf.objective), (solver, sol.objective, bf.objective)
        # the design is one of the optimal ones: the model gives it the optimum
        ev = evaluate(inst, sol.design)
        assert ev.feasible and _agree(ev.objective, bf.objective)
        assert sol.gap is not None and abs(sol.gap) <= 1e-6
        assert sol.verification["ok"]


def test_large_decomposable_instance_both_solvers_agree():
    """deepstack-multi-workload has 2e17 points; brute force decomposes by hardware design."""
    inst = load_instance("deepstack-multi-workload")
    assert space_size(inst) >= 1e15
    bf = brute_force(inst)
    sols = [solve_instance(inst, solver=s) for s in SOLVERS]
    for s in sols:
        assert s.status == "optimal" and _agree(s.objective, bf.objective)
    if len(sols) == 2:
        assert cross_check(*sols)["agree"] is True


@st.composite
def random_instances(draw) -> dict:
    layers = draw(st.lists(st.sampled_from([1, 2, 4, 8, 12, 16]), min_size=1, max_size=3, unique=True))
    tsv = draw(st.lists(st.sampled_from([4096, 16384, 65536]), min_size=1, max_size=2, unique=True))
    area = draw(st.lists(st.sampled_from([40.0, 80.0, 160.0]), min_size=1, max_size=2, unique=True))
    clock = draw(st.lists(st.sampled_from([0.8, 1.2, 1.75, 2.2]), min_size=1, max_size=2, unique=True))
    sram = draw(st.lists(st.sampled_from([0.25, 1.0, 4.0]), min_size=1, max_size=2, unique=True))
    workload = draw(st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b"]))
    devices = draw(st.sampled_from([4, 8]))
    phase = draw(st.sampled_from(["decode", "both", "prefill"]))
    objective = draw(st.sampled_from(["tokens_per_s", "energy_per_token_J", "tpot_s", "ttft_s"]))
    decisions = {
        "tp": draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3, unique=True)),
        "pp": draw(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True)),
        "batch": draw(st.lists(st.sampled_from([2, 8, 32, 128]), min_size=1, max_size=3, unique=True)),
    }
    if workload != "llama-3.1-8b":
        decisions["ep"] = draw(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True))
    w = {
        "name": "w",
        "workload": workload,
        "precision": draw(st.sampled_from(["fp8", "bf16"])),
        "phase": phase,
        "input_tokens": draw(st.sampled_from([128, 1024])),
        "output_tokens": draw(st.sampled_from([64, 512])),
        "decisions": decisions,
    }
    if draw(st.booleans()):
        w["tpot_slo_ms"] = draw(st.sampled_from([5.0, 20.0, 100.0]))
    budgets = {}
    if draw(st.booleans()):
        budgets["power_W"] = draw(st.sampled_from([40.0, 80.0, 160.0]))
    if draw(st.booleans()):
        budgets["area_mm2"] = draw(st.sampled_from([100.0, 200.0]))
    return {
        "name": "random",
        "description": "hypothesis-generated",
        "system": {"devices": devices, "scale_up_domain": devices},
        "hardware": {
            "family": "stacked-3d",
            "decisions": {
                "dram_layers": layers,
                "tsv_count": tsv,
                "tsv_pitch_um": [20.0],
                "compute_area_mm2": area,
                "clock_GHz": clock,
                "sram_MiB": sram,
            },
        },
        "workloads": [w],
        "budgets": budgets,
        "objective": {"metric": objective},
    }


@settings(max_examples=int(os.environ.get("CODESIGN_HYPOTHESIS_EXAMPLES", "12")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_instances())
def test_random_small_instances(raw):
    """brute force = HiGHS = CP-SAT on random small instances, feasible or not."""
    inst = instance_from_data(raw)
    bf = brute_force(inst)
    for solver in SOLVERS:
        sol = solve_instance(inst, solver=solver)
        if not bf.feasible:
            assert sol.status == "infeasible", (solver, sol.status)
            continue
        assert sol.status == "optimal", (solver, sol.status, sol.gap)
        assert _agree(sol.objective, bf.objective), (solver, sol.objective, bf.objective)


def test_infeasible_budget_is_reported_not_crashed():
    """An area budget below the fixed logic area leaves no hardware design."""
    inst = load_instance("tiny-3d-llama8b")
    raw = dict(inst.raw)
    raw["budgets"] = {"area_mm2": 10.0}
    bad = instance_from_data(raw)
    for solver in SOLVERS:
        sol = solve_instance(bad, solver=solver)
        assert sol.status == "infeasible" and sol.design is None and sol.reason


@pytest.mark.parametrize("family", ["memory-capacity-local", "slo-tpot"])
def test_family_feasible_and_infeasible(family):
    """Each per-workload family binds: a tight limit removes exactly the designs brute force
    removes (same optimum), an impossible one makes the instance infeasible."""
    inst = load_instance("tiny-3d-llama8b")
    raw = json.loads(json.dumps(inst.raw))
    w = raw["workloads"][0]
    if family == "slo-tpot":
        w["tpot_slo_ms"] = 3.0  # binds: the unconstrained optimum has TPOT ~ 6 ms
        tight = instance_from_data(raw)
        w["tpot_slo_ms"] = 1e-3
        impossible = instance_from_data(raw)
    else:
        w["input_tokens"] = 32768  # long context: large batches no longer fit
        tight = instance_from_data(raw)
        w["decisions"]["batch"] = [128]
        w["decisions"]["tp"] = [1]
        w["input_tokens"] = 131072
        raw["baseline"] = {**raw["baseline"], "batch": 128, "tp": 1}
        impossible = instance_from_data(raw)
    bf = brute_force(tight)
    base = brute_force(inst)
    assert bf.feasible and not math.isclose(bf.objective, base.objective)
    for solver in SOLVERS:
        sol = solve_instance(tight, solver=solver)
        assert sol.status == "optimal" and _agree(sol.objective, bf.objective)
        assert solve_instance(impossible, solver=solver).status == "infeasible"
    assert not brute_force(impossible).feasible


def test_saved_solution_rechecks(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["solve", "tiny-3d-llama8b", "--save", "--out-dir", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    for key in ("status", "objective", "sense", "bound", "gap", "design", "metrics", "solver", "time_s"):
        assert key in data
    path = tmp_path / "tiny-3d-llama8b.json"
    assert path.exists() and (tmp_path / "ledger.solu").read_text().count("=opt= tiny-3d-llama8b") == 1
    assert check_solution(path)["ok"]
    # the design object is a valid --design file for evaluate
    design = tmp_path / "d.json"
    design.write_text(json.dumps(data["design"]))
    r2 = runner.invoke(app, ["evaluate", "tiny-3d-llama8b", "--design", str(design), "--json"])
    assert r2.exit_code == 0 and math.isclose(json.loads(r2.stdout)["objective"], data["objective"], rel_tol=1e-12)
    # tampering with the stored design is caught
    data["internal_objective"] *= 0.5
    path.write_text(json.dumps(data))
    assert not check_solution(path)["ok"]


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "dgx-llama70b-chip-choice"])
def test_pyomo_backend_equals_brute_force(name):
    """The same MIP through Pyomo (its HiGHS interface) reaches the brute-force optimum with a
    bound, is verified by the model, and records Pyomo's version."""
    inst = load_instance(name)
    bf = brute_force(inst)
    sol = solve_instance(inst, solver="pyomo:highs")
    assert sol.status == "optimal" and _agree(sol.objective, bf.objective), (sol.status, sol.objective, bf.objective)
    assert sol.gap is not None and abs(sol.gap) <= 1e-6 and sol.verification["ok"]
    assert evaluate(inst, sol.design).feasible
    assert sol.solver == "pyomo:highs" and sol.solver_version.startswith("pyomo ")


def test_cli_cross_check_and_bad_solver():
    runner = CliRunner()
    r = runner.invoke(app, ["solve", "tiny-3d-llama8b", "--cross-check", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cross_check"]["agree"] is True
    r = runner.invoke(app, ["solve", "tiny-3d-llama8b", "--solver", "gurobi"])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_with_claim_judges_like_verify():
    """solve_exact evaluates the accepted design once and judges it against the solver's claim
    with verify.with_claim: the same verdict, numbers and problems as a second verify()."""
    from codesign.kinds.grid.verify import verify, with_claim

    inst = load_instance("tiny-3d-llama8b")
    design = solve_instance(inst).design
    v0 = verify(inst, design, None)
    f = v0.objective_model
    for claimed in (None, f, f * (1 + 1e-9), f * 1.01, float("nan")):
        a, b = with_claim(v0, claimed), verify(inst, design, claimed)
        assert (a.ok, a.objective_model, a.problems) == (b.ok, b.objective_model, b.problems)
        assert a.relative_difference == b.relative_difference or (
            a.relative_difference != a.relative_difference and b.relative_difference != b.relative_difference
        )
    assert not with_claim(v0, f * 1.01).ok


def test_git_revision_asked_once_per_process(monkeypatch):
    import subprocess as sp

    from codesign.proof import driver as solve_mod

    calls = []
    real = sp.run

    def counting(*a, **k):
        calls.append(a)
        return real(*a, **k)

    solve_mod.git_revision.cache_clear()
    monkeypatch.setattr(solve_mod.subprocess, "run", counting)
    first = solve_mod.git_revision()
    assert solve_mod.git_revision() == first
    assert len(calls) == 1
    solve_mod.git_revision.cache_clear()


def test_a_solution_records_its_calibration_and_a_check_under_another_says_so(tmp_path, monkeypatch):
    """Solutions carry the calibration they were solved under (path and sha256); re-checked under
    another one whose numbers move the objective, the failure names the recorded calibration."""
    import hashlib
    import re

    from codesign.model import hardware

    monkeypatch.delenv(hardware.CALIBRATION_ENV, raising=False)
    prov = _provenance()
    assert prov["calibration"] == "shipped"
    assert prov["calibration_sha256"] == hashlib.sha256(hardware.shipped_calibration_path().read_bytes()).hexdigest()

    repo = Path(__file__).resolve().parent.parent
    data = json.loads((repo / "solutions" / "dgx-llama70b-chip-choice.json").read_text())
    data["provenance"].update(calibration="shipped", calibration_sha256=prov["calibration_sha256"])
    sol = tmp_path / "sol.json"
    sol.write_text(json.dumps(data))
    assert check_solution(sol)["ok"]

    chip = data["design"]["chip"]
    text = hardware.shipped_calibration_path().read_text()
    table = re.search(rf"\[chips\.{re.escape(chip)}\][^\[]*", text).group(0)
    slower = re.sub(r"memory_efficiency = ([0-9.]+)", lambda m: f"memory_efficiency = {float(m.group(1)) * 0.8}", table, count=1)
    other = tmp_path / "other.toml"
    other.write_text(text.replace(table, slower))
    monkeypatch.setenv(hardware.CALIBRATION_ENV, str(other))
    try:
        report = check_solution(sol)
    finally:
        monkeypatch.delenv(hardware.CALIBRATION_ENV)
        hardware.forget_calibration()
    assert not report["ok"]
    assert "solved under calibration shipped" in report["message"]
