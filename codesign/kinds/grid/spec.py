"""Instance files: schema, loading (with ``extends``), catalog look-up, consistency lints.

An instance names one or more workloads (each with its serving scenario and schedule decisions),
a system (device count, interconnect, optional pooled-memory appliance), the hardware family with
its hardware decisions, budgets, an objective and a baseline design. Files carry units in key
names; conversions to SI happen once, in the model's feature builders, from these named fields.

Decision names: hardware decisions are global (``dram_layers``); schedule decisions belong to a
workload and are addressed as ``tp`` when the instance has one workload and ``<workload>.tp``
otherwise. Design files and ``[baseline]`` use the same names.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from codesign.errors import InputError, did_you_mean
from codesign.kinds.grid.design import flatten_design, parse_design
from codesign.model.budgets import defined_budgets, parse_budget
from codesign.model.calibration import CalibrationSet, shipped
from codesign.model.collectives import check_system
from codesign.model.hardware import check_hardware_references, load_family
from codesign.model.overlap import OVERLAPS
from codesign.model.routing import RoutingSpec
from codesign.model.units import BYTES_PER_ELEMENT, Precision, kv_precision_of
from codesign.model.workload import load_workload
from codesign.paths import instances_dir
from codesign.schema import InstanceName, Strict, load_toml, validate

#: Schedule decisions (per workload) the model understands, and their value types.
SCHEDULE_DECISIONS: dict[str, type] = {
    "tp": int,  # tensor-parallel degree (within a pipeline stage)
    "pp": int,  # pipeline-parallel degree (stages)
    "ep": int,  # expert-parallel degree inside the TP group (MoE layers); ep | tp
    "batch": int,  # sequences in flight per model replica
    "weights_tier": str,  # "local" | "pooled": where the weights live
    "kv_tier": str,  # "local" | "pooled": where the KV cache lives
    "attention_dp": bool, "ep_all_to_all": bool, "overlap": str,  # optional: model.md §4.8, eqs. 4.6a, 5.3a
}
#: schedule decisions that exist only where a workload gives them a domain (older instances, their
#: stored designs and the formulations stay as they were)
OPTIONAL_SCHEDULE_DECISIONS = ("attention_dp", "ep_all_to_all", "overlap")

#: Hardware decisions (shared by every workload) per hardware family.
HARDWARE_DECISIONS: dict[str, dict[str, type]] = {
    "stacked-3d": {
        "dram_layers": int,  # DRAM dies stacked on the logic die
        "tsv_count": int,  # vertical connections between the stack and the logic die
        "tsv_pitch_um": float,  # pitch of those connections
        "compute_area_mm2": float,  # logic-die area given to compute (tensor units)
        "clock_GHz": float,  # compute clock level (sets voltage, power)
        "sram_MiB": float,  # on-die buffer in front of the DRAM (Little's law)
    },
    "catalog": {
        "chip": str,  # a chip id from the catalog
        "power_limit_fraction": float,  # power cap (nvidia-smi -pl) / TDP, only where given (model/power_cap.py)
        "pool_ports": int,  # appliance ports (modules) each device attaches to
        "appliances": int,  # pooled-memory appliances the devices spread over (model/appliances.py)
        "pool_layout": str,  # "replicated" (a copy per appliance) | "shared" (one copy over all)
        "uplink_ports": int,  # ports of each appliance to the tier-2 switch joining them (shared)
    },
}

TIERS = ("local", "pooled")

#: physical ranges of the 3D family's hardware decisions: beyond them the model's formulas leave
#: their domain (a subnormal area or buffer has no peak, its reciprocal overflows). The clock's
#: range is the family's V/f curve (a clock off the curve has no voltage): checked with the family
HARDWARE_RANGES: dict[str, tuple[float, float, str]] = {
    "dram_layers": (1, 1024, "DRAM dies in one stack"),
    "tsv_count": (1, 10**9, "vertical connections"),
    "tsv_pitch_um": (0.1, 1000.0, "um between vertical connections (hybrid bonds ~1 um, C4 bumps ~150 um)"),
    "compute_area_mm2": (0.01, 50_000.0, "mm2 of logic (a whole wafer is ~46,000 mm2)"),
    "sram_MiB": (1 / 1024, 2.0**20, "MiB of on-die buffer (1 KiB to 1 TiB)"),
}


#: a workload's name: it prefixes its decisions (``llama8b.tp``) and its metrics in budgets
#: (``llama8b.tpot_s``, read as a Python name), so an identifier
WORKLOAD_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class WorkloadSpec(Strict):
    """One served workload: model, precisions, scenario, SLOs and its schedule decisions."""

    name: str = Field(default="main", pattern=WORKLOAD_NAME,
                      description="letters, digits and '_', not starting with a digit (names decisions and metrics)")
    workload: str = Field(description="catalog workload id or path to a workload TOML")
    precision: Precision = "fp8"
    kv_precision: Precision | None = None
    phase: Literal["prefill", "decode", "both"] = "decode"
    input_tokens: int = Field(gt=0)
    output_tokens: int = Field(gt=0)
    weight: float = Field(default=1.0, ge=1e-9, le=1e9, description="share of this workload in the token mix "
                          "(relative: 1e-9 to 1e9, where a product with a step time stays a normal number)")
    tpot_slo_ms: float | None = Field(default=None, gt=0)
    ttft_slo_ms: float | None = Field(default=None, gt=0)
    #: the serving engine's budget of tokens per iteration (TensorRT-LLM's ``max_num_tokens``): a
    #: round whose tokens need more iterations than the static round runs the extra ones, each
    #: paying a step's weight reads and fixed costs again (model.md eq. 4.19); None: no budget
    max_tokens_per_iteration: int | None = Field(default=None, gt=0)
    routing: RoutingSpec | None = None  # how tokens pick experts (model.md eq. 2.14b); None: uniform
    decisions: dict[str, list[Any]] = Field(default_factory=dict)

    @property
    def kv_bytes_per_element(self) -> float:
        return BYTES_PER_ELEMENT[kv_precision_of(self.precision, self.kv_precision)]

    @property
    def weight_bytes_per_param(self) -> float:
        return BYTES_PER_ELEMENT[self.precision]


def _domain_problem(dom: Any, typ: type) -> tuple[str, Any] | None:
    """(what is wrong, offending value) for a decision domain, or None."""
    if not isinstance(dom, list) or not dom:
        return "a domain is a non-empty list of values", dom
    if len(set(map(repr, dom))) != len(dom):
        return "a domain must not repeat values", dom
    for x in dom:
        if typ is int and (isinstance(x, bool) or not isinstance(x, int) or x <= 0):
            return "expected positive integers", x
        if typ is float and (isinstance(x, bool) or not isinstance(x, int | float) or not 0 < x < math.inf):
            return "expected positive finite numbers", x
        if typ is str and not isinstance(x, str):
            return "expected strings", x
        if typ is bool and not isinstance(x, bool):
            return "expected true or false", x
    return None


def check_decisions(spec: InstanceFile, path: Path | None) -> None:
    """Every decision named in the file exists for its family and has a well-formed domain."""

    def check(where: str, given: dict[str, Any], known: dict[str, type]) -> None:
        for key, dom in given.items():
            if key not in known:
                raise InputError(
                    "unknown decision",
                    file=path,
                    key=f"{where}.{key}",
                    expected="one of: " + ", ".join(known),
                    suggestion=did_you_mean(key, known),
                )
            bad = _domain_problem(dom, known[key])
            if bad:
                raise InputError(bad[0], file=path, key=f"{where}.{key}", value=bad[1])
            if key in HARDWARE_RANGES and where == "hardware.decisions":
                lo, hi, what = HARDWARE_RANGES[key]
                for x in dom:
                    if not lo <= x <= hi:
                        raise InputError("out of its physical range", file=path, key=f"{where}.{key}", value=x,
                                         expected=f"{lo:g} to {hi:g} {what}")
            named = {"weights_tier": TIERS, "kv_tier": TIERS, "overlap": OVERLAPS}.get(key, ())
            for x in dom if named else ():
                if x not in named:
                    raise InputError(f"not a value of {key}", file=path, key=f"{where}.{key}", value=x, expected=" | ".join(named))

    hw = spec.hardware
    known_hw = HARDWARE_DECISIONS[hw.family]
    check("hardware.decisions", hw.decisions, known_hw)
    if hw.family == "stacked-3d":
        missing = [k for k in known_hw if k not in hw.decisions]
        if missing:
            raise InputError(
                "family 'stacked-3d' needs a domain for every hardware decision",
                file=path,
                key=f"hardware.decisions.{missing[0]}",
                expected=f"domains for {', '.join(missing)}",
                suggestion="a single value fixes a decision, e.g. sram_MiB = [1.0]",
            )
    for i, w in enumerate(spec.workloads):
        check(f"workloads[{i}].decisions", w.decisions, SCHEDULE_DECISIONS)


class SystemSpec(Strict):
    """The system the devices live in: count, topology, links, optional pooled memory."""

    devices: int = Field(gt=0)
    scale_up_domain: int = Field(default=8, gt=0, description="devices per scale-up domain")
    topology: str = Field(default="hierarchical", description="how devices connect (model/topology.py)")
    torus: list[int] | None = Field(default=None, description="a torus topology's extent per dimension")
    allreduce: str | None = Field(default=None, description="TP all-reduce: None/'nccl', 'fastest' or one pinned")
    scale_up: str | None = Field(default=None, description="interconnect id; chip's own if unset")
    engine: str | None = Field(default=None, description="serving-engine profile (catalog engines/); None: physics only")
    scale_out: str | None = None
    appliance: str | None = Field(default=None, description="pooled-memory appliance id")
    appliance_medium: Literal["photonic", "electrical"] = "photonic"
    pooled_bandwidth_GBps_per_device: float | None = Field(
        default=None,
        gt=0,
        description="assumed pooled-memory bandwidth per device; None = what the ports carry",
    )
    #: above absolute zero
    ambient_C: float = Field(default=45.0, gt=-273.15)


class HardwareSpec(Strict):
    family: Literal["stacked-3d", "catalog"]
    chip: str | None = Field(default=None, description="catalog chip (family=catalog)")
    stack: str = Field(default="deepstack-3d", description="3D family parameters (stacked-3d)")
    decisions: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _catalog_chip(self) -> HardwareSpec:
        if self.family == "catalog" and self.chip is None and "chip" not in self.decisions:
            raise ValueError("family 'catalog' needs `chip` or a `decisions.chip` domain")
        return self


class Objective(Strict):
    metric: Literal["tokens_per_s", "energy_per_token_J", "tpot_s", "ttft_s"] = "tokens_per_s"
    sense: Literal["max", "min"] | None = None

    @model_validator(mode="after")
    def _sense(self) -> Objective:
        natural = "max" if self.metric == "tokens_per_s" else "min"
        if self.sense is not None and self.sense != natural:
            raise ValueError(f"objective {self.metric!r} can only be '{natural}'")
        return self

    @property
    def resolved_sense(self) -> str:
        return "max" if self.metric == "tokens_per_s" else "min"


class CustomBudget(Strict):
    """A named linear budget over metrics, e.g. ``expr = "2*power_W + dram_layers*15 <= 1600"``
    (grammar and metric names: :mod:`codesign.model.budgets`, ``codesign metrics``)."""

    name: str = Field(min_length=1)
    expr: str = Field(min_length=3)


class Budgets(Strict):
    """Upper limits on named metrics (per device unless prefixed ``system_``), and custom
    budgets as ``[[budgets.custom]]`` tables."""

    power_W: float | None = Field(default=None, gt=0)
    temperature_C: float | None = Field(default=None, gt=0)
    area_mm2: float | None = Field(default=None, gt=0)
    system_power_W: float | None = Field(default=None, gt=0)
    energy_per_token_J: float | None = Field(default=None, gt=0)
    custom: list[CustomBudget] = Field(default_factory=list)


class InstanceFile(Strict):
    """The TOML schema of an instance file (after ``extends`` is merged)."""

    name: InstanceName
    description: str
    provenance: str = ""
    extends: str | None = None
    system: SystemSpec
    hardware: HardwareSpec
    workloads: list[WorkloadSpec] = Field(min_length=1)
    budgets: Budgets = Field(default_factory=Budgets)
    objective: Objective = Field(default_factory=Objective)
    baseline: dict[str, Any] = Field(default_factory=dict)
    baseline_description: str = ""

    @model_validator(mode="after")
    def _unique_workload_names(self) -> InstanceFile:
        names = [w.name for w in self.workloads]
        if len(set(names)) != len(names):
            raise ValueError(f"workload names must be unique, got {names}")
        if self.hardware.family == "catalog" and self.budgets.temperature_C is not None:
            raise ValueError(
                "budgets.temperature_C needs a thermal model: only hardware.family = 'stacked-3d' has one"
            )
        return self


@dataclass(frozen=True)
class Decision:
    """One decision of an instance and its finite domain."""

    name: str  # qualified name used in designs (``tp`` or ``llama.tp``)
    key: str  # the model's key (``tp``)
    workload: str | None  # owning workload for schedule decisions, None for hardware
    domain: tuple[Any, ...]


#: Default domains of schedule decisions not listed in a file: a fixed single value.
SCHEDULE_DEFAULTS: dict[str, Any] = {
    "tp": 1,
    "pp": 1,
    "ep": 1,
    "batch": 1,
    "weights_tier": "local",
    "kv_tier": "local",
    "attention_dp": False, "ep_all_to_all": False, "overlap": "none",
}


class Instance:
    """A validated instance: the file's content plus derived decision lists and a content hash,
    and the calibration the model evaluates it under (default: the shipped one)."""

    def __init__(self, spec: InstanceFile, *, source: Path | None, raw: dict[str, Any],
                 calibration: CalibrationSet | None = None, engine_rules: Any | None = None):
        self.spec = spec
        self.source = source
        self.raw = raw
        self.calibration = shipped() if calibration is None else calibration
        #: the engine rules a measurement row's instance is evaluated under
        #: (codesign.calibration.engine.ROW_RULES); None: its ``system.engine``'s, else the physics
        self.engine_rules = engine_rules

    # --- convenient views -------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def workloads(self) -> list[WorkloadSpec]:
        return self.spec.workloads

    @property
    def system(self) -> SystemSpec:
        return self.spec.system

    @property
    def hardware(self) -> HardwareSpec:
        return self.spec.hardware

    @property
    def objective(self) -> Objective:
        return self.spec.objective

    @property
    def budgets(self) -> Budgets:
        return self.spec.budgets

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the merged, validated content (stable across formatting and `extends`)."""
        blob = json.dumps(self.spec.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    def qualify(self, workload: str, key: str) -> str:
        return key if len(self.workloads) == 1 else f"{workload}.{key}"

    @cached_property
    def hardware_decisions(self) -> list[Decision]:
        fam = self.hardware.family
        out = []
        for key in HARDWARE_DECISIONS[fam]:
            if key in self.hardware.decisions:
                dom = tuple(self.hardware.decisions[key])
            elif fam == "catalog" and key == "chip":
                dom = (self.hardware.chip,)
            elif fam == "catalog" and key == "pool_ports":
                dom = (1,)
            else:
                continue
            out.append(Decision(key, key, None, dom))
        return out

    def schedule_decisions(self, workload: str) -> list[Decision]:
        w = next(x for x in self.workloads if x.name == workload)
        out = []
        for key in SCHEDULE_DECISIONS:
            if key in OPTIONAL_SCHEDULE_DECISIONS and key not in w.decisions:
                continue
            dom = tuple(w.decisions.get(key, [SCHEDULE_DEFAULTS[key]]))
            out.append(Decision(self.qualify(workload, key), key, workload, dom))
        return out

    @cached_property
    def decisions(self) -> list[Decision]:
        out = list(self.hardware_decisions)
        for w in self.workloads:
            out.extend(self.schedule_decisions(w.name))
        return out

    @cached_property
    def decision_index(self) -> dict[str, Decision]:
        return {d.name: d for d in self.decisions}

    def baseline(self) -> dict[str, Any]:
        """The baseline design: file's ``[baseline]``; unset decisions take their first value."""
        design = {d.name: d.domain[0] for d in self.decisions}
        design.update(flatten_design(self.spec.baseline))
        return design


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def list_instances() -> list[str]:
    """Names of the named instances shipped in ``instances/``."""
    return sorted(p.stem for p in instances_dir().glob("*.toml"))


def resolve_instance_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    named = instances_dir() / f"{name_or_path}.toml"
    if named.exists():
        return named
    if p.is_dir():
        raise InputError("a directory, not an instance file", file=p, expected="a .toml instance file or a named instance")
    if p.exists():
        raise InputError("an instance file is TOML with the suffix .toml", file=p, expected="a .toml file")
    if p.suffix == ".toml" or "/" in name_or_path:
        raise InputError("instance file not found", file=p)
    raise InputError(
        f"unknown instance {name_or_path!r}",
        expected="a named instance (see `codesign instances`) or a path to a .toml file",
        suggestion=did_you_mean(name_or_path, list_instances()),
    )


def _load_raw(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise InputError(f"`extends` forms a cycle: {chain}", file=path, key="extends")
    data = load_toml(path)
    parent = data.get("extends")
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise InputError("`extends` must be an instance name", file=path, key="extends", value=parent)
    try:
        parent_path = resolve_instance_path(parent)
    except InputError as exc:
        raise InputError(
            exc.message, file=path, key="extends", value=parent, suggestion=exc.suggestion
        ) from None
    base = _load_raw(parent_path, (*seen, path))
    base.pop("baseline", None) if "baseline" in data else None
    return _deep_merge(base, data)  # a child that lists workloads replaces them (arrays of tables do not merge)


def load_instance(name_or_path: str, *, calibration: CalibrationSet | None = None) -> Instance:
    """Load, merge (``extends``), validate and cross-check an instance, to be evaluated under
    ``calibration`` (None: the shipped one)."""
    path = resolve_instance_path(name_or_path)
    raw = _load_raw(path)
    spec = validate(InstanceFile, raw, file=path)
    check_decisions(spec, path)
    inst = Instance(spec, source=path, raw=raw, calibration=calibration)
    _check_references(inst, path)
    defined_budgets(inst)
    parse_design(inst, spec.baseline, source=str(path), prefix="baseline.")
    return inst


def _check_references(inst: Instance, path: Path) -> None:
    """Catalog ids named by the instance must exist (clear error with a did-you-mean)."""
    for i, w in enumerate(inst.workloads):
        try:
            load_workload(w.workload)
        except InputError as exc:
            raise InputError(
                exc.message,
                file=path,
                key=f"workloads[{i}].workload",
                value=w.workload,
                expected=exc.expected,
                suggestion=exc.suggestion,
            ) from None
    check_hardware_references(inst, path)
    check_system(inst, path)
    if inst.hardware.family == "stacked-3d":
        curve = load_family(inst.hardware.stack).compute.vf_curve_GHz
        for clock in inst.hardware.decisions.get("clock_GHz", []):
            if not min(curve) <= clock <= max(curve):
                raise InputError("a clock off the 3D family's V/f curve: the model has no voltage for it", file=path,
                                 key="hardware.decisions.clock_GHz", value=clock,
                                 expected=f"{min(curve):g} to {max(curve):g} GHz ({inst.hardware.stack}'s "
                                          "compute.vf_curve_GHz)")


def with_budgets(inst: Instance, texts: list[str]) -> Instance:
    """The same instance with extra custom budgets (``--budget``, repeatable); they join the
    content hash, so stored solutions of the unmodified instance are not reused for it."""
    if not texts:
        return inst
    existing = list(inst.spec.budgets.custom)
    names = [w.name for w in inst.workloads]
    for i, t in enumerate(texts):  # a malformed one is named as given, before it becomes a custom budget
        parse_budget(t, names, name=f"cli-{i + 1}", source="--budget")
    extra = [CustomBudget(name=f"cli-{i + 1}", expr=t) for i, t in enumerate(texts)]
    budgets = inst.spec.budgets.model_copy(update={"custom": existing + extra})
    new = Instance(inst.spec.model_copy(update={"budgets": budgets}), source=inst.source, raw=inst.raw,
                   calibration=inst.calibration, engine_rules=inst.engine_rules)
    defined_budgets(new, source="--budget")
    return new


def with_objective(inst: Instance, metric: str) -> Instance:
    """The same instance with another objective (``--objective``)."""
    spec = validate(Objective, {"metric": metric}, file="--objective", prefix="objective")
    new = inst.spec.model_copy(update={"objective": spec})
    return Instance(new, source=inst.source, raw=inst.raw, calibration=inst.calibration,
                    engine_rules=inst.engine_rules)


def instance_from_data(raw: dict[str, Any], *, source: str = "<memory>",
                       calibration: CalibrationSet | None = None) -> Instance:
    """Validate an instance given as a dict (tests, generators, validation rows), to be evaluated
    under ``calibration`` (None: the shipped one)."""
    spec = validate(InstanceFile, raw, file=source)
    check_decisions(spec, Path(source))
    inst = Instance(spec, source=None, raw=raw, calibration=calibration)
    _check_references(inst, Path(source))
    defined_budgets(inst)
    parse_design(inst, spec.baseline, source=source, prefix="baseline.")
    return inst
