"""Names people write for catalog entries, read as catalog ids.

A measurement file written by someone else names its model ``meta-llama/Llama-3.1-70B-Instruct``
or ``Llama-3.3-70B-Instruct-FP8`` and its GPU ``NVIDIA H100 80GB HBM3``; the catalog says
``llama-3.1-70b`` and ``h100-sxm``. :func:`resolve_name` reads such a name as an id: the id itself,
or one of the entry's ``aliases`` (a list in its TOML file), compared after :func:`normalized_name`
(case, separators, the Hugging Face organisation, and decorations that do not change the
architecture: ``-Instruct``, ``-FP8``, a ``-v0.1`` revision and, for models, a four-digit release
tag). Nothing is
guessed beyond that: a name that normalises to no entry, or to two, is not resolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: leading words that name the vendor, not the entry ("meta-llama-3.1-70b" is llama-3.1-70b)
_PREFIXES = ("nvidia-", "amd-instinct-", "amd-", "meta-")
#: trailing words that decorate a checkpoint without changing the architecture
_SUFFIXES = (
    "instruct", "chat", "hf", "it", "base", "fp8", "fp4", "nvfp4", "mxfp4", "bf16", "fp16", "dynamic", "kv",
)
#: a checkpoint revision (-v0.1, -v0.3: Mistral's); not -v3 or -v3.1, which name DeepSeek models
_REVISION = re.compile(r"-v0(\.\d+)+$")
#: a four-digit release tag of a checkpoint (-2507, -0528); models only: GPU names end in model
#: numbers (RTX PRO 6000)
_RELEASE_TAG = re.compile(r"-\d{4}$")


def normalized_name(text: str, *, release_tags: bool = True) -> str:
    """Lower case, the Hugging Face organisation dropped, runs of other characters than letters,
    digits and dots made one ``-``, vendor prefixes and decoration suffixes removed (with
    ``release_tags``, also a trailing four-digit release tag: for model names, not GPU names)."""
    t = text.strip().lower().rsplit("/", 1)[-1]
    t = re.sub(r"[^a-z0-9.]+", "-", t).strip("-")
    for p in _PREFIXES:
        if t.startswith(p) and len(t) > len(p):
            t = t[len(p):]
    while True:
        stripped = _REVISION.sub("", t)
        if release_tags:
            stripped = _RELEASE_TAG.sub("", stripped)
        head, _, last = stripped.rpartition("-")
        if head and last in _SUFFIXES:
            stripped = head
        if stripped == t:
            return t
        t = stripped


def alias_index(entries: Mapping[str, Iterable[str]], *, release_tags: bool = True) -> dict[str, set[str]]:
    """normalised name -> the ids it names, from {id: aliases} (each id is its own alias)."""
    index: dict[str, set[str]] = {}
    for eid, aliases in entries.items():
        for name in (eid, *aliases):
            index.setdefault(normalized_name(name, release_tags=release_tags), set()).add(eid)
    return index


def resolve_name(name: str, entries: Mapping[str, Iterable[str]], *, release_tags: bool = True,
                 index: dict[str, set[str]] | None = None) -> str | None:
    """The id ``name`` stands for among ``entries`` ({id: aliases}), or None if it names none or
    more than one. An exact id always wins. ``index``: ``alias_index(entries)`` if already built."""
    if name in entries:
        return name
    if index is None:
        index = alias_index(entries, release_tags=release_tags)
    ids = index.get(normalized_name(name, release_tags=release_tags), set())
    return next(iter(ids)) if len(ids) == 1 else None
