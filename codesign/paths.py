"""Where the shipped data lives: named instances and the catalog.

In a wheel the repository's ``instances/`` directory is installed as ``codesign/_instances``;
in a source checkout (editable install, tests) it is ``<repo>/instances``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def instances_dir() -> Path:
    """Directory holding the named instances (``*.toml``) and ``catalog/``."""
    packaged = Path(__file__).resolve().parent / "_instances"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "instances"


def catalog_dir(kind: str) -> Path:
    """Catalog sub-directory: ``workloads``, ``chips``, ``memory``, ``interconnects``, ``appliances``."""
    return instances_dir() / "catalog" / kind
