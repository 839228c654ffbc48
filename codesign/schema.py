"""Shared pydantic base, reading input files, and TOML loading with precise error messages.

Every file codesign reads goes through :func:`read_input` (a regular file of bounded size, never a
FIFO or a device) and, for TOML, :func:`load_toml` (bounded nesting, finite numbers) and
:func:`validate`, so a bad file always yields an :class:`~codesign.errors.InputError` naming
file, key path, value and expectation.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from codesign.errors import InputError, did_you_mean

M = TypeVar("M", bound=BaseModel)

#: the largest TOML or JSON file codesign reads (bytes); instance, catalog, design, calibration and
#: record files are kilobytes
MAX_FILE_BYTES = 16 * 2**20
#: the deepest nesting of tables and lists a TOML or JSON input may have (records nest ~6 deep)
MAX_DEPTH = 32
#: TOML integers are 64-bit (the TOML spec); JSON inputs are held to the same range
INT_RANGE = (-(2**63), 2**63 - 1)
#: the longest string (value or key) an input may hold: the longest shipped one is ~1,000
#: characters (a workload's notes), and a 100,000-character provenance took `show` a minute to wrap
MAX_STRING = 10_000


class Strict(BaseModel):
    """Base for every schema: unknown keys are errors, objects are immutable, numbers finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False, allow_inf_nan=False)


# --- names that become file names ---------------------------------------------------------------
#: an instance name: it names files (``<name>.json``, ``<name>.mps``), so no path, no separator
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NAME_EXPECTED = ("letters, digits, '.', '_' and '-', starting with a letter or a digit, at most 128 characters "
                 "(it becomes a file name)")


def check_name(value: str) -> str:
    """``value`` if it is a valid instance name (:data:`NAME_PATTERN`), else ValueError."""
    if not NAME_PATTERN.fullmatch(value) or value.endswith("."):
        raise ValueError(f"not a name: expected {NAME_EXPECTED}")
    return value


#: a pydantic field type: an instance name (:func:`check_name`)
InstanceName = Annotated[str, AfterValidator(check_name)]


def as_name(text: str) -> str:
    """``text`` made an instance name (:func:`check_name`): every run of other characters one
    '-', at most 128 characters, no leading or trailing punctuation ("x" if nothing is left)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:128].strip("-._")
    return name or "x"


# --- reading files --------------------------------------------------------------------------------
_FILE_TYPES = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int) -> str:
    return next((what for test, what in _FILE_TYPES if test(mode)), "not a regular file")


def read_input(path: str | Path, *, what: str = "file", expected: str | None = None,
               limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of an input file. Only a regular file of at most ``limit`` bytes is read: a
    directory, a FIFO, a device or a socket is refused before it is opened (a FIFO would block, a
    device never end), and the file is opened without blocking and checked again once open.
    Every refusal is an InputError naming the file (``what`` says what it should have been)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{what} not found", file=path, expected=expected) from None
    except OSError as exc:  # a symlink loop, a name too long, no permission
        raise InputError(f"cannot read the {what}: {exc.strerror or exc}", file=path, expected=expected) from None
    except ValueError:  # a NUL character: no file has such a name
        raise InputError(f"{what} not found: a file name has no NUL character", file=path, expected=expected) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"a directory, not a {what}", file=path, expected=expected) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{_not_regular(st.st_mode)}, not a {what}: only regular files are read", file=path,
                         expected=expected) from None
    if st.st_size > limit:
        raise _too_big(path, what, st.st_size, limit)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"cannot read the {what}: {exc.strerror or exc}", file=path, expected=expected) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):  # replaced between the check and the open
            raise InputError(f"{_not_regular(mode)}, not a {what}: only regular files are read", file=path,
                             expected=expected)
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise InputError(f"cannot read the {what}: {exc.strerror or exc}", file=path, expected=expected) from None
    if len(data) > limit:
        raise _too_big(path, what, len(data), limit)
    return data


def is_file(path: str | Path) -> bool:
    """Whether ``path`` names a regular file; False, never an error, for a name too long, a
    symlink loop or a NUL character (``Path.is_file`` raises on the first and the last)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _too_big(path: Path, what: str, size: int, limit: int) -> InputError:
    return InputError(f"too large for a {what}: more than {limit:,} bytes", file=path, value=f"{size:,} bytes",
                      expected=f"at most {limit:,} bytes")


def input_text(path: str | Path, data: bytes, *, what: str, expected: str | None = None) -> str:
    """``data`` (the bytes of ``path``) as text: UTF-8, a leading byte-order mark dropped."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not a {what}: not UTF-8 text (byte {exc.start})", file=path, expected=expected) from None


def check_values(data: Any, *, file: str | Path, what: str = "file", unbounded: frozenset[str] = frozenset()) -> None:
    """Every number in ``data`` (parsed TOML or JSON) is finite and a 64-bit integer where it is an
    integer, every string and key at most :data:`MAX_STRING` characters, and tables and lists nest
    at most :data:`MAX_DEPTH` deep; else an InputError naming the key. A key named in ``unbounded``
    may hold ``+inf`` (a limit that is not there: a calibration's ``memory_bandwidth_cap_GBps``)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        value, at = stack.pop()
        if len(at) > MAX_DEPTH:
            raise InputError(f"nested too deeply for a {what} (more than {MAX_DEPTH} levels)", file=file,
                             key=_key_path(at[:MAX_DEPTH]) + "...", expected=f"at most {MAX_DEPTH} levels of tables and lists")
        if isinstance(value, dict):
            for k in value:
                if isinstance(k, str) and len(k) > MAX_STRING:
                    raise InputError(f"a key longer than {MAX_STRING:,} characters", file=file, key=_key_path(at) or None,
                                     value=f"{k[:40]}... ({len(k):,} characters)", expected=f"at most {MAX_STRING:,}")
            stack.extend((v, (*at, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*at, i)) for i, v in enumerate(value))
        elif isinstance(value, str) and len(value) > MAX_STRING:
            raise InputError(f"a string longer than {MAX_STRING:,} characters", file=file, key=_key_path(at) or None,
                             value=f"{value[:40]}... ({len(value):,} characters)", expected=f"at most {MAX_STRING:,}")
        elif isinstance(value, float) and not math.isfinite(value) and not (
                value == math.inf and at and isinstance(at[-1], str) and at[-1] in unbounded):
            raise InputError("not a finite number", file=file, key=_key_path(at) or None, value=value,
                             expected="a finite number (no nan or inf)")
        elif isinstance(value, int) and not isinstance(value, bool) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise InputError("an integer out of the 64-bit range", file=file, key=_key_path(at) or None,
                             value=f"{str(value)[:20]}... ({len(str(value))} digits)", expected="|n| < 2**63")


def load_toml(path: str | Path, *, unbounded: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Read a TOML file (:func:`read_input`); a syntax error becomes an InputError naming the file
    and line; non-finite numbers (but ``+inf`` at a key in ``unbounded``), integers beyond 64 bits,
    over-long strings and nesting deeper than :data:`MAX_DEPTH` are refused (:func:`check_values`)."""
    path = Path(path)
    expected = "a .toml file"
    text = input_text(path, read_input(path, what="TOML file", expected=expected), what="TOML file", expected=expected)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", file=path) from None
    except RecursionError:
        raise InputError(f"not valid TOML: nested too deeply (more than {MAX_DEPTH} levels)", file=path) from None
    except ValueError as exc:  # a number Python refuses to convert (an integer of thousands of digits)
        raise InputError(f"not valid TOML: {exc}", file=path) from None
    check_values(data, file=path, what="TOML file", unbounded=unbounded)
    return data


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the field addressed by ``loc[:-1]`` (best effort)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return None
        ann = field.annotation
        nxt = None
        for cand in (ann, *getattr(ann, "__args__", ())):
            for sub in (cand, *getattr(cand, "__args__", ())):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    nxt = sub
        current = nxt if nxt is not None else current
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def validate(model: type[M], data: Any, *, file: str | Path | None = None, prefix: str = "") -> M:
    """Validate ``data`` against ``model``; the first error becomes an InputError.

    Unknown keys get a did-you-mean from the fields of the model that owns them.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err.get("loc", ()))
        key = _key_path(loc)
        if prefix:
            key = f"{prefix}.{key}" if key else prefix
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            owner = _model_at(model, loc)
            choices = list(owner.model_fields) if owner else []
            hint = did_you_mean(str(loc[-1]), choices) if loc else None
            raise InputError(
                "unknown key",
                file=file,
                key=key,
                expected="one of: " + ", ".join(choices) if choices else None,
                suggestion=hint,
            ) from None
        if kind == "missing":
            raise InputError("required key is missing", file=file, key=key) from None
        value = err.get("input")
        if isinstance(value, dict):
            value = None
        msg = err.get("msg", "invalid value")
        msg = msg.removeprefix("Value error, ")
        raise InputError(msg, file=file, key=key, value=value) from None
