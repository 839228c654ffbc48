"""Shared pydantic base and TOML loading with precise error messages.

Every file codesign reads goes through :func:`load_toml` and :func:`validate`, so a bad file
always yields an :class:`~codesign.errors.InputError` naming file, key path, value and expectation.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from codesign.errors import InputError, did_you_mean

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every schema: unknown keys are errors, objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; a syntax error becomes an InputError naming the file and line."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise InputError("file not found", file=path) from None
    except IsADirectoryError:
        raise InputError("a directory, not a TOML file", file=path, expected="a .toml file") from None
    except UnicodeDecodeError:
        raise InputError("not a TOML file: not UTF-8 text", file=path, expected="a .toml file") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", file=path) from None


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
