"""The benchmark instance generator, the decomposed bound presolve and the fast evaluator.

The presolve (``solve_instance(decompose=True)``, the default) must not change any optimum:
it is compared with the MIP alone (``decompose=False``) and with brute force. The fast
evaluator must agree with the model's ``eval_form``; the blocked skyline with the plain one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from codesign.backends import available_solvers
from codesign.kinds.grid.formulation import build, nondominated
from codesign.kinds.grid.generate import HW_LEVELS, generate, scaled_instance
from codesign.kinds.grid.space import brute_force, build_tables, fast_eval_form, space_size
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.evaluate import eval_form, workload_forms
from codesign.proof.driver import solve_instance

SOLVERS = available_solvers()


def _agree(a, b, rtol=1e-9):
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def test_generated_instances_grow_and_validate():
    sizes = [space_size(generate(w, 1)) for w in (1, 2, 3)]
    assert sizes[0] == math.prod(len(v) for v in HW_LEVELS[1].values()) * 5 * 4 * 7
    assert sizes[0] < sizes[1] < sizes[2]
    assert space_size(generate(8, 1)) > 1e20
    raw = scaled_instance(2, 0, objective="energy_per_token_J")
    assert raw["objective"]["metric"] == "energy_per_token_J" and len(raw["workloads"]) == 2
    with pytest.raises(ValueError):
        scaled_instance(0)


@pytest.mark.parametrize("objective", ["tokens_per_s", "energy_per_token_J"])
def test_generated_two_workloads_presolve_equals_brute_force(objective):
    raw = scaled_instance(2, 0, objective=objective)
    hw = raw["hardware"]["decisions"]  # a smaller grid keeps the test fast
    hw.update(tsv_count=[8192, 65536], tsv_pitch_um=[9.0, 40.0], sram_MiB=[1.0, 4.0], clock_GHz=[1.2, 1.75, 2.2])
    raw["baseline"].update(tsv_count=8192, tsv_pitch_um=40.0, sram_MiB=1.0, clock_GHz=1.2)
    inst = instance_from_data(raw)
    bf = brute_force(inst)
    assert bf.feasible
    for solver in SOLVERS:
        sol = solve_instance(inst, solver=solver)
        assert sol.status == "optimal" and _agree(sol.objective, bf.objective), (solver, sol.objective, bf.objective)
        assert sol.mip["pruned"].get("hardware-bound", 0) > 0


@pytest.mark.parametrize("name", ["tiny-3d-llama8b"])
def test_presolve_keeps_the_optimum(name):
    inst = load_instance(name)
    for solver in SOLVERS:
        on = solve_instance(inst, solver=solver)
        off = solve_instance(inst, solver=solver, decompose=False)
        assert on.status == off.status == "optimal"
        assert _agree(on.objective, off.objective)


def test_build_default_keeps_every_design():
    """export and explain call build() without the presolve: the MIP covers every design."""
    inst = load_instance("small-3d-llama8b")
    assert "hardware-bound" not in build(inst).pruned
    assert "hardware-bound" in build(inst, decompose=True).pruned


def test_fast_eval_form_equals_model():
    inst = load_instance("deepstack-qwen3-235b")
    t = build_tables(inst)
    w = inst.workloads[0]
    st = t.scheds[w.name]
    rows = np.random.default_rng(1).integers(0, t.hw.size, size=200)
    for metric, form in workload_forms(st, w.precision).items():
        a = eval_form(form, t.hw, st, hw_rows=rows)
        b = fast_eval_form(form, t.hw, st, rows)
        assert np.array_equal(np.isfinite(a), np.isfinite(b)), metric
        ok = np.isfinite(a)
        assert np.allclose(a[ok], b[ok], rtol=1e-12, atol=0), metric


def _plain_skyline(f):
    keep = np.zeros(len(f), dtype=bool)
    order = np.lexsort(f.T[::-1])
    sky = []
    for i in order:
        if any(np.all(s <= f[i]) for s in sky):
            continue
        sky.append(f[i])
        keep[i] = True
    return keep


def test_blocked_skyline_equals_plain():
    rng = np.random.default_rng(0)
    costs = rng.integers(0, 6, size=(700, 3)).astype(float)
    gains = rng.integers(0, 4, size=(700, 1)).astype(float)
    got = nondominated(costs, gains, block=64)
    assert np.array_equal(got, _plain_skyline(np.column_stack([costs, -gains])))
    c2, g2 = rng.random((500, 3)), rng.random((500, 1))
    plain = _plain_skyline(np.column_stack([c2, -g2]))
    assert plain.sum() > 5
    assert np.array_equal(nondominated(c2, g2, block=32), plain)
    assert nondominated(c2, g2, max_keep=5) is None


@pytest.mark.parametrize("name", ["deepstack-qwen3-235b", "pf-llama405b-paper", "dgx-llama70b-chip-choice"])
def test_fast_eval_form_scratch_and_column_cache_equal_model(name):
    """The in-place evaluation (one scratch array, whole columns cached across chunks) gives
    the model's values for every metric and constraint form, chunk by chunk (0·inf = 0 kept)."""
    from codesign.model.evaluate import constraints

    inst = load_instance(name)
    t = build_tables(inst)
    hcols: dict = {}
    rows = np.arange(t.hw.size)
    for w in inst.workloads:
        st = t.scheds[w.name]
        forms = list(workload_forms(st, w.precision).values())
        forms += [f for c in constraints(inst, t.hw, t.scheds) if c.workload == w.name for _, f in c.lhs]
        for form in forms:
            for chunk in np.array_split(rows, 3):
                a = eval_form(form, t.hw, st, hw_rows=chunk)
                b = fast_eval_form(form, t.hw, st, chunk, hcols)
                assert np.array_equal(b, fast_eval_form(form, t.hw, st, chunk))
                assert np.array_equal(np.isfinite(a), np.isfinite(b))
                ok = np.isfinite(a)
                assert np.allclose(a[ok], b[ok], rtol=1e-12, atol=0)
    assert hcols  # the cache was used
