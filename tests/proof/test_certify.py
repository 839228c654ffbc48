"""codesign.proof.certify: "no feasible design beats yours by more than G %", with brute force as
the reference.

Gap 0 at the optimum; (f* - f(d))/|f(d)| for a maximised metric and (f(d) - f*)/|f(d)| for a
minimised one at a feasible, worse design; an infeasible design lists exactly its violated
constraints; an infeasible instance has no bound; a stored solution is reused only when its
instance hash matches; a design that beats the bound is a ModelError.
"""

from __future__ import annotations

import json

import pytest

from codesign.errors import ModelError
from codesign.proof import records
from codesign.proof.certify import build, certify
from codesign.proof.driver import solve
from codesign.proof.tolerances import GAP_TOL

TINY = "tiny-3d-llama8b"
SMALL = "small-3d-llama8b"


@pytest.fixture(scope="module")
def tiny(named):
    return named(TINY)


@pytest.fixture(scope="module")
def tiny_opt(tiny, brute):
    return brute(tiny).best


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


@pytest.mark.parametrize("name", [TINY, SMALL, "tiny-pf-mapping", "tiny-placement-mixtral"])
def test_the_optimal_design_has_gap_zero(name, named, brute):
    p = named(name)
    best = brute(p).best
    cert = certify(p, best.design)
    assert cert.feasible and cert.violations == []
    assert cert.sense == p.sense and cert.objective_metric == p.metric
    assert rel_diff(cert.objective, best.objective) <= 1e-12
    assert rel_diff(cert.bound, best.objective) <= (1e-9 if p.kind == "grid" else 1e-6)
    assert cert.gap == pytest.approx(0.0, abs=GAP_TOL)
    assert cert.bound_source.source == "solve" and cert.bound_source.status == "optimal"
    assert cert.instance_hash == p.content_hash
    assert "the design is optimal" in cert.statement
    json.dumps(cert.as_dict())


@pytest.mark.parametrize(
    ("which", "change"),
    [
        (TINY, {"batch": 32}),
        (TINY, {"tp": 4, "batch": 8}),
        (TINY, {"sram_MiB": 0.5}),
        (TINY, {"compute_area_mm2": 40.0, "tp": 2}),  # at TP 1 the smaller die holds too little KV
        (SMALL, {"batch": 64}),
        (SMALL, {"tp": 2}),
        (SMALL, {"dram_layers": 4, "tp": 4}),
    ],
)
def test_a_worse_design_of_a_maximised_metric(which, change, named, brute):
    p = named(which)
    best = brute(p).best
    design = {**best.design, **change}
    a = p.assess(p.parse_design(design))
    assert a.feasible and a.objective < best.objective  # a feasible, worse design
    cert = certify(p, design)
    assert cert.feasible and cert.violations == []
    assert cert.objective == pytest.approx(a.objective, rel=1e-12)
    assert cert.gap == pytest.approx((best.objective - a.objective) / abs(a.objective), rel=1e-9, abs=1e-12)
    assert "no feasible design beats this one by more than" in cert.statement


@pytest.mark.parametrize("change", [{"batch": 32}, {"compute_area_mm2": 40.0, "tp": 2}, {"dram_layers": 4, "tp": 4}])
def test_a_worse_design_of_a_minimised_metric(change, tiny, brute):
    p = tiny.with_objective("energy_per_token_J")
    best = brute(p).best
    design = {**best.design, **change}
    a = p.assess(p.parse_design(design))
    assert a.feasible and a.objective > best.objective
    cert = certify(p, design)
    assert cert.sense == "min" and cert.objective_metric == "energy_per_token_J"
    assert cert.objective == pytest.approx(a.objective, rel=1e-12)
    assert cert.bound == pytest.approx(best.objective, rel=1e-9)
    assert cert.gap == pytest.approx((a.objective - best.objective) / abs(a.objective), rel=1e-9, abs=1e-12)


def test_a_worse_mapping_design(named, brute):
    """All layers local, two stages of 2: tokens/s is maximised, the gap is (f* - f(d))/f(d)."""
    p = named("tiny-pf-mapping")
    design = {"layers_per_stage": [2, 2], "weights": ["local"] * 4, "kv": ["local"] * 4, "attach": [[], []]}
    a = p.assess(p.parse_design(design))
    best = brute(p).best
    cert = certify(p, design)
    assert cert.feasible and cert.objective == pytest.approx(a.objective, rel=1e-12)
    assert cert.bound == pytest.approx(best.objective, rel=1e-6)
    assert cert.gap == pytest.approx((cert.bound - cert.objective) / cert.objective, rel=1e-12)


def test_an_infeasible_design_lists_exactly_the_violated_budgets(tiny, tiny_opt, brute):
    m = tiny.assess(tiny_opt.design).metrics
    assert m["power_W"] > 60 and m["area_mm2"] > 100 and tiny_opt.design["dram_layers"] <= 8
    p = tiny.with_budgets(["power_W <= 60", "area_mm2 <= 100", "dram_layers <= 8"])
    cert = certify(p, tiny_opt.design)
    assert not cert.feasible and cert.gap is None
    assert [r.name for r in cert.audit if not r.ok] == ["budget[cli-1]", "budget[cli-2]"]
    assert [v.split(":")[0] for v in cert.violations] == ["budget[cli-1]", "budget[cli-2]"]
    assert "budget[cli-1]" in cert.statement and "budget[cli-2]" in cert.statement
    assert "budget[cli-3]" not in cert.statement
    audit = {r.name: r for r in cert.audit}
    assert audit["budget[cli-1]"].ok is False and audit["budget[cli-3]"].ok is True
    # the bound is still the optimum under the budgets
    assert rel_diff(cert.bound, brute(p).best.objective) <= 1e-9


def test_an_infeasible_design_by_memory(tiny, tiny_opt):
    cert = certify(tiny, {**tiny_opt.design, "dram_layers": 2, "tp": 1, "batch": 128})
    assert not cert.feasible and cert.gap is None
    assert [r.name for r in cert.audit if not r.ok] == ["memory-capacity-local[main]"]


def test_an_infeasible_instance_has_no_bound(tiny, tiny_opt):
    p = tiny.with_budgets(["energy_per_token_J <= 0.0048"])
    cert = certify(p, tiny_opt.design)
    assert not cert.feasible and [r.name for r in cert.audit if not r.ok] == ["budget[cli-1]"]
    assert cert.bound is None and cert.gap is None
    assert cert.bound_source.status == "infeasible"


def test_a_partial_design_keeps_the_baselines_other_values(tiny):
    cert = certify(tiny, {"batch": 32})
    assert cert.design == {**tiny.baseline(), "batch": 32}


def test_a_stored_solution_is_reused_only_when_its_hash_matches(tmp_path, tiny, tiny_opt, brute):
    stored, _ = records.save(solve(tiny), tmp_path)
    design = {**tiny_opt.design, "batch": 32}
    f_d = tiny.assess(design).objective

    cert = certify(tiny, design, solutions=tmp_path)
    assert cert.bound_source.source == f"stored solution {stored}"
    assert cert.bound_source.solution_hash is not None
    assert cert.gap == pytest.approx((tiny_opt.objective - f_d) / f_d, rel=1e-9)

    # a --budget changes the instance: the stored solution is not reused (even a slack budget)
    slack = certify(tiny.with_budgets(["power_W <= 1000"]), design, solutions=tmp_path)
    assert slack.bound_source.source == "solve"
    assert slack.gap == pytest.approx((tiny_opt.objective - f_d) / f_d, rel=1e-9)
    # a binding budget: the bound is the budgeted optimum
    capped = tiny.with_budgets(["power_W <= 60"])
    binding = certify(capped, design, solutions=tmp_path)
    assert binding.bound_source.source == "solve"
    assert rel_diff(binding.bound, brute(capped).best.objective) <= 1e-9

    # a stored solution whose hash does not match is ignored
    data = json.loads(stored.read_text())
    data["instance_hash"] = "0" * 64
    stored.write_text(json.dumps(data))
    assert certify(tiny, design, solutions=tmp_path).bound_source.source == "solve"


def test_a_design_that_beats_the_bound_means_the_bound_is_wrong(tiny, tiny_opt):
    a = tiny.assess(tiny_opt.design)
    src = records.BoundSource(source="forged", status="optimal")
    with pytest.raises(ModelError, match="beats the proven bound"):
        build(tiny, a, tiny_opt.objective * 0.99, src)
    # a tie within the tolerance the bound was proved to is gap 0
    assert build(tiny, a, tiny_opt.objective * (1 - 1e-9), src).gap == 0.0


def test_a_time_limited_bound_has_no_witness(tiny, tiny_opt):
    """A solve stopped by its limit gives a valid, looser certificate whose bound no design
    derives."""
    cert = certify(tiny, {**tiny_opt.design, "batch": 32}, time_limit=1e-9)
    src = cert.bound_source
    if src.status == "feasible":
        assert src.witness is None
        assert cert.bound is None or cert.bound >= tiny_opt.objective * (1 - 1e-9)
