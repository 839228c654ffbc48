"""JSON in and out: plain values only (numpy scalars unwrapped, non-finite floats as strings),
files written atomically (temp file in the same directory, then rename)."""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from codesign.errors import InputError
from codesign.schema import MAX_DEPTH, check_values, input_text, read_input


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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: the process umask, read once at import (reading it sets it for an instant)
_UMASK = _umask()
#: system errors that say the path is the problem (the user's input), not the machine
_PATH_ERRORS = (errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EROFS)


def _path_error(exc: OSError, path: Path) -> Exception:
    if exc.errno in _PATH_ERRORS:
        return InputError(f"cannot write here: {exc.strerror or exc}", file=path,
                          suggestion="choose a directory you can write to")
    return exc


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write in full; on leaving the block it is renamed onto
    ``path`` (readers see the old file or the new one), with the permissions the file had (a new
    one: those a plain write gives it), or removed if the block raised. A path that cannot be
    written is bad input (``InputError``: the path and the system's reason); a full disk or an I/O
    error is not, and propagates."""
    path = Path(path)
    if path.is_dir():
        raise InputError("cannot write a file: the path is a directory", file=path,
                         suggestion=f"give a file name inside it, e.g. {path / ('out' + (path.suffix or '.json'))}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise _path_error(exc, path) from None
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except OSError as exc:
        raise _path_error(exc, path) from None
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably (:func:`atomic_output`)."""
    with atomic_output(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


class _NonFinite(ValueError):
    """A NaN or Infinity literal in JSON (not JSON; Python's reader would take it)."""


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def read_json(path: str | Path, *, what: str = "JSON file") -> Any:
    """A JSON input file, parsed: a regular file of bounded size (``schema.read_input``: never a
    FIFO or a device), UTF-8 text, valid JSON without NaN or Infinity, numbers finite and 64-bit
    integers, nesting at most ``schema.MAX_DEPTH`` deep (``schema.check_values``); anything else
    is an InputError naming the file (and the key)."""
    path = Path(path)
    expected = "a JSON file"
    text = input_text(path, read_input(path, what=what, expected=expected), what=what, expected=expected)
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc}", file=path, expected=expected) from None
    except _NonFinite as exc:
        raise InputError(f"not valid JSON: {exc} is not a JSON number", file=path, value=str(exc),
                         expected="finite numbers (codesign writes a non-finite value as the string \"inf\")") from None
    except RecursionError:
        raise InputError(f"not valid JSON: nested too deeply (more than {MAX_DEPTH} levels)", file=path) from None
    except ValueError as exc:  # a number Python refuses to convert (an integer of thousands of digits)
        raise InputError(f"not valid JSON: {exc}", file=path, expected=expected) from None
    check_values(data, file=path, what=what)
    return data


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
