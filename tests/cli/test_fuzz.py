"""The command line under malformed input (issue 34, part 3): every command over every file type
and command-line value, each broken one way, run in-process. The cases come from the catalogue of
``tools/fuzz_cli.py`` (which runs ≥ 1,000 of them as subprocesses); here one case of every
(input, class) pair, and more drawn by hypothesis, bounded to well under a minute.

A case holds when the command exits 0, 1, 2 or 3 with no other exception escaping (a SystemExit
only), exit 2 says why on stderr, no output says "Traceback", an input that is garbage by
construction is not accepted with exit 0, nothing blocks past a time limit, and nothing is written
outside the directories the command line names.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fuzz_cli", ROOT / "tools" / "fuzz_cli.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_cli"] = fuzz  # dataclasses resolve their annotations through sys.modules
_spec.loader.exec_module(fuzz)

#: seconds after which an in-process case counts as a hang (the solving commands get 2 s)
HANG_S = 60
#: the pairs a subprocess must run: those setting $CODESIGN_INSTANCES, read once per process
SUBPROCESS_ONLY = {"instances"}
#: failures known and reported, outside the input layer's files: (input class, a pattern of the
#: case's note, a pattern every problem matches, where the bug is). Such a case is an expected
#: failure until it is fixed there (then it passes).
KNOWN_OUTSIDE: list[tuple[str, str, str, str]] = []


def known_outside(input_class: str, note: str, problems: list[str]) -> str | None:
    """The reason a case's failure is a known one outside the input layer (None: it is not)."""
    cls = input_class.split(":")[1]
    for known, in_note, says, where in KNOWN_OUTSIDE:
        if cls == known and re.search(in_note, note) and problems and all(re.search(says, p) for p in problems):
            return where
    return None


@pytest.fixture(scope="module")
def seeds(cli, tmp_path_factory) -> Any:
    """The valid inputs every case breaks, made in-process (a solve and a certificate per kind)."""
    work = tmp_path_factory.mktemp("fuzz-seeds")

    def run(argv: list[str], cwd: Path) -> tuple[int, str, str]:
        r = cli(*argv, env={"CODESIGN_DATA": str(work / "data")})
        return r.exit_code, r.stdout, r.stderr

    return fuzz.build_seeds(run, work, quick=True)


class _Hang(Exception):
    pass


def run_in_process(cli: Callable[..., Any], case: Any, case_dir: Path) -> tuple[Any, set[Path]]:
    """Lay ``case`` out in ``case_dir``, run it in-process from its working directory with its
    environment, and return the outcome and what was there before it ran."""
    argv, env, _ = fuzz.lay_out(case, case_dir)
    before = fuzz.snapshot(case_dir)
    env = {"HOME": str(case_dir / "home"), "CODESIGN_DATA": str(case_dir / "data"), "XDG_DATA_HOME": None, **env}

    def alarm(*_: Any) -> None:
        raise _Hang(f"no exit within {HANG_S} s")

    cwd = os.getcwd()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        os.chdir(case_dir / "cwd")
        r = cli(*argv, env=env)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
    exc = r.exception
    hung = isinstance(exc, _Hang)
    outcome = fuzz.Outcome(None if hung else r.exit_code, r.stdout, r.stderr, HANG_S if hung else 0.0,
                           exception="" if exc is None or isinstance(exc, SystemExit) or hung else repr(exc))
    return outcome, before


def check(cli: Callable[..., Any], seeds: Any, i: int, seed: int, *, xfail_known: bool = True) -> None:
    """Run case ``i`` of ``seed`` and assert it kept the contract (a known failure outside the
    input layer is an expected failure, or with ``xfail_known=False`` passes unexamined: an
    exception inside hypothesis would be shrunk)."""
    case = fuzz.make_case(i, seed, seeds, big=False)
    check_case(cli, case, f"python tools/fuzz_cli.py --seed {seed} --case {i} --keep /tmp/case", xfail_known=xfail_known)


def check_case(cli: Callable[..., Any], case: Any, where: str, *, xfail_known: bool = True) -> None:
    """Run ``case`` in-process and assert it kept the contract (``where``: how to reproduce it)."""
    if not case.in_process or case.command in SUBPROCESS_ONLY:
        if xfail_known:
            pytest.skip("sets $CODESIGN_INSTANCES (read once per process) or starts or waits for a dask cluster: "
                        "tools/fuzz_cli.py runs it as a subprocess")
        return
    with tempfile.TemporaryDirectory(prefix="fuzz-case-") as tmp:
        case_dir = Path(tmp)
        outcome, before = run_in_process(cli, case, case_dir)
        problems = fuzz.judge(case, case_dir, before, outcome)
    reason = known_outside(case.input_class, case.note, problems)
    if reason is not None:
        if xfail_known:
            pytest.xfail(reason)
        return
    assert not problems, (f"{case.input_class} / {case.command}: {case.note}\n  codesign {' '.join(case.argv)[:300]}\n"
                          f"  reproduce: {where}\n"
                          f"  {problems}\n  stderr: {outcome.stderr[-800:]}")


#: one case of every (input, class) pair the catalogue has (a command-line value's several times)
PAIRS = list(enumerate(fuzz.COMBOS))


@pytest.mark.parametrize("i", [i for i, _ in PAIRS], ids=[f"{t}-{c}-{i}" for i, (t, c) in PAIRS])
def test_every_input_class_keeps_the_contract(cli, seeds, i: int) -> None:
    check(cli, seeds, i, seed=1)


#: the commands whose options joined the catalogue last (issue 34, part 3): one value of each of
#: their options, the first one refused where there is one
NEW_COMMANDS = ("pareto", "sensitivity", "report", "breakdown", "sweep")
OPTION_PICKS = [(c, o, next((k for k, (_, bad) in enumerate(fuzz.OPTIONS[c][o]) if bad), 0))
                for c in NEW_COMMANDS for o in sorted(fuzz.OPTIONS[c])]


@pytest.mark.parametrize("pick", OPTION_PICKS, ids=[f"{c}{o}-{k}" for c, o, k in OPTION_PICKS])
def test_every_option_of_the_newer_commands_keeps_the_contract(cli, seeds, pick: tuple[str, str, int]) -> None:
    case = fuzz._option_case(random.Random(f"pick:{pick}"), seeds, "option-value", False, pick=pick)
    case.input_class = "option:option-value"
    check_case(cli, case, f"tools/fuzz_cli.py _option_case(..., pick={pick!r})")


@settings(max_examples=80, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(i=st.integers(0, 100 * len(fuzz.COMBOS)), seed=st.integers(0, 2**16))
def test_drawn_malformed_inputs_keep_the_contract(cli, seeds, i: int, seed: int) -> None:
    check(cli, seeds, i, seed, xfail_known=False)


def test_the_catalogue_covers_every_command_and_file_type(seeds) -> None:
    commands = {fuzz.make_case(i, 0, seeds, big=False).command for i in range(3 * len(fuzz.COMBOS))}
    assert commands == {"instances", "show", "evaluate", "solve", "certify", "explain", "check-solution",
                        "check-certificate", "export", "generate", "metrics", "validate", "calibrate", "pareto",
                        "sensitivity", "sweep", "report", "breakdown"}
    targets = {t for t, _ in fuzz.COMBOS}
    assert targets == {"instance", "catalog-entry", "design", "record", "csv", "split", "calibration", "sweep-spec",
                       "set", "budget", "option", "generate"}
    kinds = {fuzz.make_case(i, 0, seeds, big=False).note.split(" ", 1)[0]
             for i in range(3 * len(fuzz.COMBOS)) if fuzz.COMBOS[i % len(fuzz.COMBOS)][0] == "instance"}
    assert {"grid", "grid-catalog", "mapping", "placement", "grid-by-path"} <= kinds
