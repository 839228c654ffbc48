"""codesign.cli.common: what every command shares — global options before or after the command
(--calibration, --quiet), --version, progress on stderr, exit codes (2 bad input, 3 a failed
check, 130 Ctrl-C), messages printed verbatim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import codesign
from codesign.cli import common
from codesign.model.calibration import shipped_path
from codesign.proof import driver

REPO = Path(__file__).resolve().parents[2]
TINY = "tiny-3d-llama8b"


@pytest.fixture
def slower_calibration(tmp_path) -> Path:
    """The shipped calibration with [default] memory efficiency 0.85 -> 0.5 (the stacked-3D
    family's, so tiny-3d-llama8b's designs slow down)."""
    text = shipped_path().read_text()
    assert "[default]\nmemory_efficiency = 0.85\n" in text or "memory_efficiency = 0.85" in text
    cal = tmp_path / "slow.toml"
    cal.write_text(text.replace("memory_efficiency = 0.85", "memory_efficiency = 0.5", 1))
    return cal


def test_version(cli):
    r = cli("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"codesign {codesign.__version__}"


@pytest.mark.parametrize("where", ["before", "after"])
def test_calibration_is_accepted_before_or_after_the_command(where, cli_json, slower_calibration):
    args = ["--calibration", str(slower_calibration)]
    rec = cli_json(*([*args, "evaluate", TINY] if where == "before" else ["evaluate", TINY, *args]))
    shipped = cli_json("evaluate", TINY)
    assert rec["calibration"] == str(slower_calibration.resolve())
    assert rec["objective"] < shipped["objective"]  # slower memory: fewer tokens/s
    assert rec["instance_hash"] != shipped["instance_hash"]
    same = cli_json("--calibration", str(slower_calibration), "evaluate", TINY)
    assert same["objective"] == rec["objective"]


def test_calibration_with_an_equals_sign(cli_json, slower_calibration):
    rec = cli_json("evaluate", TINY, f"--calibration={slower_calibration}")
    assert rec["calibration"] == str(slower_calibration.resolve())


def test_a_solve_under_another_calibration_records_it(cli_json, slower_calibration):
    rec = cli_json("solve", TINY, "--calibration", str(slower_calibration))
    assert rec["status"] == "optimal" and rec["calibration"] == str(slower_calibration.resolve())


def test_a_missing_or_wrong_calibration_is_bad_input(cli, input_error, tmp_path):
    input_error(cli("evaluate", TINY, "--calibration", tmp_path / "none.toml"), "--calibration")
    text = shipped_path().read_text().replace("[chips.h100-sxm]", "[chips.h100sxm]")
    cal = tmp_path / "cal.toml"
    cal.write_text(text)
    input_error(cli("--calibration", cal, "evaluate", "dgx-llama70b-chip-choice"), "chips.h100sxm",
                "did you mean 'h100-sxm'")


@pytest.fixture
def progress_every_call(monkeypatch):
    """Progress lines at every solver callback (normally every PROGRESS_EVERY_S seconds)."""
    monkeypatch.setattr(common, "PROGRESS_EVERY_S", 0.0)


def test_progress_goes_to_stderr_off_a_terminal(cli, progress_every_call):
    r = cli("solve", "small-3d-llama8b")
    assert r.exit_code == 0
    assert "highs: small-3d-llama8b: incumbent" in r.stderr
    assert "incumbent" not in r.stdout


@pytest.mark.parametrize(("flag", "where"), [("--quiet", "before"), ("--quiet", "after"), ("-q", "before"),
                                             ("-q", "after"), ("--json", "after")])
def test_quiet_silences_progress(flag, where, cli, progress_every_call):
    args = [flag, "solve", "small-3d-llama8b"] if where == "before" else ["solve", "small-3d-llama8b", flag]
    r = cli(*args)
    assert r.exit_code == 0
    assert r.stderr == ""


def test_ctrl_c_prints_and_saves_the_incumbent_and_exits_130(cli, monkeypatch, tmp_path):
    real, calls = driver.backend_solve, []

    def interrupted_later(mip, solver, **o):
        calls.append(solver)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(mip, solver, **o)

    monkeypatch.setattr(driver, "backend_solve", interrupted_later)
    r = cli("solve", TINY, "--save", "--out-dir", tmp_path, "--json")
    assert r.exit_code == 130
    rec = json.loads(r.stdout)
    assert rec["status"] == "feasible" and rec["design"] is not None and rec["bound"] is not None
    assert rec["termination"].startswith("interrupted")
    assert json.loads((tmp_path / f"{TINY}.json").read_text())["termination"].startswith("interrupted")


def test_a_solver_and_model_disagreement_exits_3(cli, monkeypatch):
    """CP-SAT (stubbed) says infeasible; HiGHS finds a design the model accepts: a failed check."""
    import dataclasses

    real = driver.backend_solve

    def cpsat_says_infeasible(mip, solver, **o):
        r = real(mip, solver, **o)
        if solver == "cpsat":
            r = dataclasses.replace(r, status="infeasible", termination="INFEASIBLE", x=None, raw_x=None,
                                    objective=None, bound=None)
        return r

    monkeypatch.setattr(driver, "backend_solve", cpsat_says_infeasible)
    r = cli("solve", TINY, "--solver", "cpsat")
    assert r.exit_code == 3
    assert "check failed" in r.stderr and "HiGHS finds" in r.stderr and "Traceback" not in r.stderr


def test_error_text_with_brackets_is_printed_verbatim(cli, input_error):
    """User text is not Rich markup: '[/]' must neither crash the printer nor vanish."""
    input_error(cli("evaluate", TINY, "--set", "tp=[/]"), "'[/]'")
    input_error(cli("evaluate", TINY, "--set", "tp=[bold]x"), "'[bold]x'")


def test_the_instances_directory_may_be_chosen(cli, input_error, tmp_path):
    from codesign import paths

    paths.instances_dir.cache_clear()
    try:
        input_error(cli("instances", env={"CODESIGN_INSTANCES": str(tmp_path)}), "CODESIGN_INSTANCES", "catalog/")
    finally:
        paths.instances_dir.cache_clear()


def test_python_m_codesign_works_outside_the_repository(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "codesign", "instances", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    names = {r["name"] for r in json.loads(proc.stdout)}
    assert {TINY, "pf-llama405b-paper", "tiny-pf-mapping", "tiny-placement-mixtral"} <= names


def test_numbers_for_people_by_hand():
    assert common.fmt(1234) == "1,234"
    assert common.fmt(1234.5) == "1,234.5"
    assert common.fmt(0.00012) == "0.00012"
    assert common.fmt(2.5e7) == "2.5e+07"
    assert common.fmt(0.0) == "0"
    assert common.fmt(True) == "True" and common.fmt("x") == "x"


def test_a_plot_path_that_cannot_be_written_is_refused_before_any_work(cli, input_error, tmp_path):
    assert_input_error = input_error
    csv = REPO / "validation" / "measurements.csv"
    assert_input_error(cli("validate", str(csv), "--plot", str(tmp_path)), "--plot", "a directory, not a file")
    assert_input_error(cli("validate", str(csv), "--plot", str(tmp_path / "p.jpg")), "--plot", "suffix '.jpg'")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_input_error(cli("pareto", TINY, "--x", "tokens_per_s", "--y", "power_W", "--plot",
                           str(blocker / "p.png")), "--plot", "is a file, not a folder")
    assert not list(tmp_path.glob("*.png"))


def test_an_os_error_on_a_path_is_bad_input_not_a_traceback(cli, input_error, tmp_path):
    assert_input_error = input_error
    long = tmp_path / ("x" * 300)
    assert_input_error(cli("evaluate", TINY, "--design", str(long)), "File name too long")
    assert_input_error(cli("calibrate", str(long), "--out", str(tmp_path / "c.toml")), "File name too long")
