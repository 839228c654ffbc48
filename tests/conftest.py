"""Shared test helpers: named problems and their brute-force optima (computed once per session),
the exactness check every kind's tests use, and the command line run in-process.

The test tree mirrors the package: ``tests/kinds/grid/test_space.py`` tests
``codesign/kinds/grid/space.py``, and so on. Exactness (brute force = HiGHS = CP-SAT) lives in
``tests/proof/test_driver.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner, Result

#: relative agreement of an optimum with brute force (grid instances: the model's own arithmetic)
RTOL = 1e-9


@pytest.fixture(scope="session")
def named() -> Callable[[str], Any]:
    """``named(name)``: the named instance as a :class:`~codesign.kinds.base.Problem` (loaded once)."""
    from codesign.kinds.registry import load

    cache: dict[str, Any] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load(name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def brute() -> Callable[[Any], Any]:
    """``brute(problem)``: its :class:`~codesign.kinds.base.BruteForce` (once per content hash)."""
    cache: dict[str, Any] = {}

    def get(problem):
        key = problem.content_hash
        if key not in cache:
            cache[key] = problem.brute_force()
        return cache[key]

    return get


@pytest.fixture
def solvers_match_brute_force(brute):
    """A check of exactness on an enumerable grid instance (a ``kinds.grid.spec.Instance`` or a
    problem): brute force finds a feasible optimum, HiGHS and CP-SAT both prove it (to 1e-9
    relative), and the model gives each returned design that objective. Returns the brute-force
    optimum's :class:`~codesign.kinds.base.Assessment`."""
    from codesign.kinds.base import Problem
    from codesign.kinds.grid.problem import Grid
    from codesign.proof.driver import solve

    def check(inst):
        p = inst if isinstance(inst, Problem) else Grid(inst)
        bf = brute(p)
        assert bf.best is not None and bf.best.feasible
        for solver in ("highs", "cpsat"):
            sol = solve(p, solver=solver)
            assert sol.status == "optimal", (solver, sol.status, sol.termination)
            assert sol.objective == pytest.approx(bf.best.objective, rel=RTOL), solver
            a = p.assess(p.parse_design(sol.design))
            assert a.feasible and a.objective == pytest.approx(bf.best.objective, rel=RTOL), solver
        return bf.best

    return check


_runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """``codesign ARGS`` in-process (typer's runner on :data:`codesign.cli.app`)."""
    from codesign.cli import app

    return _runner.invoke(app, [str(a) for a in args], env=env)


@pytest.fixture(scope="session")
def cli() -> Callable[..., Result]:
    """``cli(*args)``: run the command line in-process; the result has exit_code, stdout, stderr."""
    return invoke


@pytest.fixture(scope="session")
def cli_json() -> Callable[..., Any]:
    """``cli_json(*args)``: run ``codesign ARGS --json``, require exit 0, return the parsed JSON."""

    def run(*args: str) -> Any:
        r = invoke(*args, "--json")
        assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
        return json.loads(r.stdout)

    return run


def assert_input_error(result: Result, *pieces: str) -> None:
    """Exit code 2, a message on stderr naming every piece, and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("error:"), result.stderr
    for piece in pieces:
        assert piece in result.stderr, (piece, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr


@pytest.fixture(scope="session")
def input_error() -> Callable[..., None]:
    """``input_error(result, *pieces)``: see :func:`assert_input_error`."""
    return assert_input_error
