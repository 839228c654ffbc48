"""Two rules of TensorRT-LLM's TensorRT flow that the validation measures as proposals
(VALIDATION.md §6.4, ``benchmarks/engine_rules.py``); the model itself keeps neither.

Hand-derived figures:

* the dynamic batch-size tuner (``DynamicBatchConfig::kDefaultBatchSizeTable`` = (144, 128),
  (336, 256), (672, 512), (832, 768), (1280, 1024), (1664, 1536); beyond the table, a capacity
  within 128 above a multiple of 512 is rounded down to it): a KV cache that holds 626 sequences
  runs 512, one of 682 runs 682, 1,600 -> 1,536 (the table), 1,700 -> 1,700 (1,536 + 164), 2,100 -> 2,048 (2,048 + 52),
  2,200 -> 2,200 (2,048 + 152), 100 -> 100 (the table's 128 is more than the cache holds);
* the replicated embedding table: Llama 3.1 70B's 128,256 x 8,192 = 1,050,673,152 parameters,
  2 B each in FP16, are 2,101,346,304 B whole on every rank instead of 1/TP of them: + 1,050,673,152 B
  per device at TP 2, + 1,838,678,016 B (7/8 of it) at TP 8; at TP 1 nothing changes; with PP 2 the
  first stage holds the whole table, the last one 1/TP of the LM head, so the heavier end at TP 2
  is the embedding's 2,101,346,304 B instead of 1,050,673,152 B.
"""

from __future__ import annotations

import math

import pytest

from codesign import validate as V


@pytest.mark.parametrize(
    ("capacity", "runtime"),
    [(100, 100), (130, 128), (143, 128), (144, 144), (300, 256), (626, 512), (682, 682), (800, 768),
     (1200, 1024), (1600, 1536), (1700, 1700), (2100, 2048), (2200, 2200), (4700, 4608)],
)
def test_runtime_batch_follows_the_engine_table(capacity, runtime):
    assert V.runtime_batch(capacity) == runtime


def _row(**kw) -> V.Row:
    base = dict(id="e1", model="llama-3.1-70b", gpu="h100-sxm", num_gpus=8, tp=8, pp=1, ep=1, attention_dp=1,
                precision="fp16", isl=128, osl=2048, concurrency=None, metric="output_tokens_per_s", value=7606.0)
    base.update(kw)
    return V.Row(**base)


def test_runtime_batch_table_lowers_the_memory_batch_only_in_the_variant():
    r = _row()
    fp = V.footprint(r)
    memory = V.batch_from(r, fp, None, None, requests=False)
    # the memory rule by hand at the shipped calibration, the row's engine unknown: each sequence's
    # own decoding state (eq. 4.14b; 4 x 128,256 x 4 + 128,256 x 4 + 65,536 + 40 x 2,176 B per TP
    # rank) next to its KV claim, W + b (KV / f + s) <= u C - R (641 sequences; 659 without s)
    assert fp.engine_state_B == 0 and fp.state_per_sequence_B == 2_717_696
    per_sequence = fp.kv_per_sequence_B / fp.kv_free_fraction + 2_717_696
    assert memory == math.floor((fp.usable_B - fp.weights_B) / per_sequence)
    assert V.runtime_batch(memory) < memory  # the table lowers it (641 -> 512: c < 672 -> 512)
    assert V.batch_from(r, fp, None, None, requests=False, table=True) == V.runtime_batch(memory)


def _weights(variant: V.Variant, **kw) -> float:
    r = _row(**kw)
    return V.evaluate_row(r, 8, variant).workload_metrics["main"]["weights_per_device_B"]


@pytest.mark.parametrize(("tp", "pp", "extra_B"), [(1, 1, 0), (2, 1, 1_050_673_152), (8, 1, 1_838_678_016),
                                                    (2, 2, 1_050_673_152)])
def test_replicated_embedding_adds_the_rest_of_the_table_to_every_rank(tp, pp, extra_B):
    replicated = V.Variant("replicated-embedding", replicated_embedding=True)
    split = _weights(V.MODEL, tp=tp, pp=pp, num_gpus=tp * pp)
    whole = _weights(replicated, tp=tp, pp=pp, num_gpus=tp * pp)
    assert whole - split == pytest.approx(extra_B, abs=1.0)
    # the switch is restored on leaving the variant
    assert _weights(V.MODEL, tp=tp, pp=pp, num_gpus=tp * pp) == split


def test_mapping_and_placement_say_they_leave_out_a_fitted_host_term(tmp_path):
    """A calibration with a host time per sequence (``calibrate --fit-host``) is charged by the
    design model only (eq. 5.3); `show` of a mapping or placement instance warns that its model
    kind leaves it out, and says nothing when the term is 0 (the shipped calibration)."""
    import json

    from typer.testing import CliRunner

    from codesign.cli import app
    from codesign.model import hardware

    runner = CliRunner()
    for name in ("tiny-pf-mapping", "tiny-placement-mixtral"):
        got = runner.invoke(app, ["show", name, "--json"])
        assert got.exit_code == 0, got.output
        assert json.loads(got.stdout)["lints"] == []
    text = hardware.shipped_calibration_path().read_text()
    table = "[chips.h100-sxm]\n"
    assert table in text
    mine = tmp_path / "host.toml"
    mine.write_text(text.replace(table, table + "host_us_per_sequence = 12.5\n"))
    try:
        for name in ("tiny-pf-mapping", "tiny-placement-mixtral"):
            got = runner.invoke(app, ["--calibration", str(mine), "show", name, "--json"])
            assert got.exit_code == 0, got.output
            (lint,) = json.loads(got.stdout)["lints"]
            assert lint["code"] == "host-term-not-modelled" and "h100-sxm" in lint["message"]
            assert "12.5 µs" in lint["message"]
            shown = runner.invoke(app, ["--calibration", str(mine), "show", name])
            assert "host-term-not-modelled" in shown.output
    finally:
        hardware.forget_calibration()


def test_under_attention_dp_the_ends_are_whole_either_way():
    """Attention DP already keeps the embedding and LM head whole on every rank (model.md eq. 4.16):
    the replicated embedding adds nothing there (no double count)."""
    r = V.Row("q", "qwen3-235b-a22b", "h200-sxm", 8, 8, 1, 8, 8, "fp8", 1000, 1000, None, "output_tokens_per_s", 1.0)
    replicated = V.Variant("replicated-embedding", replicated_embedding=True)
    w = [V.evaluate_row(r, 64, v).workload_metrics["main"]["weights_per_device_B"] for v in (V.MODEL, replicated)]
    assert w[1] == pytest.approx(w[0], rel=1e-12)


def test_max_batch_applies_the_runtime_table_in_the_variant():
    r = _row()
    memory = V.max_batch(r).batch
    assert memory == V.batch_from(r, V.footprint(r), None, None, requests=False)
    choice = V.max_batch(r, variant=V.Variant("runtime-batch-table", runtime_batch_table=True))
    assert (choice.batch, choice.bound) == (V.runtime_batch(memory), "engine") and choice.batch < memory


def test_an_old_fitted_on_table_is_stripped_whatever_its_spacing():
    lines = ["source = 'x'", "", "# what the [chips.*] values were fitted on", "[ fitted_on ]  # old",
             'csv = "a.csv"', "", "# the engine's defaults", "[default]", "compute_efficiency = 0.7"]
    assert V._without_table(lines, "fitted_on") == ["source = 'x'", "", "# the engine's defaults", "[default]",
                                                   "compute_efficiency = 0.7"]
