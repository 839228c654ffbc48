"""User-facing errors: every message names the file, the key path, the value and what was expected.

The CLI turns a :class:`InputError` into a message on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


class InputError(Exception):
    """Bad user input (a file, a key, a value, a command-line argument).

    Attributes:
        file: the file the bad input came from, if any.
        key: dotted key path inside that file (``hardware.dram_layers``), if any.
        value: the offending value, if any.
        expected: what would have been accepted.
        suggestion: a did-you-mean or a hint.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        key: str | None = None,
        value: object = None,
        expected: str | None = None,
        suggestion: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.key = key
        self.value = value
        self.expected = expected
        self.suggestion = suggestion

    def __str__(self) -> str:
        parts = []
        where = ":".join(p for p in (self.file, self.key) if p)
        parts.append(f"{where}: {self.message}" if where else self.message)
        if self.value is not None:
            parts.append(f"  got: {self.value!r}")
        if self.expected:
            parts.append(f"  expected: {self.expected}")
        if self.suggestion:
            parts.append(f"  hint: {self.suggestion}")
        return "\n".join(parts)


class ModelError(Exception):
    """An internal inconsistency (a verification failure): a bug, never a user error."""


def did_you_mean(name: str, choices: Iterable[str]) -> str | None:
    """Return ``"did you mean 'x'?"`` for the closest of ``choices``, or None."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None
