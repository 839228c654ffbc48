"""codesign.kinds.registry: every named instance loads through one function and evaluates with
the same record keys whatever its kind; bad names and files are InputErrors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from codesign.errors import InputError
from codesign.kinds.base import Problem
from codesign.kinds.registry import (
    file_kind,
    from_data,
    kind_class,
    kinds,
    load,
    named_paths,
    resolve,
)
from codesign.proof import records

NAMED = sorted(named_paths())
REPO = Path(__file__).resolve().parents[2]


def test_the_kinds_are_registered():
    assert {"grid", "mapping", "placement", "training"} <= set(kinds())
    for name, cls in kinds().items():
        assert issubclass(cls, Problem) and cls.kind == name


def test_there_are_named_instances_of_every_kind():
    assert len(NAMED) >= 22
    assert {load(n).kind for n in NAMED} == set(kinds())
    assert named_paths()["tiny-pf-mapping"] == REPO / "instances" / "mapping" / "tiny-pf-mapping.toml"


@pytest.mark.parametrize("name", NAMED)
def test_every_named_instance_loads_and_its_baseline_evaluates(name):
    """load, then evaluate (the record of the baseline's assessment): the keys every record carries
    (issue 28 item 3), a feasible baseline with a finite positive objective."""
    p = load(name)
    assert p.name == name and p.description and p.source == named_paths()[name]
    assert p.space_size() >= 1 and p.decisions()
    rec = records.evaluation(p, p.assess(p.parse_design(p.baseline()))).as_dict()
    assert {"design", "metrics", "objective", "feasible", "lints"} <= set(rec)
    assert rec["kind"] == p.kind and rec["instance"] == name
    assert rec["feasible"] is True, rec["violations"]
    assert math.isfinite(rec["objective"]) and rec["objective"] > 0
    assert rec["objective"] == pytest.approx(rec["metrics"][p.metric], rel=1e-12)


@pytest.mark.parametrize("name", ["tiny-3d-llama8b", "tiny-pf-mapping", "tiny-placement-mixtral"])
def test_a_problem_is_its_data(name, named):
    p = named(name)
    again = from_data(p.data, source="copy")
    assert type(again) is type(p) and again.content_hash == p.content_hash
    by_path = load(named_paths()[name])
    assert by_path.content_hash == p.content_hash


def test_file_kind_reads_the_kind_key():
    assert file_kind(named_paths()["tiny-3d-llama8b"]) is None
    assert file_kind(named_paths()["tiny-pf-mapping"]) == "mapping"
    assert file_kind(named_paths()["tiny-placement-mixtral"]) == "placement"


def test_an_unknown_kind_is_named_with_a_did_you_mean(tmp_path):
    with pytest.raises(InputError) as info:
        kind_class("maping")
    assert info.value.key == "kind" and info.value.suggestion == "did you mean 'mapping'?"
    f = tmp_path / "m.toml"
    f.write_text(named_paths()["tiny-pf-mapping"].read_text().replace('kind = "mapping"', 'kind = "maping"'))
    with pytest.raises(InputError) as info:
        load(f)
    assert info.value.file == str(f) and info.value.value == "maping"
    with pytest.raises(InputError):
        from_data({"kind": "nope", "name": "x"})


def test_a_kind_that_is_not_a_string_is_an_unknown_kind():
    # a record's instance_data.kind edited into a table was a TypeError (unhashable dict)
    for kind in ({"x": 1}, ["mapping"], 3):
        with pytest.raises(InputError, match="unknown instance kind"):
            kind_class(kind)


def test_a_path_the_system_cannot_look_up_is_bad_input(tmp_path):
    # a name over 255 bytes and a symlink loop: Path.is_dir raises OSError on both
    with pytest.raises(InputError, match="cannot read the instance file: File name too long"):
        resolve(tmp_path / ("x" * 300))
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match="cannot read the instance file"):
        resolve(loop)


def test_an_unknown_name_suggests_the_closest():
    with pytest.raises(InputError) as info:
        load("tiny-3d-llama8")
    assert info.value.suggestion == "did you mean 'tiny-3d-llama8b'?"
    assert "codesign instances" in (info.value.expected or "")


def test_a_directory_is_not_an_instance(tmp_path):
    with pytest.raises(InputError, match="a directory, not an instance file"):
        load(tmp_path)


def test_a_file_that_is_not_toml_is_refused(tmp_path):
    f = tmp_path / "inst.txt"
    f.write_text("name = 'x'\n")
    with pytest.raises(InputError, match=r"suffix \.toml"):
        load(f)


def test_a_missing_path_is_not_found(tmp_path):
    with pytest.raises(InputError, match="instance file not found"):
        resolve(tmp_path / "none.toml")
    with pytest.raises(InputError, match="instance file not found"):
        resolve("some/dir/none")


def test_instance_data_must_be_a_table():
    with pytest.raises(InputError, match="an instance is a table"):
        from_data([1, 2])  # type: ignore[arg-type]
