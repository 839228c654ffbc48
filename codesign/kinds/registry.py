"""The registry of instance kinds: which :class:`~codesign.kinds.base.Problem` class reads which
files, and loading any instance by name, path or content.

Each kind's ``problem`` module registers its class with :func:`codesign.kinds.base.register`; this module imports the
kinds codesign ships, so loading through it knows them all.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from codesign.errors import InputError, did_you_mean
from codesign.kinds.base import _KINDS, DEFAULT_KIND, Problem
from codesign.model.calibration import CalibrationSet
from codesign.paths import instances_dir
from codesign.schema import load_toml


def kinds() -> dict[str, type[Problem]]:
    return dict(_KINDS)


def kind_class(kind: str | None, *, file: Path | str | None = None) -> type[Problem]:
    name = DEFAULT_KIND if kind is None else kind
    if not isinstance(name, str) or name not in _KINDS:
        raise InputError("unknown instance kind", file=file, key="kind", value=kind,
                         expected=f"{' | '.join(k for k in _KINDS if k != DEFAULT_KIND)}, or no kind for a "
                                  "hardware/schedule instance",
                         suggestion=did_you_mean(str(kind), list(_KINDS)))
    return _KINDS[name]


def named_paths() -> dict[str, Path]:
    """Every named instance (``instances/*.toml`` and ``instances/mapping/*.toml``) by name."""
    root = instances_dir()
    out: dict[str, Path] = {}
    for directory in (root, root / "mapping"):
        for p in sorted(directory.glob("*.toml")):
            out.setdefault(p.stem, p)
    return out


def resolve(name_or_path: str | Path) -> Path:
    """The file of a named instance, or a path given as such (InputError naming what is wrong)."""
    p = Path(name_or_path)
    text = str(name_or_path)
    st = _stat(p)
    if p.suffix == ".toml" and isinstance(st, os.stat_result) and stat.S_ISREG(st.st_mode):
        return p
    named = named_paths()
    if text in named:
        return named[text]
    if isinstance(st, OSError):  # a name too long, a symlink loop, no permission
        raise InputError(f"cannot read the instance file: {st.strerror or st}", file=p)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError("a directory, not an instance file", file=p, expected="a .toml instance file or a named instance")
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise InputError("not a regular file", file=p, expected="a .toml instance file")
        raise InputError("an instance file is TOML with the suffix .toml", file=p, expected="a .toml file")
    if p.suffix == ".toml" or "/" in text:
        raise InputError("instance file not found", file=p)
    raise InputError(f"unknown instance {text!r}",
                     expected="a named instance (see `codesign instances`) or a path to a .toml file",
                     suggestion=did_you_mean(text, list(named)))


def _stat(p: Path) -> os.stat_result | OSError | None:
    """``p``'s status; None if nothing is there; the error if the name cannot be looked up."""
    try:
        return os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return exc
    except ValueError:  # a NUL character
        return None


def file_kind(path: Path) -> str | None:
    """The ``kind`` an instance file declares (None: a hardware/schedule grid)."""
    kind = load_toml(path).get("kind")
    kind_class(kind, file=path)  # an unknown kind is named here, not as a missing key later
    return kind


def load(name_or_path: str | Path, *, calibration: CalibrationSet | None = None) -> Problem:
    """Load a named instance or an instance file of any registered kind."""
    path = resolve(name_or_path)
    return kind_class(file_kind(path), file=path).load(path, calibration=calibration)


def from_data(data: dict[str, Any], *, source: str = "<data>", calibration: CalibrationSet | None = None) -> Problem:
    """A problem from an instance's content (a record's ``instance_data``)."""
    if not isinstance(data, dict):
        raise InputError("an instance is a table", file=source, value=type(data).__name__)
    return kind_class(data.get("kind"), file=source).from_data(data, source=source, calibration=calibration)


# the kinds codesign ships (each registers itself on import)
from codesign.kinds.dlrm import problem as _dlrm  # noqa: E402, F401
from codesign.kinds.grid import problem as _grid  # noqa: E402, F401
from codesign.kinds.mapping import problem as _mapping  # noqa: E402, F401
from codesign.kinds.placement import problem as _placement  # noqa: E402, F401
from codesign.kinds.training import problem as _training  # noqa: E402, F401
