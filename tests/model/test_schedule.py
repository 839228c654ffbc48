"""The attention priced apart in a stage step (model.md eq. 2.15m): its FLOPs at its own precision
against the softmax's exponentials on the special-function units, derived by hand; the MIP
compiles the max exactly (brute force = HiGHS = CP-SAT)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from codesign.catalog import load_chip
from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.calibration import shipped
from codesign.model.evaluate import attention_of, eval_form, evaluate, stage_form
from codesign.model.hardware import hardware_table
from codesign.model.schedule import schedule_table

from .columns import Cols


def _chip_choice(**changes):
    """dgx-llama70b-chip-choice (Llama-3.1-70B FP8 on 8 H100/H200/B200) with workload fields and
    one-value decisions changed."""
    raw = copy.deepcopy(load_instance("dgx-llama70b-chip-choice").raw)
    w = raw["workloads"][0]
    decisions = changes.pop("decisions", None)
    w.update(changes)
    if decisions is not None:
        w["decisions"] = {k: [v] for k, v in decisions.items() if k != "chip"}
        raw["hardware"]["decisions"]["chip"] = [decisions["chip"]]
        raw["baseline"] = dict(decisions)
    w.pop("tpot_slo_ms", None)
    return instance_from_data(raw)


def test_the_exponential_rate_is_a_hardware_column():
    """s per exponential = 1 / (rate x compute efficiency): B200 148 SMs x 1.86 GHz x 16 =
    4,404.48e9 per second; the 3D family's tiles have no rate (0: no limit)."""
    assert load_chip("b200").sfu_exp_G_per_s == 4404.48
    hw = hardware_table(_chip_choice(decisions={"chip": "b200", "tp": 8, "pp": 1, "batch": 64}))
    eff = shipped().for_chip("b200").compute_efficiency
    assert hw.features["s_per_exp"][0] == pytest.approx(1.0 / (4404.48e9 * eff), rel=1e-14)
    assert hw.features["s_per_exp_seq"][0] == pytest.approx(1.0 / (4404.48e9 * eff), rel=1e-14)  # o = 0
    tiles = hardware_table(load_instance("small-3d-llama8b"))
    assert np.all(tiles.features["s_per_exp"] == 0.0)


def test_the_schedule_counts_one_ranks_attention():
    """Llama-3.1-70B (80 layers, 64 query heads of 128) at TP 4, PP 2, batch 16: a micro-batch of 8
    sequences on 40 layers, its heads split 4 ways. Prefill of 1,000 tokens: 500,500 pairs a layer,
    exponentials 8 x 40 x 64 x 500,500 / 4 = 2,562,560,000; score FLOPs 4 x 64 x 128 = 32,768 a
    pair, 8 x 40 x 500,500 x 32,768 / 4 = 1,312,030,720,000. Decode at 1,000 + 1,000 / 2 = 1,500
    cached tokens: 1,501 pairs, 8 x 40 x 64 x 1,501 / 4 = 7,685,120 exponentials."""
    inst = _chip_choice(decisions={"chip": "b200", "tp": 4, "pp": 2, "batch": 16})
    t = schedule_table(inst, "main")
    f = {k: float(v[0]) for k, v in t.features.items()}
    assert t.attention_precision == "fp8"
    assert f["prefill.exps"] == 2_562_560_000
    assert f["prefill.flops_attn"] == pytest.approx(1_312_030_720_000, rel=1e-15)
    assert f["prefill.flops_other"] + f["prefill.flops_attn"] == pytest.approx(f["prefill.flops"], rel=1e-15)
    assert f["decode.exps"] == 7_685_120
    assert attention_of(t) == ("fp8", True)


def test_without_an_exponential_rate_the_step_keeps_one_compute_term():
    """The 3D tiles (FP8 weights and cache): no rate, the attention at the weights' precision: no
    columns apart, the form of eq. 5.3 as before."""
    t = schedule_table(load_instance("small-3d-llama8b"), "main")
    assert t.attention_precision is None and attention_of(t) is None
    assert not any(k.endswith((".exps", ".flops_attn")) for k in t.features)


def test_the_exponentials_bind_on_b200_and_tie_on_h100():
    """At head_dim 128 a (query, key) pair and head takes 4 x 128 = 512 FLOPs of score and one
    exponential: at FP8 the exponentials take 4,500e12 / 512 / 4,404.48e9 = 1.99548 x the FLOPs'
    time on the B200 and 1,978.9e12 / 512 / 3,864.96e9 = 1.00002 x on the H100 (one efficiency
    divides both). The prefill step's compute is the other FLOPs plus the larger."""
    for chip, ratio in (("b200", 1.995482), ("h100-sxm", 1.000020)):
        inst = _chip_choice(input_tokens=8192, decisions={"chip": chip, "tp": 8, "pp": 1, "batch": 16})
        m = evaluate(inst, inst.baseline()).workload_metrics["main"]
        assert m["prefill_step.exponentials_s"] / m["prefill_step.attention_s"] == pytest.approx(ratio, abs=1e-6)
        rest = sum(v for k, v in m.items() if k.startswith("prefill_step.") and k.endswith("_s")
                   and k.split(".")[1] not in ("attention_s", "exponentials_s") and "overlapped" not in k)
        assert m["prefill_step_s"] == pytest.approx(rest + m["prefill_step.exponentials_s"], rel=1e-12)


_ONE = [1.0]
_HW = {"one": _ONE, "s_per_flop_ovl@fp8": [0.5], "s_per_flop_seq@fp8": [0.5], "s_per_exp_ovl": [0.5],
       "s_per_exp_seq": [0.5], "s_per_B_local_ovl": [0.5], "s_per_B_local_seq": [0.5], "s_per_B_pool_ovl": [0.5],
       "s_per_B_pool_seq": [0.5], "reduce_ring": _ONE, "reduce_in_switch": [0.0], "s_per_B_scale_up": _ONE,
       "s_per_B_scale_up_cross": _ONE, "s_per_step_scale_up": _ONE, "s_per_B_scale_out": _ONE,
       "s_per_step_scale_out": _ONE, "s_per_layer": _ONE, "s_per_collective_step": _ONE, "s_per_sequence": [0.5]}


def test_the_form_takes_the_larger_unit_by_hand():
    """Stream overlap o = 1/2, every time per unit 1 (so the columns are seconds), other FLOPs 4 s,
    attention FLOPs 2 s, exponentials 6 s (row 1) or 1 s (row 2), local memory 6 s, no pool,
    overhead 1 s, links 3 s, host 1/2 s; compute = 4 + max(2, 6) = 10 or 4 + max(2, 1) = 6:

    row 1: 1/2 max(10, 6) + 1/2 (10 + 6) + 1 + 3 + 1/2 = 5 + 8 + 4.5 = 17.5 s
    row 2: 1/2 max(6, 6) + 1/2 (6 + 6) + 4.5 = 13.5 s
    two-batch (eq. 5.3a), row 1, links 3 s: chip = max(10 + 1/2 (6) + 1, 1/2 (6) + 1/2 (16) + 1)
    = max(14, 12) = 14, the step max(14, 3) + 1/2 = 14.5 s; links 20 s: 20.5 s."""
    zero = [0.0, 0.0]
    st = Cols({"one": [1.0, 1.0], "decode.flops_other": [4.0, 4.0], "decode.flops_attn": [2.0, 2.0],
                "decode.exps": [6.0, 1.0], "decode.bytes_local": [6.0, 6.0], "decode.bytes_pool": zero,
                "decode.bytes_scale_up": [3.0, 3.0], "decode.bytes_scale_up_in_switch": zero,
                "decode.bytes_scale_up_cross": zero, "decode.steps_scale_up": zero, "decode.bytes_scale_out": zero,
                "decode.steps_scale_out": zero, "decode.layers": [1.0, 1.0], "decode.collective_steps": zero,
                "decode.sequences": [1.0, 1.0]})
    hw = Cols(_HW)
    form = stage_form("decode", "fp8", "one", attention=("fp8", True))
    assert list(eval_form(form, hw, st)[0]) == [17.5, 13.5]
    tb = Cols({**{k: list(v) for k, v in st.features.items()}, "decode.serial": zero, "decode.two_batch": [1.0, 1.0],
                "decode.bytes_scale_up": [3.0, 20.0], "decode.exps": [6.0, 6.0]})
    two = stage_form("decode", "fp8", "one", two_batch=True, attention=("fp8", True))
    assert list(eval_form(two, hw, tb)[0]) == [14.5, 20.5]
    # without the exponentials the attention's FLOPs add: compute 6, as row 2
    assert eval_form(stage_form("decode", "fp8", "one", attention=("fp8", False)), hw, st)[0][0] == 13.5


def test_long_prompts_brute_force_equals_both_solvers(solvers_match_brute_force):
    """Llama-3.1-70B with 8,192-token prompts on H100 or B200 (the exponentials bind on the B200,
    nearly tie on the H100): brute force over every design equals what HiGHS and CP-SAT prove."""
    raw = copy.deepcopy(load_instance("dgx-llama70b-chip-choice").raw)
    raw["hardware"]["decisions"]["chip"] = ["h100-sxm", "b200"]
    w = raw["workloads"][0]
    w.update(input_tokens=8192, output_tokens=256)
    w.pop("tpot_slo_ms", None)
    w["decisions"] = {"tp": [4, 8], "pp": [1, 2], "batch": [8, 32, 128]}
    raw["baseline"] = {"chip": "h100-sxm", "tp": 8, "pp": 1, "batch": 8}
    assert solvers_match_brute_force(instance_from_data(raw)).feasible


def test_two_batch_with_the_exponentials_brute_force_equals_both_solvers(solvers_match_brute_force):
    """dgx-qwen3-235b-attention-dp with 8,192-token prompts, overlap none or two-batch, on H200 or
    B200: the chip's branches of eq. 5.3a, one per stream and attention unit, compiled exactly."""
    raw = copy.deepcopy(load_instance("dgx-qwen3-235b-attention-dp").raw)
    raw["hardware"]["decisions"]["chip"] = ["h200-sxm", "b200"]
    w = raw["workloads"][0]
    w.update(input_tokens=8192, output_tokens=256)
    w.pop("tpot_slo_ms", None)
    d = w["decisions"]
    d.update(attention_dp=[False], overlap=["none", "two-batch"], tp=[4, 8], pp=[1], batch=[64, 256])
    raw["baseline"] = {**raw["baseline"], "attention_dp": False, "overlap": "none"}
    assert solvers_match_brute_force(instance_from_data(raw)).feasible
