"""DLRM instance files (``kind = "dlrm"``): schema and loading.

A DLRM instance fixes a recommendation model's embedding tables (a workload of
``instances/catalog/dlrm/``), the batch, identical GPUs in one NVLink domain and, optionally, a
pooled-memory appliance; it asks where each table lives and in how many column shards: GPU HBM,
the GPUs' host memory or the appliance's modules. The model is :mod:`codesign.model.dlrm`; the MIP
is :mod:`codesign.kinds.dlrm.formulation`. Files live in ``instances/mapping/`` beside the other
fixed-hardware kinds and are addressed by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveInt, model_validator

from codesign import catalog
from codesign.errors import InputError, did_you_mean
from codesign.kinds.mapping.spec import (
    FamilyInstance,
    MAX_BANDWIDTH_GBps,
    MAX_CAPACITY_GiB,
    MIN_BANDWIDTH_GBps,
    family_path,
)
from codesign.model.calibration import CalibrationSet, shipped
from codesign.model.dlrm import load_dlrm_workload
from codesign.model.units import Precision
from codesign.schema import InstanceName, Strict, load_toml, validate

Objective = Literal["samples_per_s", "energy_per_sample_J"]
OBJECTIVES: tuple[str, ...] = ("samples_per_s", "energy_per_sample_J")


class WorkloadPart(Strict):
    #: a DLRM workload of instances/catalog/dlrm/
    workload: str = Field(min_length=1)
    #: samples per iteration, all GPUs together (each GPU runs B/D of them through the dense part)
    batch: PositiveInt
    #: the embedding elements' format (default: the workload's)
    precision: Precision | None = None
    #: bytes of one lookup index sent to the table's owner
    index_bytes: float = Field(default=8.0, gt=0, le=16)
    #: serve only these tables (names; a cut-down model)
    tables: list[str] | None = Field(default=None, min_length=1)


class DevicesPart(Strict):
    chip: str = Field(min_length=1)
    count: PositiveInt
    memory_capacity_GiB: float | None = Field(default=None, gt=0, le=MAX_CAPACITY_GiB)
    memory_bandwidth_GBps: float | None = Field(default=None, ge=MIN_BANDWIDTH_GBps, le=MAX_BANDWIDTH_GBps)
    #: HBM kept for the dense part (MLP weights, activations, workspace), beside the runtime reserve
    reserved_GiB: float = Field(default=0.0, ge=0, le=MAX_CAPACITY_GiB)
    #: host memory per GPU for tables read over PCIe (0: no host tier)
    host_capacity_GiB: float = Field(default=0.0, ge=0, le=MAX_CAPACITY_GiB)
    #: optical ports of each GPU into the appliance (consistent instances)
    pool_ports: PositiveInt = 1
    notes: str = ""


class AppliancePart(Strict):
    id: str = Field(min_length=1)
    medium: Literal["photonic", "electrical"] = "photonic"
    #: use only this many modules (default: the appliance's)
    modules: PositiveInt | None = None
    #: the module tiers tables may live in
    tiers: list[str] = Field(default_factory=lambda: ["hbm"], min_length=1)
    #: peak gather bandwidth of one module's tier (GB/s), e.g. stacks x per-stack bandwidth
    module_tier_GBps: dict[str, float]
    #: the paper's per-GPU bandwidth into the pool (ports and switch then not applied)
    assumed_device_bandwidth_GBps: float | None = Field(default=None, gt=0, le=MAX_BANDWIDTH_GBps)
    #: the modules sum a sample's rows of a table before sending (near-memory pooling)
    pools: bool = False


class ShardingPart(Strict):
    #: the numbers of column shards a table may be split into (each divides the dimension)
    column_shards: list[PositiveInt] = Field(default_factory=lambda: [1])
    #: a table may also be spread whole: row-wise over all GPUs' HBM (``hbm:*``) or hosts
    #: (``host:*``), or striped over a tier of every module (``pool:*:<tier>``)
    spread: bool = False


class ObjectivePart(Strict):
    metric: Objective = "samples_per_s"


class DlrmFile(Strict):
    name: InstanceName
    kind: Literal["dlrm"]
    description: str = Field(min_length=1)
    provenance: str = Field(min_length=1)
    workload: WorkloadPart
    devices: DevicesPart
    appliance: AppliancePart | None = None
    sharding: ShardingPart = Field(default_factory=ShardingPart)
    objective: ObjectivePart = Field(default_factory=ObjectivePart)
    baseline: dict[str, Any] | None = None
    baseline_description: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DlrmFile:
        if self.workload.batch % self.devices.count:
            raise ValueError(f"workload.batch = {self.workload.batch} must be a multiple of devices.count = {self.devices.count}")
        ks = self.sharding.column_shards
        if not ks and not self.sharding.spread:
            raise ValueError("sharding: give column_shards, or spread = true, or both")
        if len(set(ks)) != len(ks):
            raise ValueError(f"sharding.column_shards repeat a value: {ks}")
        ap = self.appliance
        if ap is not None:
            missing = [t for t in ap.tiers if t not in ap.module_tier_GBps]
            if missing:
                raise ValueError(f"appliance.module_tier_GBps gives no bandwidth for tier {missing[0]!r}")
            if any(not (MIN_BANDWIDTH_GBps <= v <= MAX_BANDWIDTH_GBps) for v in ap.module_tier_GBps.values()):
                raise ValueError(f"appliance.module_tier_GBps must lie in {MIN_BANDWIDTH_GBps}..{MAX_BANDWIDTH_GBps}")
        return self


#: a DLRM instance (``spec`` is a :class:`DlrmFile`)
DlrmInstance = FamilyInstance


def load_dlrm(name_or_path: str, *, calibration: CalibrationSet | None = None) -> DlrmInstance:
    path = family_path(name_or_path, "dlrm")
    return dlrm_from_data(load_toml(path), source=path, calibration=calibration)


def dlrm_from_data(raw: dict[str, Any], *, source: Path | str | None = None,
                   calibration: CalibrationSet | None = None) -> DlrmInstance:
    spec = validate(DlrmFile, raw, file=source or "<memory>")
    _check_references(spec, source)
    return DlrmInstance(spec, Path(source) if source else None, raw, shipped() if calibration is None else calibration)


def _check_references(spec: DlrmFile, source: Path | str | None) -> None:
    wl = spec.workload
    try:
        w = load_dlrm_workload(wl.workload)
    except InputError as exc:
        raise InputError(exc.message, file=source, key="workload.workload", value=wl.workload,
                         expected=exc.expected, suggestion=exc.suggestion) from None
    names = [t.name for t in w.tables]
    for n in wl.tables or []:
        if n not in names:
            raise InputError("unknown table", file=source, key="workload.tables", value=n, suggestion=did_you_mean(n, names))
    for k in spec.sharding.column_shards:
        if w.embedding_dim % k:
            raise InputError(f"a column shard count must divide the embedding dimension {w.embedding_dim}", file=source,
                             key="sharding.column_shards", value=k)
    chips = catalog.list_ids("chips")
    dv = spec.devices
    if dv.chip not in chips:
        raise InputError(f"unknown chip {dv.chip!r}", file=source, key="devices.chip", value=dv.chip, suggestion=did_you_mean(dv.chip, chips))
    chip = catalog.load_chip(dv.chip)
    if dv.count > chip.scale_up_domain_size:
        raise InputError(f"the model exchanges over one NVLink domain of {chip.scale_up_domain_size} GPUs", file=source,
                         key="devices.count", value=dv.count, expected=f"1..{chip.scale_up_domain_size}")
    ap = spec.appliance
    if ap is None:
        return
    apps = catalog.list_ids("appliances")
    if ap.id not in apps:
        raise InputError(f"unknown appliance {ap.id!r}", file=source, key="appliance.id", value=ap.id, suggestion=did_you_mean(ap.id, apps))
    app = catalog.load_appliance(ap.id)
    tiers = [t.name for t in app.tiers]
    for t in ap.tiers:
        if t not in tiers:
            raise InputError("unknown appliance tier", file=source, key="appliance.tiers", value=t, expected=", ".join(tiers))
    if ap.modules is not None and ap.modules > app.modules:
        raise InputError(f"the appliance has {app.modules} modules", file=source, key="appliance.modules", value=ap.modules)
    ports = app.modules * app.ports_per_module
    if ap.assumed_device_bandwidth_GBps is None and dv.count * dv.pool_ports > ports:
        raise InputError(f"{dv.count} GPUs x {dv.pool_ports} ports exceed the appliance's {ports} ports", file=source,
                         key="devices.pool_ports", value=dv.pool_ports, expected=f"<= {ports // dv.count}")
