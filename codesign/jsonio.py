"""JSON in and out: plain values only (numpy scalars unwrapped, non-finite floats as strings),
files written atomically (temp file in the same directory, then rename)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def jsonable(x: Any) -> Any:
    """Plain-JSON copy: numpy scalars/arrays unwrapped, NaN -> None, ±inf -> "inf"/"-inf"."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, str | bytes):
        return jsonable(x.tolist())
    if hasattr(x, "item") and not isinstance(x, str | bytes):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def dumps(data: Any) -> str:
    return json.dumps(jsonable(data), indent=2)


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically: readers see the old or the new file."""
    write_text_atomic(path, dumps(data) + "\n")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same directory, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: str | Path) -> Any:
    from codesign.errors import InputError

    path = Path(path)
    if not path.exists():
        raise InputError("file not found", file=path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc}", file=path) from None


def results_to_extend(path: str | Path, made_from: dict[str, Any], section: str) -> dict[str, Any]:
    """A results file to add named runs to: the one at ``path`` when it was made from the same
    inputs (each key of ``made_from`` equal), so the runs it holds and this one does not re-measure
    are kept; else a fresh one. ``section`` is the dict of runs, copied so the caller may extend it."""
    fresh: dict[str, Any] = {**made_from, section: {}}
    path = Path(path)
    if not path.exists():
        return fresh
    kept = json.loads(path.read_text())
    if any(kept.get(k) != v for k, v in made_from.items()):
        return fresh
    return {**kept, section: dict(kept.get(section, {}))}
