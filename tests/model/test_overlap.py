"""Two-batch compute/communication overlap (model.md eq. 5.3a), derived by hand."""

from __future__ import annotations

import copy

import pytest

from codesign.kinds.grid.spec import instance_from_data, load_instance
from codesign.model.evaluate import eval_form, stage_form
from codesign.model.schedule import schedule_table

from .columns import Cols


def test_the_step_is_the_busier_stream_by_hand():
    """One design with stream overlap o = 1/2, time per FLOP and per byte 1 (so the columns are
    seconds), per-layer overhead 1 s, link time per byte 1 s, host 1/2 s per sequence. Three rows,
    compute 4 s, local memory 6 s, no pool, one sequence:

    serial (eq. 5.3), links 3 s:    1/2 max(4, 6, 0) + 1/2 (4 + 6) + 1 + 3 + 1/2 = 12.5 s
    two-batch, links 3 s:          max(3 + 5 + 1, 3) + 1/2 = 9.5 s (the chip is busier)
    two-batch, links 12 s:         max(9, 12) + 1/2 = 12.5 s (the links are busier)"""
    one = [1.0]
    hw = Cols({"one": one, "s_per_flop_ovl@fp8": [0.5], "s_per_flop_seq@fp8": [0.5], "s_per_B_local_ovl": [0.5],
                "s_per_B_local_seq": [0.5], "s_per_B_pool_ovl": [0.5], "s_per_B_pool_seq": [0.5],
                "reduce_ring": one, "reduce_in_switch": [0.0], "s_per_B_scale_up": one, "s_per_B_scale_up_cross": one,
                "s_per_step_scale_up": one, "s_per_B_scale_out": one, "s_per_step_scale_out": one, "s_per_layer": one,
                "s_per_collective_step": one, "s_per_sequence": [0.5]})
    zero = [0.0, 0.0, 0.0]
    st = Cols({"one": [1.0, 1.0, 1.0], "decode.serial": [1.0, 0.0, 0.0], "decode.two_batch": [0.0, 1.0, 1.0],
                "decode.flops": [4.0] * 3, "decode.bytes_local": [6.0] * 3, "decode.bytes_pool": zero,
                "decode.bytes_scale_up": [3.0, 3.0, 12.0], "decode.bytes_scale_up_in_switch": zero,
                "decode.bytes_scale_up_cross": zero, "decode.steps_scale_up": zero, "decode.bytes_scale_out": zero,
                "decode.steps_scale_out": zero, "decode.layers": [1.0] * 3, "decode.collective_steps": zero,
                "decode.sequences": [1.0] * 3})
    t = eval_form(stage_form("decode", "fp8", "one", two_batch=True), hw, st)[0]
    assert list(t) == [12.5, 9.5, 12.5]
    # without the decision the form is eq. 5.3 as before (the selector columns are not read)
    assert eval_form(stage_form("decode", "fp8", "one"), hw, st)[0][0] == 12.5


def _mixtral(**decisions):
    """Mixtral 8x7B decode on the 3D tiles of deepstack-deepseek-v3-ep, one schedule row."""
    raw = copy.deepcopy(load_instance("deepstack-deepseek-v3-ep").raw)
    w = raw["workloads"][0]
    w["workload"] = "mixtral-8x7b"
    w.pop("tpot_slo_ms", None)
    row = {"tp": 1, "pp": 1, "ep": 1, "batch": 4, "overlap": "none", **decisions}
    w["decisions"] = {k: [v] for k, v in row.items()}
    raw["baseline"] = {**raw["baseline"], **row}
    t = schedule_table(instance_from_data(raw), "main")
    return {k: float(v[0]) for k, v in t.features.items()} if t.size else None


def test_each_half_reads_the_weights_again_by_hand():
    """Mixtral 8x7B, fp8 (1 B per weight, embedding and LM head 2 B), TP 1, four sequences
    decoding, split into two halves of two. Every weight a half touches is read once per half:
    attention 32 x (2 x 4096^2 + 2 x 4096 x 1024) = 1,342,177,280, routers 32 x 4096 x 8 =
    1,048,576, norms 2 x 4096 x 32 + 4096 = 266,240, LM head 32000 x 4096 x 2 B = 262,144,000:
    1,605,636,096 B again. The experts: two halves touch 2 x 8 (1 - (3/4)^2) = 7 experts a layer
    where the whole batch touches 8 (1 - (3/4)^4) = 5.46875: 32 x 1.53125 x 176,160,768 =
    8,631,877,632 B more. The embedding rows, KV cache, activations and logits scale with the
    sequences and add up to the same. FLOPs are linear in the tokens: the same; the kernels of
    each layer launch twice (64 layers' overhead); the host handles the same four sequences."""
    none, tbo = _mixtral(), _mixtral(overlap="two-batch")
    assert tbo["decode.bytes_local"] - none["decode.bytes_local"] == pytest.approx(
        1_605_636_096 + 8_631_877_632, rel=1e-12)
    assert tbo["decode.flops"] == pytest.approx(none["decode.flops"], rel=1e-14)
    assert (tbo["decode.layers"], none["decode.layers"]) == (64, 32)
    assert tbo["decode.sequences"] == none["decode.sequences"] == 4
    assert (tbo["decode.two_batch"], tbo["decode.serial"], none["decode.two_batch"]) == (1, 0, 0)
    # footprints are the whole batch's
    assert tbo["memory_local_B"] == none["memory_local_B"]


def test_a_half_needs_a_sequence():
    assert _mixtral(batch=1, overlap="two-batch") is None
    assert _mixtral(batch=2, overlap="two-batch") is not None


def test_two_batch_hides_the_links_and_brute_force_equals_both_solvers(solvers_match_brute_force):
    """dgx-qwen3-235b-attention-dp with overlap none or two-batch (attention tensor-parallel only):
    brute force over every design equals what HiGHS and CP-SAT prove optimal."""
    raw = copy.deepcopy(load_instance("dgx-qwen3-235b-attention-dp").raw)
    d = raw["workloads"][0]["decisions"]
    d.update(attention_dp=[False], overlap=["none", "two-batch"], tp=[4, 8], pp=[1], batch=[64, 256, 1024])
    raw["baseline"] = {**raw["baseline"], "attention_dp": False, "overlap": "none"}
    best = solvers_match_brute_force(instance_from_data(raw))
    assert best.feasible
