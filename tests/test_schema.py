"""codesign.schema: input files are read only when they are regular files of bounded size (a FIFO
or a device is refused before it is opened, so nothing blocks), TOML with finite numbers, 64-bit
integers and bounded nesting, schema numbers finite, instance names that are file names; every
refusal an InputError naming the file and the key (issue 34, part 3)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from codesign.errors import InputError
from codesign.schema import (
    MAX_DEPTH,
    MAX_STRING,
    InstanceName,
    Strict,
    as_name,
    check_name,
    check_values,
    is_file,
    load_toml,
    read_input,
    validate,
)


@contextmanager
def no_hang(seconds: int = 10) -> Iterator[None]:
    """Fail instead of blocking forever (a FIFO opened for reading waits for a writer)."""

    def alarm(*_):
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def refused(fn, *args, **kwargs) -> InputError:
    with no_hang(), pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    return info.value


# --- only regular files are read ----------------------------------------------------------------


def test_a_fifo_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "inst.toml"
    os.mkfifo(fifo)
    for fn in (read_input, load_toml):
        exc = refused(fn, fifo)
        assert "FIFO" in exc.message and "only regular files" in exc.message and exc.file == str(fifo)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_symlink_to_a_device_is_refused(tmp_path: Path, device: str) -> None:
    link = tmp_path / "chip.toml"
    link.symlink_to(device)
    assert "character device" in refused(load_toml, link).message


def test_a_directory_a_missing_file_and_a_symlink_loop_are_named(tmp_path: Path) -> None:
    assert refused(load_toml, tmp_path).message == "a directory, not a TOML file"
    assert refused(load_toml, tmp_path / "absent.toml").message == "TOML file not found"
    assert refused(load_toml, tmp_path / "file.toml" / "below").message == "TOML file not found"
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    assert "cannot read the TOML file" in refused(load_toml, loop).message


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * 1000 + b"\n")
    exc = refused(read_input, big, what="TOML file", limit=100)
    assert "too large for a TOML file" in exc.message and exc.expected == "at most 100 bytes"
    assert read_input(big, limit=2000).startswith(b"# x")


# --- TOML: encoding, syntax, numbers, nesting -------------------------------------------------------


def write(tmp_path: Path, content: str | bytes, name: str = "f.toml") -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def test_not_utf8_is_named_and_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    assert "not UTF-8 text" in refused(load_toml, write(tmp_path, 'a = "b"\n'.encode("utf-16"))).message
    assert load_toml(write(tmp_path, b'\xef\xbb\xbfa = "b"\n')) == {"a": "b"}


@pytest.mark.parametrize("literal", ["nan", "+nan", "inf", "-inf", "1e4000"])
def test_a_non_finite_number_anywhere_is_refused_with_its_key(tmp_path: Path, literal: str) -> None:
    exc = refused(load_toml, write(tmp_path, f"[hardware.decisions]\nclock_GHz = [1.2, {literal}]\n"))
    assert exc.message == "not a finite number" and exc.key == "hardware.decisions.clock_GHz[1]"


@pytest.mark.parametrize("literal", ["9223372036854775808", "-9223372036854775809", "9" * 30])
def test_an_integer_beyond_64_bits_is_refused(tmp_path: Path, literal: str) -> None:
    exc = refused(load_toml, write(tmp_path, f"[system]\ndevices = {literal}\n"))
    assert exc.message == "an integer out of the 64-bit range" and exc.key == "system.devices"


def test_an_integer_of_thousands_of_digits_is_bad_toml(tmp_path: Path) -> None:
    assert "not valid TOML" in refused(load_toml, write(tmp_path, "a = " + "9" * 5000 + "\n")).message


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 100_000])
def test_nesting_deeper_than_the_limit_is_refused(tmp_path: Path, depth: int) -> None:
    for value in ("[" * depth + "1" + "]" * depth, "{a = " * depth + "1" + "}" * depth):
        exc = refused(load_toml, write(tmp_path, f"x = {value}\n"))
        assert "nested too deeply" in exc.message, exc


def test_deep_table_headers_are_refused_too(tmp_path: Path) -> None:
    header = ".".join(["t"] * 5000)
    assert "nested too deeply" in refused(load_toml, write(tmp_path, f"[{header}]\na = 1\n")).message


def test_nesting_up_to_the_limit_reads(tmp_path: Path) -> None:
    depth = MAX_DEPTH - 1
    assert load_toml(write(tmp_path, "x = " + "[" * depth + "1" + "]" * depth + "\n"))["x"]


def test_check_values_walks_without_recursion() -> None:
    deep: list = []
    node = deep
    for _ in range(50_000):
        node.append([])
        node = node[0]
    with pytest.raises(InputError, match="nested too deeply"):
        check_values(deep, file="x.json")
    check_values({"a": [1, 2.5, "x", True, {"b": -(2**63)}]}, file="x.json")


# --- schemas: finite numbers, names ----------------------------------------------------------------


class _Probe(Strict):
    x: float = 0.0
    xs: dict[str, float] = Field(default_factory=dict)
    name: InstanceName = "probe"


@pytest.mark.parametrize("data", [{"x": float("nan")}, {"x": "inf"}, {"xs": {"a": float("-inf")}}])
def test_every_number_of_a_schema_is_finite(data: dict) -> None:
    with pytest.raises(InputError, match="finite number") as info:
        validate(_Probe, data, file="f.toml")
    assert info.value.key in ("x", "xs.a")


@pytest.mark.parametrize("name", ["../escaped", "/abs/path", "a/b", "a\\b", "", ".", "..", ".hidden", "x" * 129,
                                  "sp ace", "nul\x00", "new\nline", "ü", "-rf", "trailing."])
def test_an_instance_name_that_is_not_a_file_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a name"):
        check_name(name)
    with pytest.raises(InputError, match="not a name") as info:
        validate(_Probe, {"name": name}, file="f.toml")
    assert info.value.key == "name"


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "gen-w2-hw1", "a", "x" * 128, "v1.2_final", "9"])
def test_instance_names_that_are_file_names_read(name: str) -> None:
    assert validate(_Probe, {"name": name}).name == name


def test_the_strict_base_keeps_its_other_rules() -> None:
    assert issubclass(_Probe, BaseModel)
    with pytest.raises(InputError, match="unknown key"):
        validate(_Probe, {"nmae": "x"}, file="f.toml")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_as_name_makes_any_text_a_name(text: str) -> None:
    assert check_name(as_name(text)) == as_name(text)


def test_as_name_keeps_a_name_and_replaces_the_rest() -> None:
    assert as_name("tiny-3d-llama8b") == "tiny-3d-llama8b"
    assert as_name("validate-a/b c\n") == "validate-a-b-c"
    assert as_name("../..") == "x"


def test_is_file_answers_for_any_name(tmp_path: Path) -> None:
    (tmp_path / "f.toml").write_text("")
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "loop.toml").symlink_to(tmp_path / "loop.toml")
    assert is_file(tmp_path / "f.toml")
    for name in ("fifo.toml", "loop.toml", "x" * 300 + ".toml", "a\x00b", "absent"):
        assert not is_file(tmp_path / name), name  # Path.is_file raises on a long name and a NUL


def test_a_file_name_with_a_nul_character_is_not_found(tmp_path: Path) -> None:
    assert "not found" in refused(load_toml, tmp_path / "a\x00b.toml").message
    assert "cannot read" in refused(load_toml, tmp_path / ("x" * 300 + ".toml")).message


def test_a_string_or_key_longer_than_the_limit_is_refused(tmp_path: Path) -> None:
    # a 100,000-character provenance took `show` a minute to wrap (tools/fuzz_cli.py)
    exc = refused(load_toml, write(tmp_path, f'provenance = "{"x" * (MAX_STRING + 1)}"\n'))
    assert "longer than 10,000 characters" in exc.message and exc.key == "provenance"
    exc = refused(load_toml, write(tmp_path, f'[t]\n{"k" * (MAX_STRING + 1)} = 1\n'))
    assert "a key longer" in exc.message and exc.key == "t"
    assert load_toml(write(tmp_path, f'provenance = "{"x" * MAX_STRING}"\n'))


def test_plus_infinity_only_where_a_key_may_be_unbounded(tmp_path: Path) -> None:
    path = write(tmp_path, "[chips.x]\ncap = inf\nother = 1.0\n")
    assert load_toml(path, unbounded=frozenset({"cap"}))["chips"]["x"]["cap"] == float("inf")
    assert refused(load_toml, path).key == "chips.x.cap"
    for text in ("cap = nan\n", "cap = -inf\n", "other = inf\n"):
        with pytest.raises(InputError, match="not a finite number"):
            load_toml(write(tmp_path, text), unbounded=frozenset({"cap"}))
