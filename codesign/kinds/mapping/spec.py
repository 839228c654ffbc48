"""Mapping instance files (``kind = "mapping"``): schema and loading.

A mapping instance fixes the hardware (a list of device groups, an optional pooled-memory
appliance, an optional host tier) and the workload scenario, and asks for the *mapping*: which
layers form each pipeline stage, where each layer's weights and KV cache live (local memory, a
pooled module's tier, host memory) and which appliance modules each device attaches to. The
model is :mod:`codesign.model.mapping`; the MIP is :mod:`codesign.kinds.mapping.formulation`.

Files live in ``instances/mapping/`` and are addressed by name like the other instances.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_serializer, model_validator

from codesign import catalog
from codesign.errors import InputError, did_you_mean
from codesign.model.calibration import CalibrationSet, shipped
from codesign.model.mapping_budgets import parse_mapping_budget
from codesign.model.mapping_build import engine_rules, tp_reason
from codesign.model.units import Precision
from codesign.model.workload import layer_weight_params, load_workload
from codesign.paths import instances_dir
from codesign.schema import InstanceName, Strict, load_toml, validate

#: tier kinds a layer's weights or KV cache may be placed in
TIER_KINDS = ("local", "host", "pool")

Objective = Literal["tokens_per_s", "energy_per_token_J"]

#: physical ranges of a device's memory: at least a byte, at most a PiB (a GPU holds ~0.1-0.3 TiB);
#: 1 MB/s to 10 PB/s (HBM3E: ~5 TB/s). Beyond them a time or a count overflows or underflows
MIN_CAPACITY_GiB, MAX_CAPACITY_GiB = 2.0**-30, 2.0**20
MIN_BANDWIDTH_GBps, MAX_BANDWIDTH_GBps = 1e-3, 1e7
#: a lit optical port draws a few W (a 7.2 Tbps port's laser: 5 W); 10 kW is no port
MAX_PORT_STATIC_W = 1e4
#: a device group's optical port count
Ports = Annotated[int, Field(ge=0)]


def distinct(value: Any) -> Any:
    """A decision's list of values: none repeated (a scalar passes)."""
    if isinstance(value, list) and (not value or len(set(value)) != len(value)):
        raise ValueError(f"a decision's values are a non-empty list without repeats, got {value}")
    return value


def most(value: int | list[int] | None) -> int:
    """The largest value of a scalar-or-list setting (0 for None)."""
    return max(value) if isinstance(value, list) else (value or 0)


class WorkloadPart(Strict):
    """The served model and the decode scenario the mapping is optimised for."""

    workload: str = Field(min_length=1)
    precision: Precision = "fp8"
    kv_precision: Precision | None = None
    #: sequences decoding concurrently; split into one micro-batch per pipeline stage
    batch: PositiveInt
    #: tokens held in the KV cache per sequence
    context_tokens: PositiveInt
    #: serve only the first N decoder layers (tiny versions that brute force can enumerate)
    layers: PositiveInt | None = None


class DeviceGroup(Strict):
    """``count`` identical pipeline stages of ``tp`` devices each, consecutive in pipeline order."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_\-]*$")
    #: a catalog chip id; a list: a hardware decision over those chips (the whole group gets the chosen one)
    chip: str | list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    #: pipeline stages of the group, consecutive in pipeline order
    count: PositiveInt
    #: devices per stage (tensor parallelism inside a stage, formulations/mapping.md eq. 9.2a): the
    #: group has count x tp devices; tp divides the workload's KV heads, within the chip's scale-up domain
    tp: PositiveInt = 1
    #: optical ports to the appliance (each attaches to one module); 0 = not attached; a list: a
    #: hardware decision over those counts (every device of the group gets the chosen one)
    pool_ports: Ports | list[Ports] = 0
    #: host (CPU) memory reachable over the host link, per device; 0 = no host tier
    host_capacity_GiB: float = Field(default=0.0, ge=0, le=MAX_CAPACITY_GiB)
    #: overrides of the chip's local memory (e.g. a 3D-stacked variant); cite them in `notes`
    memory_capacity_GiB: float | None = Field(default=None, ge=MIN_CAPACITY_GiB, le=MAX_CAPACITY_GiB)
    memory_bandwidth_GBps: float | None = Field(default=None, ge=MIN_BANDWIDTH_GBps, le=MAX_BANDWIDTH_GBps)
    notes: str = ""

    @field_validator("pool_ports", "chip")
    @classmethod
    def _distinct(cls, value: Any) -> Any:
        return distinct(value)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        """The content without ``tp`` at its default 1: a file that does not state it dumps (and
        hashes, so its records' ``instance_hash``) as before tensor parallelism in a stage."""
        out = handler(self)
        if out.get("tp") == 1:
            out.pop("tp")
        return out


class AppliancePart(Strict):
    """The pooled-memory appliance as the instance uses it."""

    id: str = Field(min_length=1)
    medium: Literal["photonic", "electrical"] = "photonic"
    #: use only this many modules (default: all of the appliance's); a list: a hardware decision
    modules: PositiveInt | list[PositiveInt] | None = None
    #: devices that may share one module port (default: no limit)
    max_devices_per_module: PositiveInt | None = None
    #: the paper's assumption: every device reaches the pool at this bandwidth, whatever its
    #: ports; module-port and switch limits are then not applied (CelestiSim's 26,800 GB/s)
    assumed_device_bandwidth_GBps: float | None = Field(default=None, ge=MIN_BANDWIDTH_GBps, le=MAX_BANDWIDTH_GBps)
    #: static power of one lit optical port (each device port and each module port), drawn whatever
    #: the traffic; not given: not charged. Cite its source in the instance's provenance
    port_static_power_W: float | None = Field(default=None, ge=0, le=MAX_PORT_STATIC_W)

    @field_validator("modules")
    @classmethod
    def _distinct(cls, value: Any) -> Any:
        return distinct(value)

    @model_validator(mode="after")
    def _decisions_need_ports(self) -> AppliancePart:
        if isinstance(self.modules, list) and self.assumed_device_bandwidth_GBps is not None:
            raise ValueError("a list of modules (a hardware decision) needs the port model: "
                             "drop assumed_device_bandwidth_GBps")
        return self


class TiersPart(Strict):
    """Which tier kinds weights and KV cache may use."""

    weights: list[Literal["local", "host", "pool"]] = Field(default_factory=lambda: ["local", "host", "pool"], min_length=1)
    kv: list[Literal["local", "host", "pool"]] = Field(default_factory=lambda: ["local", "host", "pool"], min_length=1)


class CustomBudget(Strict):
    """A named budget on the metrics of a mapping, e.g. ``expr = "energy_per_token_J <= 0.05"``
    (which metrics and limits: :mod:`codesign.model.mapping_budgets`)."""

    name: str = Field(min_length=1)
    expr: str = Field(min_length=3)


class BudgetsPart(Strict):
    #: time per output token of one sequence = stages x period
    tpot_s: float | None = Field(default=None, gt=0)
    #: provisioned power: the devices' TDP plus the lit optical ports' static power, W (what a
    #: rack's power envelope limits; a hardware budget, linear in the hardware decisions)
    power_W: float | None = Field(default=None, gt=0)
    #: ``[[budgets.custom]]`` tables (``--budget`` adds ``cli-N`` ones)
    custom: list[CustomBudget] = Field(default_factory=list)


class ObjectivePart(Strict):
    metric: Objective = "tokens_per_s"


class SystemPart(Strict):
    #: serving-engine profile (catalog engines/, codesign.model.engines); None: the physics alone
    engine: str | None = None


class MappingFile(Strict):
    name: InstanceName
    kind: Literal["mapping"]
    description: str = Field(min_length=1)
    provenance: str = Field(min_length=1)
    workload: WorkloadPart
    devices: list[DeviceGroup] = Field(min_length=1)
    appliance: AppliancePart | None = None
    tiers: TiersPart = Field(default_factory=TiersPart)
    budgets: BudgetsPart = Field(default_factory=BudgetsPart)
    objective: ObjectivePart = Field(default_factory=ObjectivePart)
    system: SystemPart = Field(default_factory=SystemPart)
    #: a feasible design to compare with (same format as a design file)
    baseline: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> MappingFile:
        names = [g.name for g in self.devices]
        if len(set(names)) != len(names):
            raise ValueError(f"device group names must be unique, got {names}")
        stages = sum(g.count for g in self.devices)
        if self.workload.batch % stages:
            raise ValueError(
                f"workload.batch = {self.workload.batch} must be a multiple of the {stages} pipeline stages "
                "(one micro-batch per stage)"
            )
        if "pool" in self.tiers.weights + self.tiers.kv and self.appliance is None:
            raise ValueError("tiers allow 'pool' but the instance has no [appliance]; remove 'pool' or add one")
        if self.appliance is not None and not any(most(g.pool_ports) for g in self.devices) and self.appliance.assumed_device_bandwidth_GBps is None:
            raise ValueError("[appliance] is given but no device group has pool_ports > 0")
        if self.appliance is None and any(isinstance(g.pool_ports, list) for g in self.devices):
            raise ValueError("a list of pool_ports (a hardware decision) needs an [appliance]")
        return self


@dataclass(frozen=True)
class FamilyInstance:
    """A validated mapping-family instance (``spec`` is its kind's pydantic file model) and the
    calibration the model evaluates it under (default: the shipped one)."""

    spec: Any
    source: Path | None
    raw: dict[str, Any]
    calibration: CalibrationSet = field(default_factory=shipped, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def content_hash(self) -> str:
        blob = json.dumps(self.spec.model_dump(mode="json"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


#: a mapping instance (``spec`` is a :class:`MappingFile`)
MappingInstance = FamilyInstance


def mapping_dir() -> Path:
    return instances_dir() / "mapping"


def list_mapping_instances(kind: str = "mapping") -> list[str]:
    """Names of the instances of one kind in instances/mapping/."""
    d = mapping_dir()
    if not d.exists():
        return []
    return sorted(p.stem for p in d.glob("*.toml") if load_toml(p).get("kind") == kind)


def family_path(name_or_path: str, kind: str) -> Path:
    """A .toml path as given, else the named instance of ``kind`` in instances/mapping/."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    path = mapping_dir() / f"{name_or_path}.toml"
    if not path.exists():
        raise InputError(
            f"unknown {kind} instance {name_or_path!r}",
            expected="a name from `codesign instances` or a path to a .toml file",
            suggestion=did_you_mean(name_or_path, list_mapping_instances(kind)),
        )
    return path


def load_mapping(name_or_path: str, *, calibration: CalibrationSet | None = None) -> MappingInstance:
    """A mapping instance by name or path, evaluated under ``calibration`` (None: the shipped one)."""
    path = family_path(name_or_path, "mapping")
    return mapping_from_data(load_toml(path), source=path, calibration=calibration)


def mapping_from_data(raw: dict[str, Any], *, source: Path | str | None = None,
                      calibration: CalibrationSet | None = None) -> MappingInstance:
    spec = validate(MappingFile, raw, file=source or "<memory>")
    _check_references(spec, source)
    return MappingInstance(spec, Path(source) if source else None, raw, shipped() if calibration is None else calibration)


def check_engine(source: Path | str | None, rules: Callable[[], Any]) -> None:
    """``system.engine`` names a profile whose rules agree on the instance's chips (``rules``
    reads them), else InputError naming the file."""
    try:
        rules()
    except InputError as exc:
        raise InputError(exc.message, file=source, key="system.engine", value=exc.value, expected=exc.expected,
                         suggestion=exc.suggestion) from None


def _check_references(spec: MappingFile, source: Path | str | None) -> None:
    try:
        w = load_workload(spec.workload.workload)
    except InputError as exc:
        raise InputError(exc.message, file=source, key="workload.workload", value=spec.workload.workload, suggestion=exc.suggestion) from None
    if w.sliding_window is not None or (w.moe is not None and (w.moe.first_dense_layers or w.moe.interleave != 1)):
        raise InputError(
            "the pipeline mapping needs identical decoder layers (no sliding-window or dense/MoE mix)",
            file=source,
            key="workload.workload",
            value=spec.workload.workload,
            expected="a workload whose layers are all alike (llama-3.1-405b, dense-1t, mixtral-8x7b, qwen3-235b-a22b ...)",
        )
    layer_weight_params(w)
    for i, b in enumerate(spec.budgets.custom):
        parse_mapping_budget(b.expr, name=b.name, source=f"{source or '<memory>'}: budgets.custom[{i}]")
    chips = catalog.list_ids("chips")
    for i, g in enumerate(spec.devices):
        for c in g.chip if isinstance(g.chip, list) else [g.chip]:
            if c not in chips:
                raise InputError(f"unknown chip {c!r}", file=source, key=f"devices[{i}].chip", value=c, suggestion=did_you_mean(c, chips))
            if (why := tp_reason(w, g.tp, catalog.load_chip(c))) is not None:
                raise InputError(why, file=source, key=f"devices[{i}].tp", value=g.tp)
    if spec.workload.layers is not None and spec.workload.layers > w.num_layers:
        raise InputError(
            f"the model has {w.num_layers} layers", file=source, key="workload.layers", value=spec.workload.layers, expected=f"<= {w.num_layers}"
        )
    check_engine(source, lambda: engine_rules(spec))
    num_layers = spec.workload.layers or w.num_layers
    stages = sum(g.count for g in spec.devices)
    if stages > num_layers:
        raise InputError(
            f"{stages} pipeline stages but the model has only {num_layers} layers",
            file=source,
            key="devices",
            expected="at most one stage per layer",
        )
    if spec.appliance is not None:
        ids = catalog.list_ids("appliances")
        if spec.appliance.id not in ids:
            raise InputError(
                f"unknown appliance {spec.appliance.id!r}", file=source, key="appliance.id", value=spec.appliance.id, suggestion=did_you_mean(spec.appliance.id, ids)
            )
        app = catalog.load_appliance(spec.appliance.id)
        if most(spec.appliance.modules) > app.modules:
            raise InputError(
                f"appliance {app.id} has {app.modules} modules", file=source, key="appliance.modules", value=spec.appliance.modules, expected=f"<= {app.modules}"
            )
    for i, g in enumerate(spec.devices):
        if "host" in spec.tiers.weights + spec.tiers.kv:
            continue
        if g.host_capacity_GiB:
            raise InputError(
                "host_capacity_GiB is set but tiers allow no 'host' placement",
                file=source,
                key=f"devices[{i}].host_capacity_GiB",
                value=g.host_capacity_GiB,
                suggestion="add 'host' to [tiers] weights or kv, or drop the capacity",
            )
