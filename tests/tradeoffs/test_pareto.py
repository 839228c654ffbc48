"""codesign.tradeoffs.pareto: the exact frontier between two metrics.

Reference: every design of tiny-3d-llama8b (432 points) evaluated by the model one by one, and the
non-dominated set of their (x, y) computed by the dominance written out here (tokens/s maximised,
everything else minimised); the ε-constraint frontier (each point a proven solve) must be exactly
that set, for every metric pair below.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.mapping.brute import compositions
from codesign.kinds.mapping.generate import generate_mapping
from codesign.kinds.registry import from_data, load
from codesign.model.mapping import assess, attach_matrix, block_counts
from codesign.tradeoffs import pareto
from codesign.tradeoffs.pareto import STEP_RTOL, frontier, value_of

TINY = "tiny-3d-llama8b"


#: by hand from instances/tiny-3d-llama8b.toml: 3 x 2 x 1 x 2 x 2 x 2 = 48 hardware designs (dram_layers,
#: tsv_count, tsv_pitch_um, compute_area_mm2, clock_GHz, sram_MiB) x 3 tp x 3 batch
TINY_DESIGNS = 48 * 9
#: the one metric a frontier maximises; every other is minimised
MAXIMISED = {"tokens_per_s"}


@pytest.fixture(scope="module")
def every_feasible_design():
    p = load(TINY)
    decs = p.decisions()
    out, seen = [], 0
    for values in itertools.product(*(d.domain for d in decs)):
        seen += 1
        a = p.assess(p.parse_design(dict(zip([d.name for d in decs], values, strict=True))))
        if a.feasible:
            out.append({**a.metrics, "dram_layers": a.design["dram_layers"]})  # a decision, in the design
    assert seen == TINY_DESIGNS
    # the constraints leave out some designs, not all: the frontier is of a filtered set (how many
    # are feasible is the model's figure, not one to copy here)
    assert 0 < len(out) < TINY_DESIGNS
    return out


def nondominated(points, x, y):
    def better_or_equal(m, u, v):
        return u >= v if m in MAXIMISED else u <= v

    return {(a, b) for a, b in points
            if not any(better_or_equal(x, c, a) and better_or_equal(y, d, b) and (c, d) != (a, b) for c, d in points)}


def rounded(points):
    return {(round(a, 6), round(b, 9)) for a, b in points}


@pytest.mark.parametrize("y", ["energy_per_token_J", "power_W", "area_mm2", "ttft_s", "tpot_s", "system_power_W",
                               "dram_layers"])
def test_the_frontier_is_the_enumerated_one(y, every_feasible_design):
    f = frontier(load(TINY), "tokens_per_s", y)
    expected = nondominated([(m["tokens_per_s"], value_of(y, m)) for m in every_feasible_design], "tokens_per_s", y)
    assert f.complete
    assert rounded((p.x, p.y) for p in f.points) == rounded(expected)
    assert all(p.status == "optimal" for p in f.points)


def test_the_roles_swap_when_only_y_can_be_optimised(every_feasible_design):
    """power_W is no objective of a grid instance: tokens_per_s (y here) is optimised under a
    budget on power_W, and the frontier is the same set."""
    f = frontier(load(TINY), "power_W", "tokens_per_s")
    assert f.driver == "tokens_per_s"
    expected = nondominated([(value_of("power_W", m), m["tokens_per_s"]) for m in every_feasible_design],
                            "power_W", "tokens_per_s")
    assert rounded((p.x, p.y) for p in f.points) == rounded(expected)


def test_max_points_stops_early_and_bounds_the_rest(every_feasible_design):
    """After 4 points the unexplored designs (power below the 4th point's) have tokens/s at most
    the 4th point's, as the statement says, by enumeration."""
    f = frontier(load(TINY), "tokens_per_s", "power_W", max_points=4)
    assert not f.complete and len(f.points) <= 4 and "incomplete" in f.statement
    last_power = min(p.y for p in f.points)
    last_tps = min(p.x for p in f.points)
    below = [m for m in every_feasible_design if value_of("power_W", m) < last_power * (1 - STEP_RTOL)]
    assert below and max(m["tokens_per_s"] for m in below) <= last_tps * (1 + 1e-9)


#: a mapping of 4 layers on 2 devices with one module and a host tier: 248,832 designs
SMALL_MAPPING = dict(devices=2, modules=1, layers=4, ports=1, host_GiB=16, weights=("local", "host", "pool"),
                     kv=("local", "pool"))


def every_feasible_mapping(p):
    """(tokens/s, energy per token, tpot) of every feasible per-layer design, by the model's
    vectorised evaluation (every partition, attachment and tier of every layer)."""
    m = p.model
    w_all = np.array(list(itertools.product(m.weight_tiers, repeat=m.layers)))
    k_all = np.array(list(itertools.product(m.kv_tiers, repeat=m.layers)))
    w, k = np.repeat(w_all, len(k_all), axis=0), np.tile(k_all, (len(w_all), 1))
    out = []
    for parts in compositions(m.layers, m.stages):
        cw, ck = block_counts(m, parts, w, k)
        for attach in itertools.product(*(m.attach_options(d) for d in range(m.stages))):
            a = assess(m, np.array(parts), cw, ck, attach_matrix(m, attach))
            ok = a.feasible
            out += zip((m.micro_batch / a.period_s[ok]).tolist(), a.energy_per_token_J[ok].tolist(),
                       (m.stages * a.period_s[ok]).tolist(), strict=True)
    return out


@pytest.mark.parametrize(("x", "y"), [("tokens_per_s", "energy_per_token_J"), ("energy_per_token_J", "tokens_per_s"),
                                      ("tpot_s", "energy_per_token_J"), ("time_per_token_s", "energy_per_token_J")])
def test_a_mapping_frontier_is_the_enumerated_one(x, y):
    """Every design of a small mapping enumerated (248,832 designs):
    the frontier is the non-dominated set, whichever metric is optimised (tokens/s ties broken by
    the tie-breaking solves)."""
    p = from_data(generate_mapping(**SMALL_MAPPING))
    col = {"tokens_per_s": 0, "energy_per_token_J": 1, "tpot_s": 2, "time_per_token_s": 3}
    points = [(*v, 1.0 / v[0]) for v in every_feasible_mapping(p)]
    expected = nondominated({(v[col[x]], v[col[y]]) for v in points}, x, y)
    assert len(expected) >= 2  # a trade-off, not one design best in both
    f = frontier(p, x, y)
    assert f.complete and all(q.status == "optimal" for q in f.points)
    assert rounded((q.x, q.y) for q in f.points) == rounded(expected)


def test_tie_breaking_solves_keep_the_frontier_exact(monkeypatch):
    """Optimising tokens/s on the small mapping (pareto optimises energy there: tokens/s ties), the
    tie-breaking solves run and the frontier is still the enumerated one."""
    monkeypatch.setattr(pareto, "_check", lambda problem, x, y: "tokens_per_s")
    p = from_data(generate_mapping(**SMALL_MAPPING))
    f = frontier(p, "tokens_per_s", "energy_per_token_J")
    expected = nondominated({v[:2] for v in every_feasible_mapping(p)}, "tokens_per_s", "energy_per_token_J")
    assert f.driver == "tokens_per_s" and f.tiebreak_solves > 0 and f.complete
    assert rounded((q.x, q.y) for q in f.points) == rounded(expected)


def test_bad_metrics_are_refused():
    p = load(TINY)
    with pytest.raises(InputError, match="did you mean 'power_W'"):
        frontier(p, "tokens_per_s", "powr_W")
    with pytest.raises(InputError, match="two different metrics"):
        frontier(p, "power_W", "power_W")
    with pytest.raises(InputError, match="neither metric"):
        frontier(p, "power_W", "area_mm2")
    with pytest.raises(InputError, match="placement instances do not take"):
        frontier(load("tiny-placement-mixtral"), "tokens_per_s", "energy_per_token_J")
    with pytest.raises(InputError, match="not a metric of mapping instances"):
        frontier(load("tiny-pf-mapping"), "tokens_per_s", "power_W")


def test_the_command_prints_the_points_and_writes_the_plot(cli, tmp_path, every_feasible_design):
    png = tmp_path / "f.png"
    r = cli("pareto", TINY, "--x", "tokens_per_s", "--y", "area_mm2", "--plot", png, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    expected = nondominated([(m["tokens_per_s"], m["area_mm2"]) for m in every_feasible_design], "tokens_per_s", "area_mm2")
    assert d["complete"] is True and rounded((q["x"], q["y"]) for q in d["points"]) == rounded(expected)
    assert set(d["points"][0]) == {"x", "y", "status", "design", "metrics"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ctrl_c_keeps_the_points_proven_before_it(monkeypatch):
    real, calls = pareto.solve, []

    def interrupted_third(problem, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(problem, **kw)

    monkeypatch.setattr(pareto, "solve", interrupted_third)
    f = frontier(load("tiny-3d-llama8b"), "tokens_per_s", "power_W")
    full = frontier(load("tiny-3d-llama8b"), "tokens_per_s", "power_W")
    assert f.interrupted and not f.complete and "Ctrl-C" in f.statement
    assert 1 <= len(f.points) <= 2 and f.as_dict()["interrupted"] is True
    for p in f.points:  # each kept point is one of the complete frontier's
        assert any(p.x == pytest.approx(q.x, rel=1e-9) and p.y == pytest.approx(q.y, rel=1e-9) for q in full.points)
