"""The DLRM MIP's added rows (formulations/dlrm.md §3.1-3.2) cut off no design up to symmetry:
every feasible design, with its GPUs and modules renumbered by their first table, has the same
cost and meets every row of the MIP at the model's phase times; and brute force = HiGHS = CP-SAT
on a whole-table instance (three GPUs, three modules) under both objectives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codesign.kinds.dlrm.formulation import build_dlrm, canonical
from codesign.kinds.registry import load
from codesign.model.dlrm import evaluate, make_design
from codesign.proof.driver import solve

DATA = Path(__file__).resolve().parents[2] / "data"
TINY = DATA / "tiny-dlrm.toml"
WHOLE = DATA / "tiny-dlrm-whole.toml"


def random_designs(pb, rng, count):
    Lc = len(pb.locations)
    for _ in range(count):
        shards = []
        for _t in range(pb.tables):
            options = len(pb.shards) + len(pb.spreads)
            o = int(rng.integers(options))
            if o >= len(pb.shards):
                shards.append([Lc + o - len(pb.shards)])
            else:
                shards.append(list(rng.integers(Lc, size=pb.shards[o])))
        yield make_design(pb, shards)


@pytest.mark.parametrize("source", [TINY, WHOLE, "pf-dlrm-paper", "pf-dlrm-consistent"])
def test_a_renumbered_twin_of_every_design_meets_every_row(source):
    p = load(source)
    pb = p.model
    dm = build_dlrm(pb)
    rng = np.random.default_rng(7)
    checked = cut = 0
    for d in random_designs(pb, rng, 300):
        ev = evaluate(pb, d)
        if not ev.feasible:
            continue
        c = canonical(pb, d)
        twin = evaluate(pb, c)
        assert twin.feasible and twin.iteration_s == pytest.approx(ev.iteration_s, rel=1e-12)
        assert twin.energy_per_sample_J == pytest.approx(ev.energy_per_sample_J, rel=1e-12)
        assert dm.mip.check(dm.encode(c)) == [], d
        assert dm.decode(dm.encode(c)) == c
        cut += any(name.startswith("sym-") for name in dm.mip.check(dm.encode(d)))
        checked += 1
    assert checked >= 50
    assert cut > 0  # the symmetry rows do remove renumbered twins


@pytest.mark.parametrize("metric", ["samples_per_s", "energy_per_sample_J"])
def test_brute_force_equals_both_solvers_with_whole_tables(metric):
    p = load(WHOLE).with_objective(metric)
    bf = p.brute_force()
    assert bf.complete and bf.best is not None
    for solver in ("highs", "cpsat"):
        sol = solve(p, solver=solver)
        assert sol.status == "optimal", (solver, sol.termination)
        assert sol.objective == pytest.approx(bf.best.objective, rel=1e-9), solver
        a = p.assess(p.parse_design(sol.design))
        assert a.feasible and a.objective == pytest.approx(bf.best.objective, rel=1e-9), solver
