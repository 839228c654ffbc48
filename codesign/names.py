"""Names people write for catalog entries, read as catalog ids.

A measurement file written by someone else names its model ``meta-llama/Llama-3.1-70B-Instruct``
or ``Llama-3.3-70B-Instruct-FP8`` and its GPU ``NVIDIA H100 80GB HBM3``; the catalog says
``llama-3.1-70b`` and ``h100-sxm``. :func:`resolve_name` reads such a name as an id: the id itself,
or one of the entry's ``aliases`` (a list in its TOML file), compared after :func:`normalized_name`
(case, separators, the Hugging Face organisation, and decorations that do not change the
architecture: ``-Instruct``, ``-FP8``, a dotted ``-v0.1`` version, a four-digit release tag). Nothing is
guessed beyond that: a name that normalises to no entry, or to two, is not resolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: leading words that name the vendor, not the entry ("meta-llama-3.1-70b" is llama-3.1-70b)
_PREFIXES = ("nvidia-", "amd-instinct-", "amd-", "meta-")
#: trailing words that decorate a checkpoint without changing the architecture
_SUFFIXES = (
    "instruct", "chat", "hf", "it", "base", "fp8", "fp4", "nvfp4", "bf16", "fp16", "dynamic", "kv",
)
_VERSION = re.compile(r"-(v\d+(\.\d+)+|\d{4})$")  # -v0.1, -v0.3 (not -v3: DeepSeek-V3), -2507 (release tags)


def normalized_name(text: str) -> str:
    """Lower case, the Hugging Face organisation dropped, runs of other characters than letters,
    digits and dots made one ``-``, vendor prefixes and decoration suffixes removed."""
    t = text.strip().lower().rsplit("/", 1)[-1]
    t = re.sub(r"[^a-z0-9.]+", "-", t).strip("-")
    for p in _PREFIXES:
        if t.startswith(p) and len(t) > len(p):
            t = t[len(p):]
    while True:
        stripped = _VERSION.sub("", t)
        head, _, last = stripped.rpartition("-")
        if head and last in _SUFFIXES:
            stripped = head
        if stripped == t:
            return t
        t = stripped


def alias_index(entries: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """normalised name -> the ids it names, from {id: aliases} (each id is its own alias)."""
    index: dict[str, set[str]] = {}
    for eid, aliases in entries.items():
        for name in (eid, *aliases):
            index.setdefault(normalized_name(name), set()).add(eid)
    return index


def resolve_name(name: str, entries: Mapping[str, Iterable[str]]) -> str | None:
    """The id ``name`` stands for among ``entries`` ({id: aliases}), or None if it names none or
    more than one. An exact id always wins."""
    if name in entries:
        return name
    ids = alias_index(entries).get(normalized_name(name), set())
    return next(iter(ids)) if len(ids) == 1 else None
