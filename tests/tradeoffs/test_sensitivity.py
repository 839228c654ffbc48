"""codesign.tradeoffs.sensitivity: the proven optimum along a budget or a parameter.

References: every point equals a direct ``solve --budget`` at that value; on tiny-3d-llama8b the
optimum of tokens/s under ``power_W <= v`` changes exactly where the tokens/s-power frontier has
a point (a frontier point's power is where a better design becomes affordable), so every located
breakpoint interval holds one frontier power and every frontier power in the range lies in one.
The range's values solved on a local dask cluster (``workers``) give the same answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codesign.errors import InputError
from codesign.kinds.registry import load
from codesign.proof.driver import solve
from codesign.tradeoffs.pareto import frontier
from codesign.tradeoffs.sensitivity import parse_vary, sensitivity

TINY = "tiny-3d-llama8b"


@pytest.fixture(scope="module")
def power_sweep():
    return sensitivity(load(TINY), "power_W <= 30..80 step 10")


def test_every_point_is_the_direct_solve(power_sweep):
    p = load(TINY)
    for pt in power_sweep.points:
        direct = solve(p.with_budgets([f"power_W <= {pt.value!r}"]))
        assert pt.status == direct.status
        if direct.status == "optimal":
            assert pt.objective == pytest.approx(direct.objective, rel=1e-9)


def test_breakpoints_are_where_the_frontier_has_its_points(power_sweep):
    powers = [q.y for q in frontier(load(TINY), "tokens_per_s", "power_W").points]
    intervals = [b["between"] for b in power_sweep.breakpoints]
    assert all(any(lo <= w <= hi for w in powers) for lo, hi in intervals)
    assert all(any(lo <= w <= hi for lo, hi in intervals) for w in powers if 30 <= w <= 80)
    assert all(hi - lo <= 1e-3 * 50 for lo, hi in intervals)


def test_marginal_values_are_difference_quotients_of_proven_optima(power_sweep):
    by_value = {p.value: p.objective for p in power_sweep.points}
    for m in power_sweep.marginal:
        assert m["per_unit"] == pytest.approx((by_value[m["to"]] - by_value[m["from"]]) / (m["to"] - m["from"]))
        assert m["unit"] == "tokens_per_s per unit of power_W"


def test_the_range_on_a_dask_cluster_gives_the_same_answer(power_sweep):
    r = sensitivity(load(TINY), "power_W <= 30..80 step 10", workers=1)
    assert [p.as_dict() for p in r.points] == [p.as_dict() for p in power_sweep.points]
    assert r.breakpoints == power_sweep.breakpoints and r.marginal == power_sweep.marginal


def test_an_instance_field_can_be_varied():
    """The Photonic Fabric question: the assumed pooled bandwidth per GPU, from what two 7.2 Tbps
    ports carry (1,800 GB/s) to the paper's 26,800 GB/s. At 26,800 the optimum is the paper
    instance's stored one (solutions/pf-llama405b-paper.json: that instance is this one with
    that field); the optimal design does not change on the way (the optimum grows with the bandwidth,
    the design stays: no breakpoint)."""
    r = sensitivity(load("pf-llama405b-consistent"), "system.pooled_bandwidth_GBps_per_device=1800..26800 step 12500")
    assert [p.value for p in r.points] == [1800.0, 14300.0, 26800.0]
    stored = json.loads((Path(__file__).resolve().parents[2] / "solutions" / "pf-llama405b-paper.json").read_text())
    assert stored["status"] == "optimal" and stored["gap"] == 0
    assert stored["instance_hash"] == load("pf-llama405b-paper").content_hash  # stored for today's file
    assert r.points[-1].objective == pytest.approx(stored["objective"], rel=1e-9)
    assert r.points[0].objective < r.points[1].objective < r.points[2].objective
    assert r.breakpoints == [] and r.points[0].design == r.points[-1].design


@pytest.mark.parametrize(("text", "piece"), [
    ("power_W < 30..80", "not a range"),
    ("power_W <= 80..30 step 5", "LO <= HI"),
    ("power_W <= 30..80 step 0", "positive step"),
    ("power_W <= 0..1e6 step 1", "at most"),
    ("system.no_such_field=1..2", "no such field"),
    ("system.topology=1..2", "not a number"),
    ("powr_W <= 30..80", "did you mean"),
])
def test_bad_ranges_are_refused(text, piece):
    with pytest.raises(InputError, match=piece):
        parse_vary(text, load(TINY if "system" not in text else "pf-llama405b-consistent"))


def test_the_command(cli, tmp_path):
    png = tmp_path / "s.png"
    r = cli("sensitivity", TINY, "--vary", "area_mm2 <= 100..200 step 100", "--plot", png, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert set(d) >= {"points", "breakpoints", "marginal"} and len(d["points"]) == 2
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = cli("sensitivity", TINY, "--vary", "area_mm2 <= 100..200 step 100", "--workers", "-1")
    assert bad.exit_code == 2 and "--workers" in bad.output


def test_a_budget_range_on_a_mapping_follows_the_mapping_budget_rules():
    """A mapping has no workloads table: its --vary budget was parsed by the grid's rules and
    raised IndexError (found by tools/fuzz_cli.py)."""
    v = parse_vary("tokens_per_s >= 100..200 step 100", load("tiny-pf-mapping"))
    assert v.values == (100.0, 200.0)
    with pytest.raises(InputError, match="no metric of a mapping"):
        parse_vary("power_W <= 100..200 step 100", load("tiny-pf-mapping"))


def test_the_time_limit_covers_the_whole_run_and_keeps_what_it_found(power_sweep):
    full = power_sweep
    assert full.complete and not any(n.startswith("time limit") for n in full.notes)
    p = load("tiny-3d-llama8b")
    cut = sensitivity(p, "power_W <= 30..80 step 10", time_limit=1e-9)
    # the first solve runs (its first round always does), then the limit is spent
    assert not cut.complete and any(n.startswith("time limit") for n in cut.notes)
    assert 1 <= len(cut.points) < len(full.points)
    for got in cut.points:  # what was kept is what the full run proved at that value
        same = next(q for q in full.points if q.value == got.value)
        assert got.status in (same.status, "feasible", "no_solution")  # proven as in full, or stopped
        if got.status == "optimal":
            assert got.objective == pytest.approx(same.objective, rel=1e-9)
    assert cut.as_dict()["complete"] is False


def test_ctrl_c_keeps_the_values_proven_before_it(power_sweep, monkeypatch):
    from codesign.tradeoffs import sensitivity as sens_mod

    real, calls = sens_mod.solve, []

    def interrupted_third(problem, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(problem, **kw)

    monkeypatch.setattr(sens_mod, "solve", interrupted_third)
    cut = sensitivity(load(TINY), "power_W <= 30..80 step 10")
    assert cut.interrupted and not cut.complete and cut.as_dict()["interrupted"] is True
    assert [p.value for p in cut.points] == [p.value for p in power_sweep.points[:2]]
    assert [p.status for p in cut.points] == [p.status for p in power_sweep.points[:2]]
