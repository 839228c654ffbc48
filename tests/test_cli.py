"""The command line (DESIGN.md §6): JSON contracts, exit codes and error messages.

Every command runs through typer's CliRunner on ``codesign.cli.app``; one test runs
``python -m codesign`` in a subprocess from a temporary directory to show that the named instances
are found outside the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from codesign.cli import app
from codesign.kinds.grid.spec import load_instance

REPO = Path(__file__).resolve().parent.parent
TINY = "tiny-3d-llama8b"
runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def ok_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_input_error(result: Result, *pieces: str) -> None:
    """Exit code 2, a message on stderr naming every piece, and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stderr.startswith("error:")
    for piece in pieces:
        assert piece in result.stderr, (piece, result.stderr)
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------------------------------
# instances / show
# --------------------------------------------------------------------------------------------------


def test_instances_json_lists_names_and_exact_sizes() -> None:
    rows = ok_json("instances")
    assert len(rows) >= 8
    by_name = {r["name"]: r for r in rows}
    assert all(isinstance(r["space_size"], int) for r in rows)
    assert by_name[TINY]["space_size"] == 432
    # exact integers survive JSON even past 2**53
    assert by_name["deepstack-multi-workload"]["space_size"] == 208_042_343_792_640_000


def test_instances_table_for_people() -> None:
    result = run("instances")
    assert result.exit_code == 0
    assert TINY in result.stdout


def test_show_json_has_decisions_baseline_and_lints() -> None:
    data = ok_json("show", TINY)
    decisions = {d["name"]: d["domain"] for d in data["decisions"]}
    assert decisions["dram_layers"] == [2, 4, 8]
    assert decisions["tp"] == [1, 2, 4]
    assert data["baseline"]["tp"] == 4 and data["baseline"]["dram_layers"] == 4
    assert set(data["baseline"]) == set(decisions)
    assert data["lints"] == []
    assert data["space_size"] == 432


def test_show_json_reports_the_paper_lints() -> None:
    data = ok_json("show", "pf-llama405b-paper")
    codes = {x["code"] for x in data["lints"]}
    assert {"pooled-bandwidth-exceeds-ports", "pooled-bandwidth-exceeds-switch"} <= codes
    switch = next(x for x in data["lints"] if x["code"] == "pooled-bandwidth-exceeds-switch")
    assert switch["numbers"]["total_GBps"] == 214_400
    assert switch["numbers"]["switch_GBps"] == 14_375


def test_show_for_people() -> None:
    result = run("show", "pf-dense1t-paper")
    assert result.exit_code == 0
    assert "pooled-bandwidth-exceeds-switch" in result.stdout


# --------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------


def test_evaluate_json_of_the_baseline() -> None:
    data = ok_json("evaluate", TINY)
    for key in ("metrics", "objective", "feasible", "lints"):
        assert key in data
    assert data["feasible"] is True
    assert data["lints"] == []
    assert data["design"] == load_instance(TINY).baseline()
    assert data["objective"] == pytest.approx(data["metrics"]["tokens_per_s"], rel=1e-12)
    assert data["metrics"]["tp"] == 4


def test_evaluate_set_changes_the_design() -> None:
    base = ok_json("evaluate", TINY)
    data = ok_json("evaluate", TINY, "--set", "tp=2", "--set", "batch=128")
    assert data["design"]["tp"] == 2 and data["design"]["batch"] == 128
    assert data["metrics"]["tp"] == 2 and data["metrics"]["dp"] == 2
    assert data["objective"] != base["objective"]


def test_evaluate_design_files_json_and_toml(tmp_path: Path) -> None:
    as_json = tmp_path / "d.json"
    as_json.write_text(json.dumps({"tp": 1, "batch": 8, "clock_GHz": 1.2}))
    as_toml = tmp_path / "d.toml"
    as_toml.write_text("tp = 1\nbatch = 8\nclock_GHz = 1.2\n")
    a = ok_json("evaluate", TINY, "--design", str(as_json))
    b = ok_json("evaluate", TINY, "--design", str(as_toml))
    assert a["design"] == b["design"]
    assert (a["design"]["tp"], a["design"]["batch"], a["design"]["clock_GHz"]) == (1, 8, 1.2)
    assert a["objective"] == b["objective"]
    # --set overrides the file
    c = ok_json("evaluate", TINY, "--design", str(as_json), "--set", "tp=4")
    assert c["design"]["tp"] == 4 and c["design"]["batch"] == 8


def test_evaluate_multi_workload_design_file_with_tables(tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_text("dram_layers = 12\n[llama8b]\ntp = 4\nbatch = 128\n")
    data = ok_json("evaluate", "deepstack-multi-workload", "--design", str(path))
    assert data["design"]["dram_layers"] == 12
    assert data["design"]["llama8b.tp"] == 4 and data["design"]["llama8b.batch"] == 128
    assert set(data["workloads"]) == {"llama70b", "llama8b", "qwen30b", "llama70b_rag", "mixtral", "gptoss120b"}


def test_evaluate_for_people() -> None:
    result = run("evaluate", TINY, "--set", "tp=2")
    assert result.exit_code == 0
    assert "objective max tokens_per_s" in result.stdout
    assert "decode_step.compute_s" in result.stdout


def test_bad_set_value_outside_the_domain() -> None:
    assert_input_error(run("evaluate", TINY, "--set", "tp=3"), "tp", "3", "[1, 2, 4]")


def test_bad_set_value_not_a_number() -> None:
    assert_input_error(run("evaluate", TINY, "--set", "tp=abc"), "tp", "'abc'", "not a number")


def test_bad_set_unknown_decision_and_missing_equals() -> None:
    assert_input_error(run("evaluate", TINY, "--set", "tpp=2"), "tpp", "did you mean 'tp'?")
    assert_input_error(run("evaluate", TINY, "--set", "tp"), "key=value")


def test_bad_design_file(tmp_path: Path) -> None:
    bad = tmp_path / "d.json"
    bad.write_text("{not json")
    assert_input_error(run("evaluate", TINY, "--design", str(bad)), str(bad), "not valid JSON")
    assert_input_error(
        run("evaluate", TINY, "--design", str(tmp_path / "missing.json")), "not found"
    )
    out_of_domain = tmp_path / "e.toml"
    out_of_domain.write_text("dram_layers = 3\n")
    assert_input_error(
        run("evaluate", TINY, "--design", str(out_of_domain)), str(out_of_domain), "dram_layers"
    )


def test_unknown_instance_suggests_the_closest() -> None:
    for args in (("evaluate", "tiny-3d-llama8"), ("show", "tiny-3d-llama8")):
        assert_input_error(run(*args), "tiny-3d-llama8", "did you mean 'tiny-3d-llama8b'?")


def test_malformed_instance_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('extends = "tiny-3d-llama8b"\nname = "bad"\n[system]\ndevices = "four"\n')
    assert_input_error(run("show", str(path)), str(path), "system.devices", "'four'")


def test_instance_given_by_path(tmp_path: Path) -> None:
    named = ok_json("evaluate", TINY)
    by_path = ok_json("evaluate", str(REPO / "instances" / f"{TINY}.toml"))
    assert by_path["objective"] == named["objective"]
    child = tmp_path / "child.toml"
    child.write_text('extends = "tiny-3d-llama8b"\nname = "child"\n[budgets]\narea_mm2 = 50.0\n')
    data = ok_json("evaluate", str(child))
    assert data["instance"] == "child"
    assert data["feasible"] is False  # the baseline tile is 75.17 mm2
    area = next(a for a in data["audit"] if a["name"] == "budget-area")
    assert area["limit"] == 50.0 and area["ok"] is False


def test_python_m_codesign_works_outside_the_repository(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "codesign", "instances", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) >= 8
    assert {TINY, "pf-llama405b-paper"} <= {r["name"] for r in rows}


def test_error_text_with_brackets_is_printed_verbatim() -> None:
    """User text is not Rich markup: '[/]' must neither crash the printer nor vanish."""
    assert_input_error(run("evaluate", TINY, "--set", "tp=[/]"), "'[/]'")
    assert_input_error(run("evaluate", TINY, "--set", "tp=[bold]x"), "'[bold]x'")


def test_solve_cross_checks_only_when_asked() -> None:
    """Without --cross-check one solver runs and the record has no cross-check; with it, both
    solvers' objectives are compared (the option's name must not be shadowed by the function)."""
    r = run("solve", "tiny-3d-llama8b", "--json")
    assert r.exit_code == 0, r.output
    assert "cross_check" not in json.loads(r.stdout)
    r = run("solve", "tiny-3d-llama8b", "--cross-check", "--json")
    assert r.exit_code == 0, r.output
    cc = json.loads(r.stdout)["cross_check"]
    assert cc["solvers"] == ["highs", "cpsat"] and cc["agree"] is True
