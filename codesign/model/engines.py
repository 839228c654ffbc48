"""Serving-engine profiles: the rules of one engine release, kept out of the physics.

A profile is one TOML file ``instances/catalog/engines/<name>.toml``. It states, for the engine it
names, the rules the model applies on top of the engine-free physics:

- ``max_batch_size``: sequences one executor runs at most when the engine's own build is not
  known (a cap on the batch; per executor, so per micro-batch and per attention-DP rank);
- ``max_num_tokens``: tokens one iteration may carry (model.md eq. 4.19);
- ``decoder_state``: ``"trtllm"`` charges each sequence slot the decoding state TensorRT-LLM's
  runtime allocates before it sizes the KV cache (``schedule.decoder_state_per_slot_B``, eq.
  4.14b); ``"none"`` charges none;
- ``kv_cache``: the KV cache's precision when a workload does not state one: ``"fp8-for-fp8-fp4"``
  (FP8 for FP8 and NVFP4 checkpoints), ``"16-bit"`` (the model's 16-bit activation dtype, BF16, for
  weights below 16 bit) or ``"weights"`` (the weights' precision, a weight-only format's 16-bit math:
  the physics' default);
- ``allreduce``: the TP all-reduce profile (``system.allreduce``: nccl, fastest or one pinned);
- ``allreduce_bands``: the engine's all-reduce by message size, per TP size: ``tp<N> = [[below_B,
  algorithm], ...]`` (bounds ascending; a message of at least the last bound, or a TP size not
  listed, runs ``allreduce``, which must then be "nccl"; collectives.by_size). A profile with
  bands on a chip has the all-reduce rule of its own name (``system.allreduce`` may name it);
- ``ep_dispatch``: how MoE tokens reach their experts under EP: ``"gather"`` (every rank gathers
  every token) or ``"fewer-bytes"`` (all-to-all where it moves fewer bytes, EP > top-k: eq. 4.6a);
- ``host_us_per_sequence``: the engine's host time per sequence of a step, in microseconds
  (scheduling, sampling and bookkeeping of each request on the CPU, not hidden behind the GPU's
  work; eq. 5.3's host term). It adds to the calibration's own ``host_us_per_sequence`` (0 in the
  shipped calibration; ``codesign calibrate --fit-host`` fits it on top of the engine's): the
  hardware column ``s_per_sequence`` is their sum (:func:`host_us_per_sequence`).

Every rule a file gives cites its source in ``[sources]`` (``rule = "owner/repo@commit:path ..."``)
or states why its value is assumed in ``[assumed]``; a rule the file leaves out is unknown and is
not applied. ``[[tier]]`` tables override rules for chips with less memory than ``below_GiB`` (or
whose id contains one of ``chips``): the first tier that matches applies. ``extends`` names a
profile whose rules this one starts from (a variant: one rule changed).

"No engine" (:data:`PHYSICS`) applies none of these rules: no batch cap, no token budget, no
decoding state, the weights' KV precision, no host time, EP by all-to-all where it moves fewer bytes, and the TP
all-reduce of least alpha-beta time the topology supports (:data:`PHYSICS_ALLREDUCE`, model.md
eq. 3.17c); a profile that leaves a rule out gets the physics' for it (docs/instance-file.md,
``system.engine``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from codesign.catalog import engine_names, load_chip
from codesign.errors import InputError, did_you_mean
from codesign.model.topology import ALGORITHMS, ALLREDUCE_MODES
from codesign.model.units import BYTES_PER_ELEMENT
from codesign.paths import catalog_dir
from codesign.schema import load_toml

RULES = ("max_batch_size", "max_num_tokens", "decoder_state", "kv_cache", "allreduce", "allreduce_bands",
         "ep_dispatch", "host_us_per_sequence")
_CHOICES = {"decoder_state": ("trtllm", "none"), "kv_cache": ("fp8-for-fp8-fp4", "16-bit", "weights"),
            "ep_dispatch": ("gather", "fewer-bytes")}
_KEYS = {"name", "description", "extends", "sources", "assumed", "tier", *RULES}
#: weight precisions whose checkpoints a "fp8-for-fp8-fp4" engine serves with an FP8 KV cache
FP8_KV_PRECISIONS = ("fp8", "fp4")


@dataclass(frozen=True)
class Rules:
    """The rules of one profile on one chip; None: unknown (not applied)."""

    engine: str | None = None
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    decoder_state: str = "none"
    kv_cache: str = "weights"
    allreduce: str | None = None
    #: ((tp, ((below_B, algorithm), ...)), ...): see the module doc
    allreduce_bands: tuple[tuple[int, tuple[tuple[int, str], ...]], ...] | None = None
    ep_dispatch: str | None = None
    #: the engine's host time per sequence of a step (µs; 0: none), on top of the calibration's
    host_us_per_sequence: float = 0.0

    def kv_precision(self, precision: str, stated: str | None, weight_only: dict[str, str]) -> str:
        """The KV cache's precision: the one stated, else this engine's rule (``weight_only``:
        a weight-only format's 16-bit math precision)."""
        if stated:
            return stated
        if self.kv_cache == "fp8-for-fp8-fp4" and precision in FP8_KV_PRECISIONS:
            return "fp8"
        if self.kv_cache == "16-bit" and BYTES_PER_ELEMENT[precision] < 2:
            return "bf16"
        return weight_only.get(precision, precision)


#: no engine: the physics alone (see the module doc)
PHYSICS = Rules()
#: the TP all-reduce without an engine's rule: per collective the algorithm of least time on the
#: topology (model.md eq. 3.17c); "nccl" is the fitted profile of the TensorRT-LLM engines
PHYSICS_ALLREDUCE = "fastest"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    rules: dict[str, Any]
    tiers: tuple[tuple[float | None, tuple[str, ...], dict[str, Any]], ...] = ()
    sources: tuple[tuple[str, str], ...] = ()
    assumed: tuple[tuple[str, str], ...] = ()

    def for_chip(self, chip_id: str | None = None, memory_GiB: float | None = None) -> Rules:
        """The profile's rules on a chip (its tiers applied; no chip: the base rules)."""
        rules = dict(self.rules)
        if chip_id is not None or memory_GiB is not None:
            for below, chips, over in self.tiers:
                small = below is not None and memory_GiB is not None and memory_GiB < below
                if small or any(c in (chip_id or "") for c in chips):
                    rules.update(over)
                    break
        # size bands: the all-reduce is this engine's, named by it (collectives.plan_of reads them)
        return replace(PHYSICS, engine=self.name, **rules,
                       **({"allreduce": self.name} if rules.get("allreduce_bands") is not None else {}))


def load_engine(name: str) -> Profile:
    """The profile ``name`` (InputError listing the known ones if there is none)."""
    if not isinstance(name, str):
        raise InputError("an engine is named by a text", key="engine", value=name,
                         expected="one of: " + ", ".join(engine_names()))
    return _load(name, ())


@cache
def _load(name: str, seen: tuple[str, ...]) -> Profile:
    known = engine_names()
    if name not in known:
        raise InputError(f"unknown engine {name!r}", key="engine", value=name,
                         expected="one of: " + ", ".join(known), suggestion=did_you_mean(str(name), known))
    if name in seen:
        raise InputError(f"engine profiles extend each other in a cycle: {' -> '.join((*seen, name))}")
    path = catalog_dir("engines") / f"{name}.toml"
    data = load_toml(path)
    stray = sorted(set(data) - _KEYS)
    if stray:
        raise InputError("unknown key in an engine profile", file=path, key=stray[0],
                         expected="one of: " + ", ".join(sorted(_KEYS)), suggestion=did_you_mean(stray[0], _KEYS))
    base = _load(data["extends"], (*seen, name)) if "extends" in data else None
    rules = {**(base.rules if base else {}), **_rules(path, "", data)}
    sources = {**dict(base.sources if base else ()), **_texts(path, data, "sources")}
    assumed = {**dict(base.assumed if base else ()), **_texts(path, data, "assumed")}
    tiers = base.tiers if base else ()
    if "tier" in data:
        tiers = tuple(_tier(path, i, t) for i, t in enumerate(data["tier"]))
    for rule in {*rules, *(r for _, _, over in tiers for r in over)}:
        if rule not in sources and rule not in assumed:
            raise InputError("an engine rule without a source", file=path, key=rule,
                             expected=f"[sources] {rule} = \"owner/repo@commit:path ...\" or [assumed] {rule} = \"why\"")
    if data.get("name", name) != name:
        raise InputError("an engine profile's name is its file name", file=path, key="name", value=data.get("name"),
                         expected=name)
    return Profile(name, str(data.get("description", "")), rules, tiers, tuple(sources.items()),
                   tuple(assumed.items()))


def _rules(path: Path, prefix: str, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rule in RULES:
        if rule not in data:
            continue
        v = data[rule]
        if rule in ("max_batch_size", "max_num_tokens"):
            ok = isinstance(v, int) and not isinstance(v, bool) and v >= 1
            expected = "a positive integer"
        elif rule == "host_us_per_sequence":
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            expected = "a number of microseconds, at least 0"
            v = float(v) if ok else v
        elif rule == "allreduce":
            ok, expected = v in ALLREDUCE_MODES, "one of: " + ", ".join(ALLREDUCE_MODES)
        elif rule == "allreduce_bands":
            parsed = _bands(v)
            ok, expected = parsed is not None, '{ tp<N> = [[below_B, "one-shot"], ...] }: bounds ascending, algorithms ' + \
                ", ".join(ALGORITHMS)
        else:
            ok, expected = v in _CHOICES[rule], "one of: " + ", ".join(_CHOICES[rule])
        if not ok:
            raise InputError("malformed engine rule", file=path, key=prefix + rule, value=v, expected=expected)
        out[rule] = parsed if rule == "allreduce_bands" else v
    if "allreduce_bands" in out and out.get("allreduce", "nccl") != "nccl":
        raise InputError("an engine's all-reduce bands fall back to NCCL", file=path, key=prefix + "allreduce",
                         value=out["allreduce"], expected="nccl (or leave it out)")
    return out


def _bands(v: Any) -> tuple[tuple[int, tuple[tuple[int, str], ...]], ...] | None:
    """``allreduce_bands`` as a sorted tuple; None if malformed."""
    if not isinstance(v, dict):
        return None
    out = []
    for layout, bands in v.items():
        if not (layout.startswith("tp") and layout[2:].isdigit() and int(layout[2:]) >= 2 and isinstance(bands, list)
                and bands and all(isinstance(b, list) and len(b) == 2 for b in bands)):
            return None
        bounds = [b[0] for b in bands]
        if (not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in bounds)
                or bounds != sorted(set(bounds)) or not all(b[1] in ALGORITHMS for b in bands)):
            return None
        out.append((int(layout[2:]), tuple((int(b[0]), str(b[1])) for b in bands)))
    return tuple(sorted(out))


def _texts(path: Path, data: dict[str, Any], key: str) -> dict[str, str]:
    table = data.get(key, {})
    if not isinstance(table, dict) or not all(isinstance(v, str) and v.strip() for v in table.values()):
        raise InputError(f"[{key}] maps a rule to a text", file=path, key=key)
    stray = sorted(set(table) - set(RULES))
    if stray:
        raise InputError(f"[{key}] names no rule", file=path, key=f"{key}.{stray[0]}", expected=", ".join(RULES))
    return dict(table)


def _tier(path: Path, i: int, t: Any) -> tuple[float | None, tuple[str, ...], dict[str, Any]]:
    where = f"tier[{i}]."
    if not isinstance(t, dict) or sorted(set(t) - {"below_GiB", "chips", *RULES}):
        raise InputError("malformed engine tier", file=path, key=f"tier[{i}]",
                         expected="below_GiB = n, chips = [\"a100\"], and rules")
    below, chips = t.get("below_GiB"), t.get("chips", [])
    if (below is not None and not (isinstance(below, int | float) and below > 0)) or not isinstance(chips, list):
        raise InputError("malformed engine tier", file=path, key=f"tier[{i}]", value=t,
                         expected="below_GiB a positive number, chips a list of chip-id parts")
    return below, tuple(str(c) for c in chips), _rules(path, where, t)


def rules_of(name: str | None, chip_id: str | None = None, memory_GiB: float | None = None) -> Rules:
    """The rules of engine ``name`` on a chip; None: :data:`PHYSICS`."""
    return PHYSICS if name is None else load_engine(name).for_chip(chip_id, memory_GiB)


def rules_per_chip(inst: Any, name: str) -> tuple[list[str], list[Rules]]:
    """Engine ``name``'s rules on each catalog chip the instance may use (a chip decision's
    domain, else its chip), with those chips; a family without catalog chips: ([], the profile's
    base rules)."""
    profile = load_engine(name)
    hw = inst.hardware
    if hw.family != "catalog":
        return [], [profile.for_chip()]
    chips = list(hw.decisions.get("chip") or [hw.chip])
    return chips, [profile.for_chip(c, load_chip(c).memory_capacity_GiB) for c in chips]


def instance_rules(inst: Any) -> Rules:
    """The rules of an instance's ``system.engine`` (None: :data:`PHYSICS`), on its catalog chips;
    InputError if the engine's rules differ between them (a tier). A 3D-stacked family has no
    catalog chip: the profile's base rules."""
    name = getattr(inst.system, "engine", None)
    if name is None:  # a measurement row's instance carries its own (calibration.engine.ROW_RULES)
        return getattr(inst, "engine_rules", None) or PHYSICS  # (other kinds' instances have none)
    return agreed_rules(name, *rules_per_chip(inst, name))


def agreed_rules(name: str, chips: list[str], rules: list[Rules]) -> Rules:
    """The one set of rules engine ``name`` has on ``chips`` (``rules``: its rules on each, as
    :func:`rules_per_chip` gives them); InputError if they differ between the chips (a tier)."""
    found = set(rules)
    if len(found) > 1:
        raise InputError(f"engine {name!r} has other rules on some of the chips ({', '.join(chips)})",
                         key="system.engine", value=name, expected="chips on which the engine's rules agree",
                         suggestion="solve each chip as its own instance")
    return found.pop()


def host_us_per_sequence(inst: Any, chip_id: str | None = None, memory_GiB: float | None = None) -> float:
    """The host time per sequence of a step (µs) an instance's engine adds on a chip (its
    ``host_us_per_sequence`` rule there; no chip: the profile's base rules): ``system.engine``'s,
    else a measurement row's own rules (``engine_rules``), else none (:data:`PHYSICS`). Read per chip,
    so that it is the hardware column's (``hardware.s_per_sequence``) whatever the other rules."""
    name = getattr(inst.system, "engine", None)
    if name is None:
        return (getattr(inst, "engine_rules", None) or PHYSICS).host_us_per_sequence
    return rules_of(name, chip_id, memory_GiB).host_us_per_sequence


def chip_rules(name: str | None, chips: list[str]) -> Rules:
    """The rules of engine ``name`` (None: :data:`PHYSICS`) on the catalog ``chips`` an instance
    of a kind without a ``hardware`` table may use (mapping, placement); InputError if they differ
    between the chips."""
    return PHYSICS if name is None else agreed_rules(
        name, chips, [rules_of(name, c, load_chip(c).memory_capacity_GiB) for c in chips])


def executor_excess(rules: Rules, sequences: float) -> str | None:
    """Why one executor decoding ``sequences`` sequences together (one token each per iteration)
    is not a batch the engine runs as one, else None: more than its ``max_batch_size``, or more
    tokens than its ``max_num_tokens`` (the extra iterations of eq. 4.19, which the mapping and
    placement models do not price)."""
    if rules.max_batch_size is not None and sequences > rules.max_batch_size:
        return f"engine {rules.engine!r} runs at most max_batch_size = {rules.max_batch_size} sequences per executor"
    if rules.max_num_tokens is not None and sequences > rules.max_num_tokens:
        return f"engine {rules.engine!r} carries at most max_num_tokens = {rules.max_num_tokens} tokens per iteration"
    return None


def allreduce_mode(inst: Any) -> str:
    """The TP all-reduce of an instance: ``system.allreduce``, else its engine's, else the
    physics' (:data:`PHYSICS_ALLREDUCE`)."""
    return inst.system.allreduce or instance_rules(inst).allreduce or PHYSICS_ALLREDUCE
