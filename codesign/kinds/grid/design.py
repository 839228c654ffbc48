"""A design of a grid instance as people write it: nested or dotted keys, values as text or
numbers, checked against the instance's decisions and filled from its baseline."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from codesign.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from codesign.kinds.grid.spec import Decision, Instance


def flatten_design(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"llama": {"tp": 8}}`` -> ``{"llama.tp": 8}``; an empty table stays a value (``tp = {}``
    is a value of the wrong type, not nothing)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_design(v, key + "."))
        else:
            out[key] = v
    return out


def parse_design(
    inst: Instance, design: dict[str, Any], *, source: str = "design", prefix: str = ""
) -> dict[str, Any]:
    """Validate a (possibly partial) design against the instance's decisions.

    Missing decisions take the baseline's value; unknown names and values outside a decision's
    domain are InputErrors naming the key, the value and the domain.
    """
    flat = flatten_design(design)
    full = inst.baseline()
    for key, value in flat.items():
        dec = inst.decision_index.get(key)
        if dec is None:
            raise InputError(
                "unknown decision",
                file=source,
                key=prefix + key,
                value=value,
                expected="one of: " + ", ".join(inst.decision_index),
                suggestion=did_you_mean(key, inst.decision_index),
            )
        value = _coerce(value, dec, source, prefix)
        if value not in dec.domain or (isinstance(value, bool) and not isinstance(dec.domain[0], bool)):
            raise InputError(
                "value outside the decision's domain",
                file=source,
                key=prefix + key,
                value=value,
                expected=f"one of {list(dec.domain)}",
            )
        full[key] = value
    return full


def _coerce(value: Any, dec: Decision, source: str, prefix: str) -> Any:
    """A design value read by its decision's type: true/false for a flag (``"true"`` and
    ``"false"`` as text too), an integer for a count (``"8"`` and ``8.0`` too), a finite number
    for a real, a name for a name; anything else is an InputError naming the decision."""
    sample = dec.domain[0]

    def refuse(what: str) -> InputError:
        domain = [str(x).lower() if isinstance(x, bool) else x for x in dec.domain]
        return InputError(what, file=source, key=prefix + dec.name, value=value, expected=f"one of {domain}")

    if isinstance(sample, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise refuse("not true or false")
    if isinstance(value, bool) and not isinstance(sample, str):
        raise refuse("a flag (true/false) where a number is expected")
    if isinstance(sample, int):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                if not _numeric(value):
                    raise refuse("not a number") from None
        raise refuse("not an integer")
    if isinstance(sample, float):
        try:
            number = float(value.strip()) if isinstance(value, str) else value
        except ValueError:
            raise refuse("not a number") from None
        if not isinstance(number, int | float) or not math.isfinite(number):
            raise refuse("not a finite number")
        return float(number)
    if not isinstance(value, str):
        raise refuse("not a name")
    return value


def _numeric(text: str) -> bool:
    try:
        return float(text) is not None
    except ValueError:
        return False
