"""codesign.cli.solving: ``solve``, ``certify``, ``explain``, ``check-solution``,
``check-certificate`` and ``export`` — the records they print and save (the same keys on every
kind), their exit codes (0, 1 no design, 2 bad input, 3 a failed check), and the exported MIP read
back by HiGHS (its optimum x the legend's unit = the problem's optimum, by brute force)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = "tiny-3d-llama8b"
KINDS = {"grid": TINY, "mapping": "tiny-pf-mapping", "placement": "tiny-placement-mixtral", "training": "tiny-pf-train"}
RTOL = {"grid": 1e-9, "mapping": 1e-6, "placement": 1e-7, "training": 1e-9}
RECORD_KEYS = {"design", "metrics", "objective", "feasible", "lints", "violations", "audit", "instance", "kind",
               "instance_hash", "instance_data"}
SOLVE_KEYS = RECORD_KEYS | {"status", "bound", "gap", "solver", "termination", "proof", "cross_check", "explanation"}
#: a conflict on tiny-3d-llama8b: at most 4 DRAM layers (optimum ~17.1k) and >= 22k tokens/s (~24.1k)
TINY_A = "dram_layers <= 4"
TINY_B = "tokens_per_s >= 22000"


def no_traceback(r) -> None:
    assert "Traceback" not in r.stdout + r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


# --------------------------------------------------------------------------------------------------
# solve
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_solve_json_has_the_record_keys_and_the_brute_force_optimum(kind, cli_json, named, brute):
    p = named(KINDS[kind])
    data = cli_json("solve", KINDS[kind])
    assert set(data) >= SOLVE_KEYS
    # --solver auto (the default): HiGHS on grids, CP-SAT on mappings and placements
    assert data["kind"] == kind and data["status"] == "optimal"
    assert data["solver"] == {"grid": "highs", "mapping": "cpsat", "placement": "cpsat", "training": "highs"}[kind]
    assert data["objective"] == pytest.approx(brute(p).best.objective, rel=RTOL[kind])
    assert data["gap"] is not None and abs(data["gap"]) <= 1e-6
    assert data["cross_check"] is None and data["explanation"] is None
    assert data["proof"]["rounds"] >= 1


@pytest.mark.parametrize("kind", ["mapping", "placement"])
def test_solve_with_pyomo_highs_on_other_kinds(kind, cli_json, named, brute):
    data = cli_json("solve", KINDS[kind], "--solver", "pyomo:highs")
    assert data["status"] == "optimal" and data["solver"] == "pyomo:highs"
    assert data["objective"] == pytest.approx(brute(named(KINDS[kind])).best.objective, rel=RTOL[kind])


@pytest.mark.parametrize("kind", list(KINDS))
def test_solve_cross_check(kind, cli_json):
    cc = cli_json("solve", KINDS[kind], "--cross-check")["cross_check"]
    first = "highs" if kind in ("grid", "training") else "cpsat"  # the default's choice, then the other one
    assert cc["solvers"] == [first, {"highs": "cpsat", "cpsat": "highs"}[first]] and cc["agree"] is True
    cc = cli_json("solve", KINDS[kind], "--cross-check", "--solver", "highs")["cross_check"]
    assert cc["solvers"] == ["highs", "cpsat"] and cc["agree"] is True


def test_solve_prints_the_summary_first_and_the_lints_beside_the_answer(cli):
    r = cli("solve", "pf-llama405b-paper")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0].startswith("optimal max tokens_per_s = ") and "bound" in lines[0] and "gap" in lines[0]
    assert "verified by the model" in r.stdout
    assert "lint error pooled-bandwidth-exceeds-ports" in r.stdout


def test_a_saved_solution_rechecks_and_a_tampered_one_fails(cli, cli_json, tmp_path):
    data = cli_json("solve", TINY, "--save", "--out-dir", tmp_path)
    path = tmp_path / f"{TINY}.json"
    assert json.loads(path.read_text())["objective"] == data["objective"]
    assert (tmp_path / "ledger.solu").read_text().count(f"=opt= {TINY}") == 1
    assert cli_json("check-solution", path)["ok"] is True
    r = cli("check-solution", path)
    assert r.exit_code == 0 and r.stdout.startswith("ok")
    # the design object is a valid --design file
    design = tmp_path / "d.json"
    design.write_text(json.dumps(data["design"]))
    assert cli_json("evaluate", TINY, "--design", design)["objective"] == pytest.approx(data["objective"], rel=1e-12)
    tampered = dict(data, objective=data["objective"] * 0.5)
    path.write_text(json.dumps(tampered))
    r = cli("check-solution", path)
    assert r.exit_code == 3 and "FAILED" in r.stdout and "objective" in r.stdout
    no_traceback(r)


def test_check_solution_of_a_file_that_is_not_a_record(cli, input_error, tmp_path):
    f = tmp_path / "d.json"
    f.write_bytes(b"\x89PNG\x00\xff\xfe")
    input_error(cli("check-solution", f), "d.json", "UTF-8")
    f.write_text(json.dumps({"schema_version": 1, "record": "solution"}))
    input_error(cli("check-solution", f), "schema_version", "re-create it")


def test_save_writes_to_the_user_data_directory_never_to_the_checkout(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data_dir = tmp_path / "data"
    r = cli("solve", TINY, "--save", env={"CODESIGN_DATA": str(data_dir)})
    assert r.exit_code == 0, r.stderr
    assert (data_dir / "solutions" / f"{TINY}.json").is_file()
    assert not (tmp_path / "solutions").exists()
    assert f"saved {data_dir / 'solutions' / TINY}.json" in r.stdout.replace("\n", "")


def test_a_saved_solution_has_the_permissions_of_a_plain_write(cli, tmp_path):
    old = os.umask(0o022)
    try:
        assert cli("solve", TINY, "--save", "--out-dir", tmp_path).exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / f"{TINY}.json").stat().st_mode) == 0o644


def test_solve_with_a_budget(cli_json, named, brute):
    p = named(TINY).with_budgets(["power_W <= 60"])
    data = cli_json("solve", TINY, "--budget", "power_W <= 60")
    assert data["status"] == "optimal"
    assert data["objective"] == pytest.approx(brute(p).best.objective, rel=1e-9)
    assert data["instance_hash"] == p.content_hash
    assert {"name": "cli-1", "expr": "power_W <= 60"} in data["instance_data"]["budgets"]["custom"]
    assert data["metrics"]["power_W"] <= 60 * (1 + 1e-9)


def test_an_infeasible_grid_exits_1_and_explains(cli, named, brute):
    tiny = named(TINY)
    under_a = brute(tiny.with_budgets([TINY_A])).best.objective
    assert under_a < 22000 < brute(tiny).best.objective
    r = cli("solve", TINY, "--budget", TINY_A, "--budget", TINY_B, "--json")
    assert r.exit_code == 1
    no_traceback(r)
    data = json.loads(r.stdout)
    assert data["status"] == "infeasible" and data["design"] is None
    assert data["explanation"]["feasible"] is False
    assert [c["name"] for c in data["explanation"]["conflicts"]] == ["budget[cli-1]", "budget[cli-2]"]
    r = cli("solve", TINY, "--budget", TINY_A, "--budget", TINY_B)
    assert r.exit_code == 1
    assert "budget[cli-1]" in r.stdout and "budget[cli-2]" in r.stdout and "cannot all hold" in r.stdout


def test_an_infeasible_mapping_exits_1_and_explains(cli, tmp_path):
    import tomli_w

    from codesign.kinds.mapping.generate import generate_mapping

    f = tmp_path / "tight.toml"
    f.write_text(tomli_w.dumps(generate_mapping(devices=2, modules=2, layers=3, tpot_s=1e-4)))
    r = cli("solve", f, "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["status"] == "infeasible"
    assert [c["name"] for c in data["explanation"]["conflicts"]] == ["budgets.tpot_s"]


def test_an_infeasible_placement_exits_1(cli, named, tmp_path):
    import copy

    import tomli_w

    raw = copy.deepcopy(named("tiny-placement-mixtral").data)
    raw["budgets"] = {"tpot_s": 1e-6}  # no decode step is a microsecond
    f = tmp_path / "tight.toml"
    f.write_text(tomli_w.dumps(raw))
    r = cli("solve", f, "--json")
    assert r.exit_code == 1
    assert json.loads(r.stdout)["status"] == "infeasible"


@pytest.mark.parametrize("solver", ["gurobi", "pyomo:nonsense"])
def test_an_unknown_solver_is_bad_input(solver, cli, input_error):
    r = cli("solve", TINY, "--solver", solver)
    input_error(r, "Pyomo cannot find solver 'nonsense'" if solver.startswith("pyomo") else "--solver")


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_a_time_limit_is_positive_and_finite(value, cli, input_error):
    input_error(cli("solve", TINY, f"--time-limit={value}"), "--time-limit", "positive")
    input_error(cli("certify", TINY, f"--time-limit={value}"), "--time-limit")


def test_threads_is_a_count(cli, input_error):
    input_error(cli("solve", TINY, "--threads=-3"), "--threads", "-3")
    input_error(cli("solve", "tiny-pf-mapping", "--threads=-3"), "--threads")


def test_outputs_that_cannot_be_written(cli, input_error, tmp_path):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    input_error(cli("solve", TINY, "--save", "--out-dir", a_file), str(a_file), "cannot write")
    input_error(cli("certify", TINY, "-o", tmp_path), str(tmp_path), "directory")
    input_error(cli("export", TINY, "-o", a_file / "m.mps"), "cannot write")
    input_error(cli("generate", "mapping", "-o", a_file / "g.toml"), "cannot write")


def test_a_time_limited_solve_answers_with_a_valid_bound(cli, named, brute):
    r = cli("solve", "tiny-placement-mixtral", "--time-limit", "1e-9", "--json")
    assert r.exit_code in (0, 1)
    data = json.loads(r.stdout)
    best = brute(named("tiny-placement-mixtral")).best.objective
    if data["bound"] is not None:
        assert data["bound"] >= best * (1 - 1e-7)
    if data["objective"] is not None:
        assert data["objective"] <= best * (1 + 1e-7)


# --------------------------------------------------------------------------------------------------
# certify / check-certificate
# --------------------------------------------------------------------------------------------------


def test_a_certificate_is_written_rechecks_and_a_tampered_one_exits_3(cli, cli_json, named, brute, tmp_path):
    best = brute(named(TINY)).best
    design = tmp_path / "design.json"
    design.write_text(json.dumps({**best.design, "batch": 32}))
    cert_path = tmp_path / "cert.json"
    printed = cli_json("certify", TINY, "--design", design, "--solutions", tmp_path, "-o", cert_path)
    assert RECORD_KEYS | {"bound", "gap", "statement", "bound_source"} <= set(printed)
    assert printed["feasible"] and printed["sense"] == "max" and printed["gap"] > 0
    assert {"thermal-junction-upper", "memory-capacity-local[main]", "budget-area"} <= {a["name"] for a in printed["audit"]}
    f_d = named(TINY).assess({**best.design, "batch": 32}).objective
    assert printed["gap"] == pytest.approx((best.objective - f_d) / f_d, rel=1e-9)
    stored = json.loads(cert_path.read_text())
    assert stored["gap"] == printed["gap"] and stored["instance_hash"] == printed["instance_hash"]
    r = cli("check-certificate", cert_path)
    assert r.exit_code == 0 and r.stdout.startswith("ok")
    report = cli_json("check-certificate", cert_path)
    assert report["ok"] is True and report["gap"] == pytest.approx(printed["gap"], rel=1e-12)
    bad = tmp_path / "tampered.json"
    for key, value in (("objective", stored["objective"] * 1.01), ("gap", 0.0), ("feasible", False),
                       ("bound", 35000.0)):
        bad.write_text(json.dumps(dict(stored, **{key: value})))
        r = cli("check-certificate", bad)
        assert r.exit_code == 3, key
        assert key in r.stdout
        no_traceback(r)
    bad.write_text(json.dumps(dict(stored, design={**stored["design"], "batch": 128})))
    assert cli("check-certificate", bad).exit_code == 3


def test_an_edited_design_outside_the_space_fails_the_check(cli, tmp_path):
    cert_path = tmp_path / "cert.json"
    assert cli("certify", TINY, "--set", "batch=32", "--solutions", tmp_path, "-o", cert_path).exit_code == 0
    stored = json.loads(cert_path.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(stored, design={**stored["design"], "batch": 3})))
    assert cli("check-certificate", bad).exit_code == 3


def test_check_certificate_without_the_proof(cli_json, tmp_path):
    cert_path = tmp_path / "cert.json"
    cli_json("certify", TINY, "--set", "batch=32", "--solutions", tmp_path, "-o", cert_path)
    report = cli_json("check-certificate", cert_path, "--no-prove")
    assert report["ok"] is True and "not re-proved" in report["message"]


def test_a_certificate_with_a_budget_rechecks(cli_json, named, tmp_path):
    cert_path = tmp_path / "cert.json"
    data = cli_json("certify", TINY, "--budget", "power_W <= 60", "--set", "batch=32", "--solutions", tmp_path,
                    "-o", cert_path)
    assert data["instance_hash"] == named(TINY).with_budgets(["power_W <= 60"]).content_hash
    assert {"name": "cli-1", "expr": "power_W <= 60"} in data["instance_data"]["budgets"]["custom"]
    assert "budget[cli-1]" in {a["name"] for a in data["audit"]}
    assert cli_json("check-certificate", cert_path)["ok"] is True


def test_a_certificate_of_an_instance_file_rechecks_from_another_directory(cli, tmp_path, monkeypatch):
    f = tmp_path / "mine.toml"
    f.write_text(f'name = "my-tiny"\ndescription = "tiny, capped"\nextends = "{TINY}"\n\n'
                 '[[budgets.custom]]\nname = "cap"\nexpr = "power_W <= 60"\n')
    cert_path = tmp_path / "cert.json"
    assert cli("certify", f, "--solutions", tmp_path, "-o", cert_path, "--json").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    f.unlink()  # the certificate carries its instance
    r = cli("check-certificate", cert_path)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_a_stored_solution_is_reused_only_when_its_hash_matches(cli, cli_json, named, brute, tmp_path):
    cli_json("solve", TINY, "--save", "--out-dir", tmp_path)
    stored = tmp_path / f"{TINY}.json"
    best = brute(named(TINY)).best
    f_d = named(TINY).assess({**best.design, "batch": 32}).objective
    dfile = tmp_path / "d.json"
    dfile.write_text(json.dumps({**best.design, "batch": 32}))
    cert = cli_json("certify", TINY, "--design", dfile, "--solutions", tmp_path)
    assert cert["bound_source"]["source"] == f"stored solution {stored}"
    assert cert["gap"] == pytest.approx((best.objective - f_d) / f_d, rel=1e-9)
    # a --budget changes the instance: the stored solution is not reused (even a slack one)
    cert = cli_json("certify", TINY, "--design", dfile, "--solutions", tmp_path, "--budget", "power_W <= 1000")
    assert cert["bound_source"]["source"] == "solve"
    assert cert["gap"] == pytest.approx((best.objective - f_d) / f_d, rel=1e-9)


def test_certify_a_mapping_design(cli_json, named, tmp_path):
    design = tmp_path / "mine.json"
    mine = {"layers_per_stage": [2, 2], "weights": ["local"] * 4, "kv": ["local"] * 4, "attach": [[], []]}
    design.write_text(json.dumps(mine))
    cert_file = tmp_path / "cert.json"
    cert = cli_json("certify", "tiny-pf-mapping", "--design", design, "-o", cert_file, "--solutions", tmp_path)
    assert cert_file.exists()
    p = named("tiny-pf-mapping")
    assert cert["feasible"] and cert["objective"] == pytest.approx(p.assess(mine).objective, rel=1e-12)
    assert cert["bound_source"]["source"] == "solve"
    # tokens/s is maximised: the bound is above the design, the gap is their relative distance
    assert cert["bound"] >= cert["objective"]
    assert cert["gap"] == pytest.approx((cert["bound"] - cert["objective"]) / cert["objective"], rel=1e-12)
    assert "no feasible design beats this one" in cert["statement"]


def test_certify_the_placement_baseline(cli_json, named, brute, tmp_path):
    cert = cli_json("certify", "tiny-placement-mixtral", "--solutions", tmp_path)
    p = named("tiny-placement-mixtral")
    base = p.assess(p.baseline()).objective
    best = brute(p).best.objective
    assert cert["design"] == p.baseline()
    assert cert["gap"] == pytest.approx((best - base) / base, rel=1e-6)


def test_certify_for_people(cli, tmp_path):
    r = cli("certify", TINY, "--set", "batch=32", "--solutions", tmp_path)
    assert r.exit_code == 0 and "no feasible design beats this one" in r.stdout


def test_certify_solutions_must_be_a_directory(cli, input_error, tmp_path):
    input_error(cli("certify", TINY, "--solutions", tmp_path / "none"), "--solutions")


# --------------------------------------------------------------------------------------------------
# explain
# --------------------------------------------------------------------------------------------------


def test_explain_json(cli, cli_json):
    data = cli_json("explain", TINY, "--budget", TINY_A, "--budget", TINY_B)
    assert {"feasible", "conflicts", "relaxations"} <= set(data)
    assert data["feasible"] is False
    assert [c["name"] for c in data["conflicts"]] == ["budget[cli-1]", "budget[cli-2]"]
    data = cli_json("explain", TINY)
    assert data["feasible"] is True and data["conflicts"] == [] and data["relaxations"] == []
    r = cli("explain", TINY)
    assert r.exit_code == 0 and "feasible" in r.stdout


def test_explain_a_feasible_mapping(cli_json):
    assert cli_json("explain", "tiny-pf-mapping")["feasible"] is True


def test_explain_a_feasible_placement(cli_json):
    assert cli_json("explain", "tiny-placement-mixtral")["feasible"] is True


def test_explain_a_placement_whose_experts_do_not_fit(cli, tmp_path):
    """Mixtral-8x7B cut to 4 layers on 4 H100s whose memory is cut to 5 GiB (2.5 GiB usable after
    the runtime's reserve and fraction): the rest of the model takes 1.42 GiB per device and one
    expert 0.656 GiB over the 4 MoE layers (4,096 x 14,336 x 3 FP8 weights x 4 layers), so each
    device holds one expert and 4 devices cannot hold 8; the explanation names memory capacity."""
    import tomllib

    import tomli_w

    from codesign.kinds.registry import named_paths

    data = tomllib.loads(named_paths()["tiny-placement-mixtral"].read_text())
    data["devices"]["memory_capacity_GiB"] = 5.0
    path = tmp_path / "tight.toml"
    path.write_text(tomli_w.dumps(data))
    r = cli("explain", str(path), "--json")
    e = json.loads(r.stdout)
    assert e["feasible"] is False
    assert [c["name"] for c in e["conflicts"]] == ["memory capacity"]


@pytest.mark.parametrize("command", ["solve", "certify", "explain", "evaluate"])
@pytest.mark.parametrize(
    ("budget", "piece"),
    [
        ("powr_W <= 5", "did you mean 'power_W'?"),
        ("power_W * area_mm2 <= 5", "a product needs a number"),
        ("__import__('os').system('x') <= 1", "not allowed in a budget"),
        ("power_W", "one <= or >="),
    ],
)
def test_a_bad_budget_exits_2(command, budget, piece, cli, input_error, tmp_path):
    args = [command, TINY, "--budget", budget]
    if command == "certify":
        args += ["--solutions", str(tmp_path)]
    input_error(cli(*args), piece, "--budget")


def test_a_deeply_nested_budget_exits_2(cli):
    r = cli("solve", TINY, "--budget", "-" * 1500 + "power_W <= 1")
    assert r.exit_code == 2
    no_traceback(r)


# --------------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------------


def read_back(path: Path) -> tuple[float, set[str]]:
    """HiGHS's optimum of a written file and its column names."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
    assert h.readModel(str(path)) == highspy.HighsStatus.kOk
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return h.getInfo().objective_function_value, set(h.getLp().col_names_)


@pytest.mark.parametrize("fmt", ["mps", "lp"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_exported_mip_read_back_by_highs_has_the_optimum(kind, fmt, cli, named, brute, tmp_path):
    """The file's optimum x the legend's objective unit = the problem's internal optimum (brute
    force's), and the legend's design columns are columns of the file."""
    p = named(KINDS[kind])
    path = tmp_path / f"m.{fmt}"
    r = cli("export", KINDS[kind], "-o", path)
    assert r.exit_code == 0, r.stderr
    legend = json.loads((tmp_path / f"m.{fmt}.json").read_text())
    assert legend["instance"] == p.name and legend["kind"] == kind and legend["format"] == fmt
    assert legend["instance_hash"] == p.content_hash and legend["objective"]["sense"] == "minimise"
    value, columns = read_back(path)
    assert value * legend["objective"]["unit"] == pytest.approx(brute(p).best.internal, rel=1e-6)
    assert legend["design_columns"] and set(legend["design_columns"]) <= columns
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([f"m.{fmt}", f"m.{fmt}.json"])


def test_the_legend_names_each_grid_column_by_its_decisions(cli, named, tmp_path):
    assert cli("export", TINY, "-o", tmp_path / "t.mps").exit_code == 0
    legend = json.loads((tmp_path / "t.mps.json").read_text())
    hw = {d.name for d in named(TINY).inst.hardware_decisions}
    described = list(legend["design_columns"].values())
    assert any(set(d) == hw for d in described)  # a hardware column
    assert any(set(d) and not set(d) & hw for d in described)  # a schedule column


def test_export_with_a_budget_has_the_budgeted_optimum(cli, named, brute, tmp_path):
    p = named(TINY).with_budgets(["power_W <= 60"])
    assert cli("export", TINY, "--budget", "power_W <= 60", "-o", tmp_path / "b.lp").exit_code == 0
    legend = json.loads((tmp_path / "b.lp.json").read_text())
    value, _ = read_back(tmp_path / "b.lp")
    assert value * legend["objective"]["unit"] == pytest.approx(brute(p).best.internal, rel=1e-6)


def test_the_legend_says_how_indicator_rows_are_written(cli, tmp_path):
    assert cli("export", TINY, "-o", tmp_path / "t.mps").exit_code == 0
    assert "big-M" in str(json.loads((tmp_path / "t.mps.json").read_text())["indicator_rows"])


def test_export_keeps_every_design_the_bound_presolve_would_drop(cli, tmp_path):
    assert cli("export", "small-3d-llama8b", "-o", tmp_path / "s.mps").exit_code == 0
    assert json.loads((tmp_path / "s.mps.json").read_text())["pruned"].get("hardware-bound", 0) == 0


def test_export_takes_its_format_from_the_suffix(cli, input_error, tmp_path):
    lp = tmp_path / "m.lp"
    assert cli("export", TINY, "-o", lp).exit_code == 0
    assert "ROWS" not in lp.read_text() and "st" in lp.read_text().split()  # LP, not MPS
    mps = tmp_path / "m.mps"
    assert cli("export", TINY, "-o", mps).exit_code == 0
    assert "ROWS" in mps.read_text()
    input_error(cli("export", TINY, "-o", lp, "--format", "mps"), "--format", "mps", "--format lp")
    input_error(cli("export", TINY, "--format", "xls"), "--format", "mps | lp")
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_export_json(cli_json, tmp_path):
    rec = cli_json("export", "tiny-pf-mapping", "-o", tmp_path / "m.mps")
    assert rec["path"] == str(tmp_path / "m.mps") and rec["legend"] == str(tmp_path / "m.mps.json")
    assert rec["objective"]["unit"] > 0 and "design_columns" not in rec


def test_the_factored_formulation_proves_the_same_optimum(cli_json, input_error, cli):
    enumerated = cli_json("solve", "small-3d-llama8b", "--formulation", "enumerated")
    factored = cli_json("solve", "small-3d-llama8b", "--formulation", "factored")
    assert enumerated["status"] == factored["status"] == "optimal"
    assert factored["objective"] == pytest.approx(enumerated["objective"], rel=1e-7)
    input_error(cli("solve", "tiny-pf-mapping", "--formulation", "factored"), "--formulation", "mapping")
    input_error(cli("solve", TINY, "--formulation", "bogus"), "--formulation")
