"""Bad input across the commands (DESIGN.md §2.7): exit code 2, a message naming the file, key and
value, no traceback; and what a file written for the user looks like. The cases are the ones an
audit of 176 malformed inputs found crashing or misleading."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from codesign.cli import app
from codesign.kinds.grid.spec import load_instance
from codesign.proof.driver import solve_instance

TINY = "tiny-3d-llama8b"
runner = CliRunner()
NOT_UTF8 = b"\x89PNG\x00\xff\xfe"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env=env)


def assert_input_error(result: Result, *pieces: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stderr.startswith("error:"), result.stderr
    for piece in pieces:
        assert piece in result.stderr, (piece, result.stderr)
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_a_time_limit_is_positive_and_finite(value: str) -> None:
    assert_input_error(run("solve", TINY, f"--time-limit={value}"), "--time-limit", "positive")
    assert_input_error(run("certify", TINY, f"--time-limit={value}"), "--time-limit")


def test_threads_is_a_count() -> None:
    assert_input_error(run("solve", TINY, "--threads=-3"), "--threads", "-3")
    assert_input_error(run("solve", "tiny-pf-mapping", "--threads=-3"), "--threads")


def test_unwritable_and_directory_outputs(tmp_path: Path) -> None:
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    assert_input_error(run("solve", TINY, "--save", "--out-dir", str(a_file)), str(a_file), "cannot write")
    assert_input_error(run("certify", TINY, "-o", str(tmp_path)), str(tmp_path), "directory")
    assert_input_error(run("export", TINY, "-o", str(a_file / "m.mps")), "cannot write")
    assert_input_error(run("generate", "mapping", "-o", str(a_file / "g.toml")), "cannot write")


def test_a_saved_solution_has_the_permissions_of_a_plain_write(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        assert run("solve", TINY, "--save", "--out-dir", str(tmp_path)).exit_code == 0
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / f"{TINY}.json").stat().st_mode)
    assert mode == 0o644


def test_export_takes_its_format_from_the_suffix(tmp_path: Path) -> None:
    lp = tmp_path / "m.lp"
    assert run("export", TINY, "-o", str(lp)).exit_code == 0
    assert lp.read_text().startswith("\\* Source Pyomo model")  # the LP writer's header, not MPS
    mps = tmp_path / "m.mps"
    assert run("export", TINY, "-o", str(mps)).exit_code == 0
    assert "NAME" in mps.read_text() and "ROWS" in mps.read_text()
    assert_input_error(run("export", TINY, "-o", str(lp), "--format", "mps"), "--format", "mps", "--format lp")
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob(".m.*"))  # no temp file left


def test_files_that_are_not_utf8_text(tmp_path: Path) -> None:
    for name in ("i.toml", "d.json", "m.csv"):
        (tmp_path / name).write_bytes(NOT_UTF8)
    assert_input_error(run("evaluate", str(tmp_path / "i.toml")), "i.toml", "UTF-8")
    assert_input_error(run("evaluate", TINY, "--design", str(tmp_path / "d.json")), "d.json", "JSON")
    assert_input_error(run("check-solution", str(tmp_path / "d.json")), "d.json", "UTF-8")
    assert_input_error(run("validate", str(tmp_path / "m.csv")), "m.csv", "UTF-8")


def test_a_design_file_of_another_format_says_what_is_read(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    f.write_text("tp: 4\n")
    assert_input_error(run("evaluate", TINY, "--design", str(f)), "d.yaml", "a JSON design file, or TOML")


def test_show_a_directory_or_a_non_toml_file(tmp_path: Path) -> None:
    assert_input_error(run("show", str(tmp_path)), "a directory, not an instance file")
    f = tmp_path / "inst.txt"
    f.write_text("name = 'x'\n")
    assert_input_error(run("show", str(f)), "suffix .toml")


def test_a_calibration_table_for_no_chip_is_refused(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parent.parent / "instances" / "catalog" / "calibration.toml"
    text = shipped.read_text().replace("[chips.h100-sxm]", "[chips.h100sxm]")
    cal = tmp_path / "cal.toml"
    cal.write_text(text)
    r = run("--calibration", str(cal), "evaluate", "dgx-llama70b-chip-choice")
    assert_input_error(r, "chips.h100sxm", "did you mean 'h100-sxm'")
    assert_input_error(run("--calibration", str(tmp_path / "none.toml"), "evaluate", TINY), "--calibration")


def test_every_chip_of_an_instance_is_checked_and_named_by_its_key(tmp_path: Path) -> None:
    src = (Path(__file__).resolve().parent.parent / "instances" / "dgx-llama70b-chip-choice.toml").read_text()
    hw = tmp_path / "hw.toml"
    hw.write_text(src.replace('chip = "h100-sxm"\n', 'chip = "h100sxm"\n', 1))
    assert_input_error(run("evaluate", str(hw)), "hardware.chip", "h100sxm", "did you mean 'h100-sxm'")
    dom = tmp_path / "dom.toml"
    dom.write_text(src.replace('"h200-sxm", "b200"]', '"h200sxm", "b200"]'))
    assert_input_error(run("evaluate", str(dom)), "hardware.decisions.chip", "h200sxm")


def test_a_misspelt_instance_kind(tmp_path: Path) -> None:
    src = (Path(__file__).resolve().parent.parent / "instances" / "mapping" / "tiny-pf-mapping.toml").read_text()
    f = tmp_path / "m.toml"
    f.write_text(src.replace('kind = "mapping"', 'kind = "maping"'))
    assert_input_error(run("solve", str(f)), "kind", "maping", "did you mean 'mapping'")


def test_commands_that_take_no_mapping_instance_say_so() -> None:
    assert_input_error(run("explain", "tiny-pf-mapping"), "mapping instance", "codesign solve tiny-pf-mapping")
    assert_input_error(run("export", "tiny-pf-mapping"), "mapping instance")


def test_generate_checks_each_parameter_and_speaks_json(tmp_path: Path) -> None:
    out = tmp_path / "g.toml"
    assert_input_error(run("generate", "mapping", "-o", str(out), "--set", "devices=abc"), "--set devices", "abc", "int")
    r = run("generate", "placement", "-o", str(out), "--set", "devices=-4")
    assert_input_error(r, "devices=-4", "no valid placement instance")
    assert not out.exists()
    rec = json.loads(run("generate", "placement", "-o", str(out), "--set", "devices=16", "--json").stdout)
    assert rec["kind"] == "placement" and rec["parameters"] == {"devices": 16} and out.exists()


def test_validate_files_without_a_predictable_row(tmp_path: Path) -> None:
    header = "id,model,gpu,num_gpus,tp,isl,osl,metric,value\n"
    (tmp_path / "h.csv").write_text(header)
    assert_input_error(run("validate", str(tmp_path / "h.csv")), "the file has no rows")
    (tmp_path / "m.csv").write_text(header + "a,llama-3.1-8b,h100-sxm,1,1,100,100,tokens_per_sec,1\n")
    assert_input_error(run("validate", str(tmp_path / "m.csv")), "no row of the file could be predicted", "tokens_per_sec")
    (tmp_path / "c.csv").write_text("id,model,gpu\n")
    assert_input_error(run("validate", str(tmp_path / "c.csv")), "lacks the column(s) num_gpus, tp, isl, osl, metric, value")


def test_validate_names_the_column_and_skips_repeated_ids(tmp_path: Path) -> None:
    header = "id,model,gpu,num_gpus,tp,precision,isl,osl,metric,value\n"
    row = "a,llama-3.1-8b,h100-sxm,1,1,fp8,1000,1000,output_tokens_per_s,{}\n"
    (tmp_path / "m.csv").write_text(header + row.format("fast") + row.format(14108).replace("a,", "b,", 1))
    rec = json.loads(run("validate", str(tmp_path / "m.csv"), "--json").stdout)
    assert [(s["id"], s["reason"]) for s in rec["skipped"]] == [("a", "malformed row: column value: 'fast' is not a number")]
    assert [r["id"] for r in rec["rows"]] == ["b"]
    (tmp_path / "d.csv").write_text(header + row.format(14108) + row.format(14000))
    rec = json.loads(run("validate", str(tmp_path / "d.csv"), "--json").stdout)
    assert [s["reason"] for s in rec["skipped"]] == ["duplicate id: line 3 repeats the id of line 2"]
    assert [r["measured"] for r in rec["rows"]] == [14108.0]


def test_an_unknown_pyomo_solver_prints_no_traceback() -> None:
    assert_input_error(run("solve", TINY, "--solver", "pyomo:nonsense"), "Pyomo cannot find solver 'nonsense'")


def test_the_instances_directory_may_be_chosen(tmp_path: Path) -> None:
    from codesign import paths

    paths.instances_dir.cache_clear()
    try:
        assert_input_error(run("instances", env={"CODESIGN_INSTANCES": str(tmp_path)}), "CODESIGN_INSTANCES", "catalog/")
    finally:
        paths.instances_dir.cache_clear()


def test_cpsat_says_its_last_round_is_the_proof() -> None:
    """The exclude-and-resolve loop ends when CP-SAT finds no design better than the best verified
    one (INFEASIBLE): the status is optimal and the termination says why."""
    sol = solve_instance(load_instance(TINY), solver="cpsat")
    assert sol.status == "optimal"
    assert sol.termination.startswith("proved in ") and "no design beats the best verified one" in sol.termination


def test_explain_relaxes_a_throughput_budget_in_tokens_per_s() -> None:
    """The least relaxation of 'tokens_per_s >= 30000' on the tiny instance is 30,000 tok/s less its
    optimum (by enumeration of its 432 designs), in tok/s; the normalised row's own figure is
    1/optimum - 1/30,000 seconds per token."""
    from codesign.kinds.grid.space import brute_force

    best = brute_force(load_instance(TINY)).objective
    assert best < 30000
    rec = json.loads(run("explain", TINY, "--budget", "tokens_per_s >= 30000", "--json").stdout)
    (r,) = [x for x in rec["relaxations"] if x["name"].startswith("budget")]
    assert r["relax_by_as_written"] == pytest.approx(30000 - best, rel=1e-6)
    assert r["violation_at_best"] == pytest.approx(1 / best - 1 / 30000, rel=1e-6)


def test_lints_for_a_system_its_layouts_cannot_tile() -> None:
    """4 devices in scale-up domains of 3 leave a domain of 1; tp = 3 with pp in {1, 2} divides 4
    devices into no whole replica (3 and 6 do not divide 4), while tp = 1, 2 and 4 do."""
    import copy

    from codesign.kinds.grid.lints import lint
    from codesign.kinds.grid.spec import instance_from_data

    raw = copy.deepcopy(load_instance(TINY).raw)
    raw["system"]["scale_up_domain"] = 3
    raw["workloads"][0]["decisions"]["tp"] = [1, 2, 3, 4]
    raw["workloads"][0]["decisions"]["pp"] = [1, 2]
    found = {x.code: x for x in lint(instance_from_data(raw))}
    assert found["scale-up-domain-does-not-tile-system"].numbers == {"scale_up_domain": 3, "devices": 4}
    assert "tp = 3 " in found["tp-never-fits-system"].message
    raw["system"]["scale_up_domain"] = 4
    raw["workloads"][0]["decisions"]["tp"] = [1, 2, 4]
    assert lint(instance_from_data(raw)) == []
