"""The benchmark engine's sequence slots (VALIDATION.md §5.16, fix 16): each 0.14 row's engine
``max_batch_size`` from trtllm-bench's per-model table (``instances/catalog/benchmark_engines.toml``)
caps the row's batch, and the runtime's decoding state for that many slots, allocated before the KV
cache is sized, comes out of the memory the KV cache gets.

Hand-derived figures:

* per slot (``decoder_state_per_slot_B``): 4 fp32 rows of the padded vocabulary, 1 int32 row of the
  vocabulary, 64 KiB of top-K scratch (1,024 x 8 x 8 B) and 10 x 4 B per max_seq_len token.
  Qwen2.5 0.5B (vocabulary 151,936) at max_seq_len 32,768: 2,430,976 + 607,744 + 65,536 +
  1,310,720 = 4,414,976 B; 2,048 slots: 9,041,870,848 B = 8.42 GiB, the 2.66 + 5.76 GB that
  TensorRT-LLM's log prints for "runtime buffers" and "decoder" (issue #1188). Llama 3.1 70B
  (128,256) at 2048/2048: 2,052,096 + 513,024 + 65,536 + 163,840 = 2,794,496 B. A vocabulary of
  32,000 over TP 3 is padded to 32,001;
* Llama 70B FP16 at TP 2 on two H100s, 2048/2048 (m0546), reserve 2.75 GiB, f = 0.90: 2,048 slots
  hold 5,723,127,808 B; 0.9 x (85,899,345,920 - 2,952,790,016 - 5,723,127,808 - 70,553,706,496) /
  671,088,640 = 8.9 -> 8 sequences, where without the slots 16.6 -> 16. Its 1000/1000 sibling's
  engine has 256 slots: 256 x 2,710,656 = 693,927,936 B.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from codesign import validate as V
from codesign.errors import InputError

OVERVIEW = "arthurrasmusson/TensorRT-LLM@e00d4e6564921307dd264b61fe1d46f116095e0e:docs/source/performance/perf-overview.md"
HEADER = ["id", "model", "gpu", "num_gpus", "tp", "pp", "ep", "attention_dp", "precision", "isl", "osl",
          "concurrency", "metric", "value", "unit", "source", "max_batch_size"]
GiB = 2**30
MEM = {"usable_memory_fraction": 1.0, "runtime_reserve_GiB": 2.75, "kv_cache_free_fraction": 0.9}


def _csv(tmp_path: Path, rows: list[dict]) -> list[V.Row]:
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        w.writeheader()
        for r in rows:
            base = dict(num_gpus=r.get("tp", 1), pp=1, ep=1, attention_dp=1, concurrency="",
                        metric="output_tokens_per_s", value=1.0, unit="1/s", source=OVERVIEW, max_batch_size="")
            w.writerow({**base, **r})
    parsed, bad = V.read_rows(path)
    assert not bad
    return parsed


def test_decoding_state_per_slot_is_hand_derived():
    assert V.decoder_state_per_slot_B(151_936, 1, 32_768) == 4_414_976
    # the published log's "runtime buffers" + "decoder" (its GB are GiB), 2,048 slots assumed
    assert 2048 * V.decoder_state_per_slot_B(151_936, 1, 32_768) / GiB == pytest.approx(2.66 + 5.76, abs=0.005)
    assert V.decoder_state_per_slot_B(128_256, 2, 4096) == 2_794_496
    assert V.decoder_state_per_slot_B(32_000, 3, 0) == 4 * 32_001 * 4 + 32_000 * 4 + 65_536


def test_the_overview_rows_get_their_engines_from_the_table(tmp_path):
    rows = _csv(tmp_path, [
        dict(id="a", model="llama-3.1-70b", gpu="h100-sxm", tp=2, precision="fp16", isl=2048, osl=2048),
        dict(id="b", model="llama-3.1-70b", gpu="h100-sxm", tp=2, precision="fp16", isl=1000, osl=1000),
        dict(id="c", model="llama-3.1-70b", gpu="h100-sxm", tp=1, precision="fp8", isl=1000, osl=1000),
        dict(id="d", model="llama-3.1-70b", gpu="h200-sxm", tp=8, precision="fp8", isl=128, osl=128),
        dict(id="e", model="mixtral-8x7b", gpu="h100-sxm", tp=4, precision="fp8", isl=128, osl=128),
        dict(id="f", model="mixtral-8x7b", gpu="h100-sxm", tp=8, precision="fp8", isl=128, osl=128),
        dict(id="g", model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8", isl=128, osl=128),
        dict(id="h", model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8", isl=128, osl=128, source="mine"),
        dict(id="i", model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8", isl=128, osl=128, max_batch_size=96),
    ])
    got = {r.id: r.engine_max_batch for r in rows}
    # TP 2 at max_seq_len 4,096 has its own entry; Mixtral TP 8 is not in the table (the assumed
    # default); an unlisted source has no engine; a CSV column wins
    assert got == {"a": 2048, "b": 256, "c": 2048, "d": 8192, "e": 8192, "f": 2048, "g": 2048, "h": None, "i": 96}
    by = {r.id: r for r in rows}
    # the row's own engine replaces the heuristic's 4096; without an engine the 4096 stays
    assert by["d"].engine_cap(V.ENGINE_MAX_BATCH) == 8192 and by["g"].engine_cap(V.ENGINE_MAX_BATCH) == 2048
    assert by["h"].engine_cap(V.ENGINE_MAX_BATCH) == 4096 and by["d"].engine_cap(None) is None
    assert V.engine_state_B(by["h"]) == 0.0
    assert V.engine_state_B(by["b"]) == 256 * 2_710_656 == 693_927_936


def test_the_slots_state_comes_out_of_the_kv_cache_by_hand(tmp_path):
    (r,) = _csv(tmp_path, [dict(id="m0546", model="llama-3.1-70b", gpu="h100-sxm", tp=2, precision="fp16",
                                isl=2048, osl=2048)])
    fp = V.footprint(r)
    assert (fp.weights_B, fp.kv_per_sequence_B, fp.raw_capacity_B) == (70_553_706_496, 671_088_640, 80 * GiB)
    assert fp.engine_state_B == 2048 * 2_794_496 == 5_723_127_808
    assert V.batch_from(r, fp, MEM, None) == 8  # 0.9 (80 - 2.75 GiB - 5.723 - 70.554 GB) / 0.671 GB = 8.95
    bare = V.Footprint(fp.weights_B, fp.kv_per_sequence_B, fp.raw_capacity_B, fp.usable_B, fp.kv_free_fraction)
    assert V.batch_from(r, bare, MEM, None) == 16
    # the model's audit with the state taken off its limit agrees with the affine rule
    choice = V.max_batch(r)
    assert choice.batch == V.batch_from(r, fp, None, None, requests=False)
    assert V._fits(V.evaluate_row(r, choice.batch), fp) and not V._fits(V.evaluate_row(r, choice.batch + 1), fp)


def test_a_known_engine_holds_the_batchs_own_slots_among_its_own(tmp_path):
    """Llama 8B FP8 on one H100 at 1000/1000, the overview's engine of 2,048 slots: 5,551,423,488 B
    of decoding state per GPU. The batch's own 469 sequences are among those slots, so the state is
    charged once (max(S, b s) = S, eq. 4.14b): 0.9 (80 - 2.75 GiB - 5.551 - 9.081 GB) / 0.131 GB =
    469.08. Charging both (S + b s) would give (80 - 2.75 GiB - 5.551 - 9.081 GB) / (0.146 + 0.0027
    GB) = 460.5."""
    (r,) = _csv(tmp_path, [dict(id="k", model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8",
                                isl=1000, osl=1000)])
    fp = V.footprint(r)
    assert fp.engine_state_B == 2048 * 2_710_656 == 5_551_423_488 and fp.state_per_sequence_B == 2_710_656
    assert (fp.weights_B, fp.kv_per_sequence_B) == (9_080_934_400, 2000 * 65_536)
    assert V.batch_from(r, fp, MEM, None, requests=False) == 469
    # the model's audit (its column holds the batch's own state) with the rest of the engine's
    # taken off its limit agrees with the affine rule
    choice = V.max_batch(r, cap=None)
    assert choice.batch == V.batch_from(r, fp, None, None, requests=False)
    assert V._fits(V.evaluate_row(r, choice.batch), fp) and not V._fits(V.evaluate_row(r, choice.batch + 1), fp)


def test_a_layout_the_state_leaves_no_room_says_so(tmp_path):
    (r,) = _csv(tmp_path, [dict(id="x", model="llama-3.1-70b", gpu="h100-sxm", tp=1, precision="fp8",
                                isl=1000, osl=1000, max_batch_size=8192)])
    choice = V.max_batch(r)
    assert choice.batch == 0
    assert "decoding state for 8192 slots" in choice.reason


def test_attention_dp_pp_and_fixed_concurrency_rows_by_hand(tmp_path):
    """Under attention DP every rank runs its own executor: the replica's cap is TP x max_batch_size,
    but a device holds only its own rank's slots. With PP 2 the runtime keeps max_batch_size slots
    per micro-batch: a cap of 2 x 128 and 256 slots' state. A fixed-concurrency row is capped by its
    engine too (200 requested, 96 slots)."""
    rows = _csv(tmp_path, [
        dict(id="adp", model="llama-3.1-70b", gpu="h200-sxm", tp=8, attention_dp=8, precision="fp8", isl=1000,
             osl=1000, max_batch_size=256),
        dict(id="pp", model="llama-3.1-70b", gpu="h200-sxm", num_gpus=4, tp=2, pp=2, precision="fp8", isl=1000,
             osl=1000, max_batch_size=128),
        dict(id="conc", model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8", isl=1000, osl=1000,
             concurrency=200, max_batch_size=96),
    ])
    adp, pp, conc = rows
    per_slot = 2_630_656 + 40 * 2000  # Llama 3.1's vocabulary, unpadded at TP 2 and 8
    assert V.decoder_state_per_slot_B(128_256, 8, 2000) == V.decoder_state_per_slot_B(128_256, 2, 2000) == per_slot
    assert adp.engine_cap(V.ENGINE_MAX_BATCH) == 8 * 256 and V.engine_state_B(adp) == 256 * per_slot
    assert pp.engine_cap(V.ENGINE_MAX_BATCH) == 256 and V.engine_state_B(pp) == 256 * per_slot
    assert V.batch_from(conc, V.footprint(conc), None, V.ENGINE_MAX_BATCH) == 96
    assert V.batch_from(conc, V.footprint(conc), None, V.ENGINE_MAX_BATCH, own_cap=False) == 200


@pytest.mark.parametrize(("text", "key"), [
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 0\n', "benchmark[0]"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 2048\n[benchmark.engines."no/such-model"]\n'
     'tp1 = { general = [1, 1] }\n', "benchmark[0].engines.no/such-model"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 2048\n[benchmark.engines."meta-llama/Meta-Llama-3-8B"]\n'
     'tp1 = { general = [0, 8192] }\n', "benchmark[0].engines.meta-llama/Meta-Llama-3-8B.tp1.general"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 2048\n[benchmark.engines."meta-llama/Meta-Llama-3-8B"]\n'
     'pp1 = { general = [2048, 8192] }\n', "benchmark[0].engines.meta-llama/Meta-Llama-3-8B.pp1"),
    ('stray = 1\n', "stray"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 2048\nengine = {}\n', "benchmark[0].engine"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 2048\n[benchmark.engines."meta-llama/Meta-Llama-3-8B"]\n'
     'tp1 = { general = [2048, 8192], 0 = [1, 1] }\n', "benchmark[0].engines.meta-llama/Meta-Llama-3-8B.tp1.0"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 2048\n[benchmark.engines."meta-llama/Meta-Llama-3-8B"]\n'
     'tp1 = { general = [2048, 8192] }\n[benchmark.engines."meta-llama/Llama-3.1-8B"]\ntp1 = { general = [9, 9] }\n',
     "benchmark[0].engines.meta-llama/Llama-3.1-8B"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 2048\n[benchmark.engines]\n"meta-llama/Meta-Llama-3-8B" = 3\n',
     "benchmark[0].engines.meta-llama/Meta-Llama-3-8B"),
])
def test_a_malformed_engine_table_names_the_key(tmp_path, text, key):
    path = tmp_path / "engines.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        V.read_benchmark_engines(path)
    assert err.value.key == key and err.value.file is not None and (err.value.expected or "")


def test_the_shipped_table_reads():
    (overview,) = V.read_benchmark_engines()
    assert overview.source == OVERVIEW and overview.default_max_batch == 2048
    assert overview.max_batch("llama-3.1-70b", 2, 1, 4096) == 2048
    assert overview.max_batch("llama-3.1-70b", 2, 1, 2000) == 256
    assert overview.max_batch("llama-3.1-70b", 2, 2, 4096) == 2048  # PP > 1: not in the table, the default
    assert overview.max_batch("llama-3.1-405b", 8, 1, 2000) == 2048


def test_without_a_default_a_layout_the_table_lacks_has_no_engine(tmp_path):
    path = tmp_path / "engines.toml"
    path.write_text('[[benchmark]]\nsource = "x"\n'
                    '[benchmark.engines."meta-llama/Meta-Llama-3-8B"]\ntp1 = { general = [1024, 8192] }\n')
    (b,) = V.read_benchmark_engines(path)
    assert b.max_batch("llama-3.1-8b", 1, 1, 256) == 1024 and b.max_batch("llama-3.1-8b", 2, 1, 256) is None


def test_the_report_counts_the_rows_whose_engine_is_unknown(tmp_path):
    rows = _csv(tmp_path, [
        dict(id="a", model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8", isl=128, osl=128),
        dict(id="b", model="llama-3.1-8b", gpu="h100-sxm", tp=1, precision="fp8", isl=128, osl=128, source="mine"),
    ])
    recs = [V.predict_row(r) for r in rows]
    assert [r["engine_max_batch"] for r in recs] == [2048, None]
    per_slot = V.decoder_state_per_slot_B(128_256, 1, 256)
    assert recs[0]["engine_state_B"] == 2048 * per_slot
    # an unknown engine has at least the batch's own slots (eq. 4.14b)
    assert recs[1]["batch"] > 0 and recs[1]["engine_state_B"] == recs[1]["batch"] * per_slot
    report = V.ValidationReport(csv="m.csv", by=("model", "gpu"), rows=recs, skipped=[])
    assert report.batch_bounds["no engine known"] == 1
