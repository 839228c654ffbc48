"""codesign.calibration.rows: reading measurement files, the benchmarks' request counts and
engines, the split."""

from __future__ import annotations

import os

import pytest

from codesign.calibration.engine import footprint, skip_reason
from codesign.calibration.rows import (
    file_sha256,
    make_split,
    read_benchmark_engines,
    read_benchmark_requests,
    read_rows,
    read_split,
    requests_of,
    split_of,
)
from codesign.errors import InputError
from codesign.model.calibration import shipped

from .helpers import KV_SEQ_8B_FP8_2000, MEASUREMENTS, OVERVIEW, REPO, csv_row, row, write_csv


def test_the_measurements_are_in_the_repository_with_a_source_on_every_row():
    """validation/measurements.csv: 367 rows of the TensorRT-LLM 0.14 overview, each naming the
    document and commit it was read from; the shipped calibration records this very file."""
    rows, bad = read_rows(MEASUREMENTS)
    assert not bad and len(rows) == 367
    assert {r.source for r in rows} == {OVERVIEW}
    assert shipped().file.fitted_on.csv_sha256 == file_sha256(MEASUREMENTS)


def test_request_count_comes_from_the_csv_column_or_the_rows_benchmark(tmp_path):
    """The overview ran 1500 requests at 128/4096 and 30000 at 128/128 ("Preparing a Dataset");
    a num_requests column wins; an unknown source has no count."""
    base = csv_row("a", model="mixtral-8x7b", gpu="h200-sxm", num_gpus=8, tp=8, isl=128, osl=4096, value=1.0,
                   source=OVERVIEW)
    path = write_csv(tmp_path / "m.csv", [
        base,
        {**base, "id": "b", "osl": 128},
        {**base, "id": "c", "source": OVERVIEW + " (table rows 'LLaMA v3 70B')"},
        {**base, "id": "d", "source": "someone else's benchmark"},
        {**base, "id": "e", "source": "someone else's benchmark", "num_requests": "200"},
        {**base, "id": "f", "num_requests": "0"},
    ], extra=("num_requests",))
    rows, bad = read_rows(path)
    assert {r.id: r.num_requests for r in rows} == {"a": 1500, "b": 30000, "c": 1500, "d": None, "e": 200}
    assert bad == [{"id": "f", "reason": "malformed row: num_requests must be positive, got 0"}]


@pytest.mark.parametrize("text", [
    'benchmark = 3',
    '[[benchmarks]]\nsource = "x"\nnum_requests = { "1/1" = 2 }',
    '[[benchmark]]\nsource = "x"\nnum_requests = { "1/1" = true }',
    '[[benchmark]]\nsource = "x"\nnum_requests = { "1-1" = 2 }',
    '[[benchmark]]\nnum_requests = { "1/1" = 2 }',
])
def test_a_malformed_request_table_is_an_input_error(tmp_path, text):
    path = tmp_path / "requests.toml"
    path.write_text(text)
    with pytest.raises(InputError) as exc:
        read_benchmark_requests(path)
    assert exc.value.file == str(path)


def test_the_longest_source_prefix_that_lists_the_lengths_wins(tmp_path):
    path = tmp_path / "requests.toml"
    path.write_text('[[benchmark]]\nsource = "repo@c:"\nnum_requests = { "1/1" = 10 }\n'
                    '[[benchmark]]\nsource = "repo@c:doc.md"\nnum_requests = { "2/2" = 20 }\n')
    known = read_benchmark_requests(path)
    assert [p for p, _ in known] == ["repo@c:doc.md", "repo@c:"]
    assert requests_of("repo@c:doc.md", 2, 2, known) == 20
    assert requests_of("repo@c:doc.md", 1, 1, known) == 10  # the specific entry lacks 1/1
    assert requests_of("other", 1, 1, known) is None


def test_request_limit_is_requests_per_replica_in_multiples_of_pp():
    # 1500 requests on 8 GPUs at TP 2, PP 2: dp 2 -> 750 per replica, a multiple of PP already;
    # 1001 requests: 501 per replica -> 502 (next multiple of PP 2)
    assert row(num_gpus=8, tp=2, pp=2, num_requests=1500).request_limit == 750
    assert row(num_gpus=8, tp=2, pp=2, num_requests=1001).request_limit == 502
    assert row(num_requests=None).request_limit is None
    assert row(num_requests=1500, concurrency=64).request_limit is None


def test_the_kv_cache_precision_is_the_engines_rule_unless_the_csv_says(tmp_path):
    """trtllm-bench serves FP8 and NVFP4 checkpoints with an FP8 KV cache (65,536 B per token of
    Llama 8B), 16-bit checkpoints with a 16-bit one (131,072 B); a kv_precision column wins."""
    assert footprint(row(precision="fp4")).kv_per_sequence_B == KV_SEQ_8B_FP8_2000
    assert footprint(row(precision="fp16")).kv_per_sequence_B == 2 * KV_SEQ_8B_FP8_2000
    path = write_csv(tmp_path / "m.csv", [
        csv_row("a", precision="fp4"),
        csv_row("b", precision="fp8", kv_precision="fp16"),
        csv_row("c", precision="fp8", kv_precision="fp7"),
        csv_row("d", tp="two"),
    ], extra=("kv_precision",))
    rows, bad = read_rows(path)
    by = {r.id: r for r in rows}
    assert {i: r.kv_precision for i, r in by.items()} == {"a": "fp8", "b": "fp16", "c": "fp7"}
    assert footprint(by["b"]).kv_per_sequence_B == 2 * KV_SEQ_8B_FP8_2000
    assert "kv_precision 'fp7'" in skip_reason(by["c"])
    assert bad == [{"id": "d", "reason": "malformed row: column tp: 'two' is not an integer"}]


def test_names_are_read_as_catalog_ids_and_a_duplicate_id_is_malformed(tmp_path):
    path = write_csv(tmp_path / "m.csv", [
        csv_row("a", model="meta-llama/Llama-3.1-8B-Instruct", precision="FP8"),
        csv_row("a"),
    ])
    rows, bad = read_rows(path)
    assert [(r.model, r.precision) for r in rows] == [("llama-3.1-8b", "fp8")]
    assert dict(rows[0].named_as) == {"model": "meta-llama/Llama-3.1-8B-Instruct", "precision": "FP8"}
    assert bad == [{"id": "a", "reason": "duplicate id: line 3 repeats the id of line 2"}]


def test_a_file_without_a_required_column_is_bad_input(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("id,model,gpu\na,llama-3.1-8b,h100-sxm\n")
    with pytest.raises(InputError) as exc:
        read_rows(path)
    assert "num_gpus" in exc.value.message and exc.value.file == str(path)


def test_split_is_deterministic_and_covers_every_row(tmp_path):
    path = write_csv(tmp_path / "m.csv", [csv_row(f"m{i:04d}") for i in range(40)])
    a = make_split(path)
    b = make_split(path, tmp_path / "split.json")
    assert a == b and a["n_fit"] + a["n_held_out"] == 40 and 0 < a["n_fit"] < 40
    labels = read_split(tmp_path / "split.json")
    assert all(labels[i] == split_of(i) for i in labels)


def test_the_shipped_split_is_the_id_hash_rule_on_the_measurements():
    labels = read_split(REPO / "validation" / "split.json")
    rows, _ = read_rows(MEASUREMENTS)
    assert labels == {r.id: split_of(r.id) for r in rows}
    assert sum(v == "fit" for v in labels.values()) == 190


def test_the_never_fitted_check_files_map_to_the_catalog():
    """Every row of the check files VALIDATION.md reports maps to a catalog workload and chip and a
    supported metric: none is skipped, none is in the split."""
    labels = read_split(REPO / "validation" / "split.json")
    for name, n in (("other-models.csv", 54), ("nim-llama3.3-70b-h100.csv", 4), ("repeat-llama3-70b.csv", 147)):
        rows, bad = read_rows(REPO / "validation" / name)
        assert not bad and len(rows) == n, name
        assert all(skip_reason(r) is None for r in rows), name
        assert not any(r.id in labels for r in rows), name
    models = {r.model for r in read_rows(REPO / "validation" / "other-models.csv")[0]}
    assert models == {"llama-3.1-405b", "mixtral-8x22b"}
    # the v1.0 overview: 328 rows, none skipped; the 132 MoE rows on more than one GPU per replica
    # ran with attention DP over the whole TP group (the overview's MoE command)
    rows, bad = read_rows(REPO / "validation" / "trtllm-1.0-overview.csv")
    assert not bad and len(rows) == 328
    assert not any(r.id in labels for r in rows)
    assert all(skip_reason(r) is None for r in rows)
    assert sum(r.attention_dp_on for r in rows) == 132


# --- the engine table -----------------------------------------------------------------------------
def test_the_overview_rows_get_their_engines_and_token_budgets_from_the_table(tmp_path):
    """TP 2 at max_seq_len 4,096 has its own entry (2,048 slots), at 2,000 another (256); Mixtral
    TP 8 is not in the table (the assumed default, 2,048 slots and 8,192 tokens); an unlisted source
    has no engine; a CSV column wins. The table's Llama 3 70B TP 2 engine has 1,024 tokens per
    iteration, its Mixtral TP 4 8,192."""
    def line(rid, model, tp, precision, isl, osl, **kw):
        return csv_row(rid, model=model, num_gpus=tp, tp=tp, precision=precision, isl=isl, osl=osl, value=1.0,
                       source=OVERVIEW) | kw

    path = write_csv(tmp_path / "m.csv", [
        line("a", "llama-3.1-70b", 2, "fp16", 2048, 2048),
        line("b", "llama-3.1-70b", 2, "fp16", 1000, 1000),
        line("c", "llama-3.1-70b", 1, "fp8", 1000, 1000),
        line("d", "llama-3.1-70b", 8, "fp8", 128, 128, gpu="h200-sxm"),
        line("e", "mixtral-8x7b", 4, "fp8", 128, 128),
        line("f", "mixtral-8x7b", 8, "fp8", 128, 128),
        line("g", "llama-3.1-8b", 1, "fp8", 128, 128),
        line("h", "llama-3.1-8b", 1, "fp8", 128, 128, source="mine"),
        line("i", "llama-3.1-8b", 1, "fp8", 128, 128, max_batch_size=96),
        line("j", "llama-3.1-70b", 2, "fp16", 2048, 128),
        line("k", "llama-3.1-70b", 2, "fp16", 2048, 128, max_num_tokens=4096),
    ], extra=("max_batch_size", "max_num_tokens"))
    rows, bad = read_rows(path)
    assert not bad
    assert {r.id: r.engine_max_batch for r in rows} == {"a": 2048, "b": 256, "c": 2048, "d": 8192, "e": 8192,
                                                        "f": 2048, "g": 2048, "h": None, "i": 96, "j": 256, "k": 256}
    tokens = {r.id: r.engine_max_tokens for r in rows}
    assert (tokens["j"], tokens["e"], tokens["f"], tokens["h"], tokens["k"]) == (1024, 8192, 8192, None, 4096)


@pytest.mark.parametrize(("text", "key"), [
    ('[[benchmark]]\nsource = "x"\ndefault_max_batch_size = 0\n', "benchmark[0]"),
    ('[[benchmark]]\nsource = "x"\ndefault_max_num_tokens = 0\n', "benchmark[0]"),
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
        read_benchmark_engines(path)
    assert err.value.key == key and err.value.file is not None and (err.value.expected or "")


def test_the_shipped_engine_table_reads():
    engines = read_benchmark_engines()
    overview = next(b for b in engines if b.source == OVERVIEW)
    assert overview.default_max_batch == 2048
    assert overview.max_batch("llama-3.1-70b", 2, 1, 4096) == 2048
    assert overview.max_batch("llama-3.1-70b", 2, 1, 2000) == 256
    assert overview.max_batch("llama-3.1-70b", 2, 2, 4096) == 2048  # PP > 1: not in the table, the default
    assert overview.max_batch("llama-3.1-405b", 8, 1, 2000) == 2048


def test_without_a_default_a_layout_the_table_lacks_has_no_engine(tmp_path):
    path = tmp_path / "engines.toml"
    path.write_text('[[benchmark]]\nsource = "x"\n'
                    '[benchmark.engines."meta-llama/Meta-Llama-3-8B"]\ntp1 = { general = [1024, 8192] }\n')
    (b,) = read_benchmark_engines(path)
    assert b.max_batch("llama-3.1-8b", 1, 1, 256) == 1024 and b.max_batch("llama-3.1-8b", 2, 1, 256) is None


# --- bad input a fuzzer tries (issue 34, part 3) ------------------------------------------------------


def _input_error(path) -> InputError:
    with pytest.raises(InputError) as exc:
        read_rows(path)
    assert exc.value.file == str(path)
    return exc.value


def test_a_field_over_the_csv_limit_is_bad_input_naming_the_line(tmp_path):
    # the csv module's "field larger than field limit" was a traceback
    path = write_csv(tmp_path / "m.csv", [csv_row("a"), csv_row("b", source="x" * 200_000)])
    exc = _input_error(path)
    assert "not a readable CSV at line 3" in exc.message and "field larger than field limit" in exc.message


def test_a_nul_byte_is_read_as_a_character_of_its_field(tmp_path):
    path = write_csv(tmp_path / "m.csv", [csv_row("a")])
    path.write_bytes(path.read_bytes().replace(b"output_tokens", b"output\x00tokens"))
    rows, _ = read_rows(path)
    assert "unsupported metric 'output\\x00tokens_per_s'" in skip_reason(rows[0])


def test_only_a_regular_file_of_bounded_size_is_read(tmp_path):
    os.mkfifo(tmp_path / "fifo.csv")
    assert "FIFO" in _input_error(tmp_path / "fifo.csv").message  # not "not found", not a hang
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    assert "character device" in _input_error(tmp_path / "zero.csv").message
    assert _input_error(tmp_path / "absent.csv").message == "measurements file not found"
    assert _input_error(tmp_path).message == "a directory, not a measurements file"


def test_a_byte_order_mark_before_the_header_is_read(tmp_path):
    path = write_csv(tmp_path / "m.csv", [csv_row("a")])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    rows, bad = read_rows(path)
    assert [r.id for r in rows] == ["a"] and bad == []


@pytest.mark.parametrize(("column", "value", "reason"), [
    ("tp", "9" * 30, "column tp: 999999999999999999999999999999 is out of range"),
    ("isl", "-" + "9" * 12, "column isl: -999999999999 is out of range"),
    ("num_gpus", "9" * 5000, "column num_gpus: '99999999999"),
])
def test_an_integer_out_of_range_is_a_malformed_row(tmp_path, column, value, reason):
    rows, bad = read_rows(write_csv(tmp_path / "m.csv", [csv_row("a", **{column: value}), csv_row("b")]))
    assert [r.id for r in rows] == ["b"]
    assert bad[0]["id"] == "a" and bad[0]["reason"].startswith(f"malformed row: {reason}")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_measured_value_that_is_not_a_positive_number_is_skipped(tmp_path, value):
    rows, _ = read_rows(write_csv(tmp_path / "m.csv", [csv_row("a", value=value)]))
    assert "is not a positive number" in skip_reason(rows[0])


@pytest.mark.parametrize(("text", "key"), [('{"fit": 5, "held_out": []}', "fit"),
                                           ('{"fit": [], "held_out": "abc"}', "held_out"),
                                           ('{"fit": [1, 2], "held_out": []}', "fit"),
                                           ('{"fit": [], "held_out": [{"id": "a"}]}', "held_out")])
def test_a_split_that_does_not_list_row_ids_is_bad_input(tmp_path, text, key):
    # iterating an integer was a TypeError traceback
    (tmp_path / "split.json").write_text(text)
    with pytest.raises(InputError, match="a split lists row ids") as exc:
        read_split(tmp_path / "split.json")
    assert exc.value.key == key


def test_a_split_file_that_is_not_json_is_bad_input(tmp_path):
    (tmp_path / "split.json").write_text('{"fit": [NaN], "held_out": []}')
    with pytest.raises(InputError, match="not valid JSON"):
        read_split(tmp_path / "split.json")
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(InputError, match="FIFO"):
        read_split(tmp_path / "fifo.json")


def test_a_field_longer_than_an_input_string_may_be_is_a_malformed_row(tmp_path):
    # calibrate wrote such an id into its split file, then could not read the split back
    rows, bad = read_rows(write_csv(tmp_path / "m.csv", [csv_row("i" * 20_000), csv_row("b", model="m" * 20_000),
                                                         csv_row("c")]))
    assert [r.id for r in rows] == ["c"]
    assert [b["reason"] for b in bad] == ["malformed row: column id: 20,000 characters, more than 10,000",
                                          "malformed row: column model: 20,000 characters, more than 10,000"]
