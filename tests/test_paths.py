"""codesign.paths: where the shipped data lives and where ``solve --save`` writes by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from codesign import paths
from codesign.errors import InputError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_instances_dir():
    paths.instances_dir.cache_clear()
    yield
    paths.instances_dir.cache_clear()


def test_a_checkout_reads_its_instances_directory(fresh_instances_dir, monkeypatch):
    monkeypatch.delenv(paths.INSTANCES_ENV, raising=False)
    d = paths.instances_dir()
    assert (d / "tiny-3d-llama8b.toml").is_file() and (d / "catalog").is_dir()
    assert paths.catalog_dir("chips") == d / "catalog" / "chips"


def test_codesign_instances_names_another_directory(fresh_instances_dir, monkeypatch, tmp_path):
    (tmp_path / "catalog").mkdir()
    monkeypatch.setenv(paths.INSTANCES_ENV, str(tmp_path))
    assert paths.instances_dir() == tmp_path


def test_a_directory_without_a_catalog_is_refused(fresh_instances_dir, monkeypatch, tmp_path):
    monkeypatch.setenv(paths.INSTANCES_ENV, str(tmp_path))
    with pytest.raises(InputError, match="catalog/") as info:
        paths.instances_dir()
    assert info.value.key == f"${paths.INSTANCES_ENV}"


def test_solutions_go_to_codesign_data_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert paths.user_solutions_dir() == tmp_path / "data" / "solutions"
    monkeypatch.delenv(paths.DATA_ENV)
    assert paths.user_solutions_dir() == tmp_path / "xdg" / "codesign" / "solutions"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.user_solutions_dir() == tmp_path / "home" / ".local" / "share" / "codesign" / "solutions"


def test_the_default_is_never_a_checkouts_solutions(monkeypatch):
    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    assert paths.user_solutions_dir().resolve() != (REPO / "solutions").resolve()
