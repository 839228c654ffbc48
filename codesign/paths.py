"""Where the shipped data lives: named instances and the catalog.

In a wheel the repository's ``instances/`` directory is installed as ``codesign/_instances``;
in a source checkout (editable install, tests) it is ``<repo>/instances``. ``$CODESIGN_INSTANCES``
names another such directory (named instances and a ``catalog/``): a user's own chips, models and
instances, with a non-editable install too.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from codesign.errors import InputError

#: environment variable naming a directory of named instances and its ``catalog/``
INSTANCES_ENV = "CODESIGN_INSTANCES"


@cache
def instances_dir() -> Path:
    """Directory holding the named instances (``*.toml``) and ``catalog/``."""
    chosen = os.environ.get(INSTANCES_ENV, "").strip()
    if chosen:
        path = Path(chosen).expanduser()
        if not (path / "catalog").is_dir():
            raise InputError("not a directory of instances with a catalog/", file=path, key=f"${INSTANCES_ENV}",
                             expected="a copy of the repository's instances/ (named instances and catalog/)")
        return path
    packaged = Path(__file__).resolve().parent / "_instances"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "instances"


def catalog_dir(kind: str) -> Path:
    """Catalog sub-directory: ``workloads``, ``chips``, ``memory``, ``interconnects``, ``appliances``."""
    return instances_dir() / "catalog" / kind


#: environment variable naming where ``solve --save`` writes when no ``--out-dir`` is given
DATA_ENV = "CODESIGN_DATA"


def user_solutions_dir() -> Path:
    """Where ``solve --save`` writes by default and ``certify`` looks for stored bounds:
    ``$CODESIGN_DATA/solutions``, else ``$XDG_DATA_HOME/codesign/solutions``, else
    ``~/.local/share/codesign/solutions`` (never a checkout's tracked ``solutions/``)."""
    chosen = os.environ.get(DATA_ENV, "").strip()
    if chosen:
        return Path(chosen).expanduser() / "solutions"
    base = os.environ.get("XDG_DATA_HOME", "").strip() or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "codesign" / "solutions"
