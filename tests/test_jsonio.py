"""codesign.jsonio: atomic writes, the results files the validation scripts extend run by run, and
reading JSON inputs under the limits of codesign.schema (regular files, finite numbers, bounded
nesting)."""

from __future__ import annotations

import json
import math
import os

import pytest

from codesign.errors import InputError
from codesign.jsonio import dumps, read_json, results_to_extend, write_json_atomic


def test_atomic_write_leaves_no_temp_file_and_plain_json(tmp_path):
    path = tmp_path / "sub" / "out.json"
    write_json_atomic(path, {"a": math.nan, "b": math.inf, "c": (1, 2)})
    assert json.loads(path.read_text()) == {"a": None, "b": "inf", "c": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]


def test_results_are_extended_only_when_made_from_the_same_inputs(tmp_path):
    path = tmp_path / "probes.json"
    made_from = {"csv": "measurements.csv", "split": "split.json"}
    # no file yet: a fresh one with an empty section
    assert results_to_extend(path, made_from, "probes") == {**made_from, "probes": {}}

    path.write_text(dumps({**made_from, "probes": {"a": 1, "b": 2}, "engine_limits": {"m1": 3}}))
    out = results_to_extend(path, made_from, "probes")
    assert out == {**made_from, "probes": {"a": 1, "b": 2}, "engine_limits": {"m1": 3}}
    out["probes"]["c"] = 4  # the caller extends a copy; the file is untouched until written
    assert "c" not in json.loads(path.read_text())["probes"]

    # another measurements file: what the old file holds does not carry over
    other = {**made_from, "csv": "other-models.csv"}
    assert results_to_extend(path, other, "probes") == {**other, "probes": {}}


def test_plain_json_of_numpy_and_non_finite_values():
    import numpy as np

    from codesign.jsonio import jsonable

    assert jsonable({1: np.float64(2.5), "a": np.array([1, 2]), "b": (np.int64(3),), "c": -math.inf}) == {
        "1": 2.5, "a": [1, 2], "b": [3], "c": "-inf"}


def test_reading_json_names_the_file_and_what_is_wrong(tmp_path):
    import pytest

    from codesign.errors import InputError
    from codesign.jsonio import read_json

    with pytest.raises(InputError, match="file not found"):
        read_json(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON") as info:
        read_json(tmp_path / "bad.json")
    assert info.value.file == str(tmp_path / "bad.json")
    (tmp_path / "bin.json").write_bytes(b"\x89PNG\x00\xff")
    with pytest.raises(InputError, match="not UTF-8"):
        read_json(tmp_path / "bin.json")
    with pytest.raises(InputError, match="a directory"):
        read_json(tmp_path)


def test_an_atomic_write_keeps_an_existing_files_permissions_and_refuses_a_directory(tmp_path):
    import os
    import stat

    import pytest

    from codesign.errors import InputError
    from codesign.jsonio import write_text_atomic

    path = tmp_path / "f.txt"
    path.write_text("old")
    os.chmod(path, 0o600)
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(InputError, match="the path is a directory"):
        write_text_atomic(tmp_path, "x")
    blocker = tmp_path / "plain"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write here"):
        write_text_atomic(blocker / "inside.txt", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt", "plain"]


def test_an_atomic_write_that_fails_midway_leaves_the_old_file(tmp_path):
    import pytest

    from codesign.jsonio import atomic_output

    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


# --- reading: the same limits as TOML (codesign.schema) -------------------------------------------


def _refused(path) -> InputError:
    with pytest.raises(InputError) as info:
        read_json(path)
    return info.value


@pytest.mark.parametrize("text", ['{"bound": NaN}', '{"bound": Infinity}', '{"bound": [-Infinity]}'])
def test_read_json_refuses_nan_and_infinity_literals(tmp_path, text):
    (tmp_path / "r.json").write_text(text)
    exc = _refused(tmp_path / "r.json")
    assert "is not a JSON number" in exc.message and exc.file == str(tmp_path / "r.json")


def test_read_json_refuses_a_number_that_overflows_to_infinity_with_its_key(tmp_path):
    (tmp_path / "r.json").write_text('{"audit": [{"value": 1e400}]}')
    exc = _refused(tmp_path / "r.json")
    assert exc.message == "not a finite number" and exc.key == "audit[0].value"


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' * 40 + "1" + "}" * 40, "1" + "0" * 5000,
                                  '{"n": 99999999999999999999}'])
def test_read_json_refuses_deep_nesting_and_huge_integers(tmp_path, text):
    (tmp_path / "r.json").write_text(text)
    exc = _refused(tmp_path / "r.json")
    assert any(s in exc.message for s in ("nested too deeply", "not valid JSON", "64-bit")), exc


def test_read_json_reads_only_regular_files(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    assert "FIFO" in _refused(tmp_path / "fifo.json").message  # refused, not waited on
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    assert "character device" in _refused(tmp_path / "zero.json").message
    assert _refused(tmp_path).message == "a directory, not a JSON file"
    assert _refused(tmp_path / "absent.json").message == "JSON file not found"
    (tmp_path / "u16.json").write_bytes('{"a": 1}'.encode("utf-16"))
    assert "not UTF-8" in _refused(tmp_path / "u16.json").message


def test_read_json_reads_a_byte_order_mark_and_the_strings_codesign_writes(tmp_path):
    (tmp_path / "r.json").write_bytes(b'\xef\xbb\xbf{"bound": "inf", "gap": null}')
    assert read_json(tmp_path / "r.json") == {"bound": "inf", "gap": None}
