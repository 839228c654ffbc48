"""codesign.kinds.grid.space: the exact size of a design space, the feature tables and the fast
vectorised evaluation brute force enumerates with.

Space sizes by hand (product of every decision's domain size; unset schedule decisions are one
fixed value):
    tiny-3d-llama8b            3 x 2 x 1 x 2 x 2 x 2 = 48 hardware; tp 3 x batch 3 = 9      -> 432
    small-3d-llama8b           7 x 4 x 3 x 5 x 5 x 4 = 8400; tp 4 x pp 2 x batch 7 = 56     -> 470,400
    deepstack-llama70b-decode  9 x 5 x 4 x 7 x 7 x 5 = 44,100; tp 5 x pp 4 x batch 7 = 140  -> 6,174,000
    deepstack-deepseek-v3-ep   44,100; tp 5 x pp 4 x ep 5 x batch 6 = 600                  -> 26,460,000
    deepstack-qwen3-235b       44,100; tp 5 x pp 3 x ep 5 x batch 5 = 375                  -> 16,537,500
    deepstack-multi-workload   7 x 4 x 3 x 5 x 5 x 4 = 8400; llama70b 5x4x6 = 120, llama8b 4x3x6 = 72,
                               qwen30b 4x3x4x6 = 288, rag 5x4x6 = 120, mixtral 288, gpt-oss 288
                               8400 x 120 x 72 x 288 x 120 x 288 x 288 = 208,042,343,792,640,000
    dgx-llama70b-chip-choice   chip 3 x pool_ports 1; tp 4 x pp 4 x batch 8 = 128           -> 384
    dgx-llama70b-power-cap     power_limit_fraction 8; tp 4 x pp 4 x batch 8 = 128          -> 1,024
    dgx-qwen3-235b-attention-dp  chip 3; tp 4 x pp 2 x ep 4 x attention_dp 2 x batch 7 = 448  -> 1,344
    pf-*                       pool_ports 2; tp 4 x pp 4 x batch 6 x weights 2 x kv 2 = 384 -> 768
    pf-llama405b-128gpu(-paper)  pool_ports 2 x appliances 4 x pool_layout 2 x uplink_ports 2 = 32;
                               tp 5 x pp 5 x batch 6 x weights 2 x kv 2 = 600              -> 19,200
"""

from __future__ import annotations

import numpy as np
import pytest

from codesign.kinds.grid.space import brute_force, build_tables, fast_eval_form, space_size
from codesign.kinds.grid.spec import list_instances, load_instance
from codesign.model.evaluate import eval_form, evaluate, workload_forms

HAND_SIZES = {
    "tiny-3d-llama8b": 48 * 9,
    "small-3d-llama8b": 8400 * 56,
    "deepstack-llama70b-decode": 44_100 * 140,
    "deepstack-deepseek-v3-ep": 44_100 * 600,
    "deepstack-qwen3-235b": 44_100 * 375,
    "deepstack-multi-workload": 8400 * 120 * 72 * 288 * 120 * 288 * 288,
    "dgx-llama70b-chip-choice": 3 * 128,
    "dgx-llama70b-power-cap": 8 * 128,
    "dgx-qwen3-235b-attention-dp": 3 * 448,
    "pf-llama405b-consistent": 2 * 384,
    "pf-llama405b-paper": 2 * 384,
    "pf-dense1t-consistent": 2 * 384,
    "pf-dense1t-paper": 2 * 384,
    "pf-llama405b-128gpu": 32 * 600,
    "pf-llama405b-128gpu-paper": 32 * 600,
}
NAMED = list_instances()


def test_every_named_grid_instance_has_a_hand_size():
    assert set(HAND_SIZES) == set(NAMED)


@pytest.mark.parametrize("name", NAMED)
def test_space_size_is_the_product_of_the_domains(name: str) -> None:
    """Counted from the merged file content (hardware.decisions and each workload's decisions;
    anything not listed there is a single value), and by hand."""
    inst = load_instance(name)
    n = 1
    for dom in inst.spec.hardware.decisions.values():
        n *= len(dom)
    for w in inst.spec.workloads:
        for dom in w.decisions.values():
            n *= len(dom)
    assert space_size(inst) == n == HAND_SIZES[name]
    assert isinstance(space_size(inst), int)


def test_exact_integers_past_2_to_the_53():
    assert space_size(load_instance("deepstack-multi-workload")) == 208_042_343_792_640_000


def test_brute_force_of_the_tiny_instance_agrees_with_the_model():
    """The vectorised enumeration's optimum is the model's value of its design, and no design of
    the plain product of domains that the model accepts beats it."""
    import itertools

    inst = load_instance("tiny-3d-llama8b")
    bf = brute_force(inst)
    assert bf.feasible and bf.points <= space_size(inst)
    ev = evaluate(inst, bf.design)
    assert ev.feasible and ev.objective == pytest.approx(bf.objective, rel=1e-12)
    names = [d.name for d in inst.decisions]
    best = max(e.objective for combo in itertools.product(*(d.domain for d in inst.decisions))
               if (e := evaluate(inst, dict(zip(names, combo, strict=True)))).feasible)
    assert best == pytest.approx(bf.objective, rel=1e-12)


def test_tables_hold_only_structurally_valid_layouts():
    inst = load_instance("tiny-3d-llama8b")
    t = build_tables(inst)
    assert t.hw.size == 48
    assert t.structural_size == t.hw.size * t.scheds["main"].size <= space_size(inst)


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


@pytest.mark.parametrize("name", ["deepstack-qwen3-235b", "pf-llama405b-paper", "dgx-llama70b-chip-choice"])
def test_fast_eval_form_scratch_and_column_cache_equal_model(name):
    """The in-place evaluation (one scratch array, whole columns cached across chunks) gives
    the model's values for every metric and constraint form, chunk by chunk (0·inf = 0 kept)."""
    from codesign.model.evaluate import constraints

    inst = load_instance(name)
    t = build_tables(inst)
    hcols: dict = {}
    rows = np.arange(t.hw.size)
    if len(rows) > 3000:  # deepstack-qwen3-235b's 44,100 designs: every 15th (the full table took 14 s)
        rows = rows[::15]
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
