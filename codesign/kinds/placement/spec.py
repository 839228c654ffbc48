"""Placement instance files (``kind = "placement"``): schema, loading and the generator.

A placement instance fixes an MoE workload, identical devices in scale-up domains and the
attention TP degree, and asks where each routed expert lives (expert placement, issue 4 item 3)
and which devices form each TP group on the topology (group-to-topology placement, item 4). The
model is :mod:`codesign.model.placement`; the MIP is :mod:`codesign.kinds.placement.formulation`.

Files live in ``instances/mapping/`` next to the mapping instances and are addressed by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, PositiveInt, model_validator

from codesign import catalog
from codesign.errors import InputError, did_you_mean
from codesign.kinds.mapping.spec import (
    FamilyInstance,
    MAX_BANDWIDTH_GBps,
    MAX_CAPACITY_GiB,
    MIN_BANDWIDTH_GBps,
    MIN_CAPACITY_GiB,
    SystemPart,
    check_engine,
    family_path,
    list_mapping_instances,
)
from codesign.model.calibration import CalibrationSet, shipped
from codesign.model.engines import chip_rules
from codesign.model.routing import zipf_weights
from codesign.model.units import Precision
from codesign.model.workload import load_workload
from codesign.schema import InstanceName, Strict, as_name, load_toml, validate

Objective = Literal["tokens_per_s", "energy_per_token_J"]


class WorkloadPart(Strict):
    workload: str = Field(min_length=1)
    precision: Precision = "fp8"
    kv_precision: Precision | None = None
    #: sequences decoding concurrently on all devices together (one token each per step)
    batch: PositiveInt
    context_tokens: PositiveInt
    #: serve only the first N decoder layers (tiny versions)
    layers: PositiveInt | None = None
    #: a cut-down model with this many routed experts per MoE layer (top_k capped at it)
    experts: PositiveInt | None = None


class DevicesPart(Strict):
    chip: str = Field(min_length=1)
    count: PositiveInt
    #: sizes of the scale-up domains in device order (sum = count), e.g. the free slots of a
    #: fragmented allocation; default: ``domain_size`` repeated
    domains: list[PositiveInt] | None = None
    #: default: the chip's scale_up_domain_size
    domain_size: PositiveInt | None = None
    #: attention tensor-parallel group size t (t divides count); 1 = data-parallel attention
    tp: PositiveInt = 1
    memory_capacity_GiB: float | None = Field(default=None, ge=MIN_CAPACITY_GiB, le=MAX_CAPACITY_GiB)
    memory_bandwidth_GBps: float | None = Field(default=None, ge=MIN_BANDWIDTH_GBps, le=MAX_BANDWIDTH_GBps)
    notes: str = ""


#: a Zipf exponent above this puts every token on one expert (256^-50 ~ 1e-120) and underflows
MAX_ZIPF_EXPONENT = 50.0
#: the most one explicit routing weight may be (relative weights: their sum stays finite)
MAX_ROUTING_WEIGHT = 1e12


class RoutingPart(Strict):
    """Per-expert routing frequency profile (the same in every MoE layer)."""

    profile: Literal["uniform", "zipf", "weights"] = "uniform"
    zipf_exponent: float = Field(default=1.0, ge=0, le=MAX_ZIPF_EXPONENT)
    #: histogram the Zipf profile into this many frequency levels (classes of equal experts)
    levels: PositiveInt | None = None
    #: explicit relative weights, one per expert (profile = "weights")
    weights: list[Annotated[float, Field(le=MAX_ROUTING_WEIGHT)]] | None = None
    #: where the profile comes from, or the assumption it encodes
    source: str = ""


class NetworkPart(Strict):
    #: bytes per hidden element sent in the dispatch (DeepSeek-V3 dispatches in FP8: 1)
    dispatch_bytes_per_element: float = Field(default=2.0, gt=0)
    #: bytes per hidden element returned in the combine (BF16: 2)
    combine_bytes_per_element: float = Field(default=2.0, gt=0)
    #: bytes per element of the TP all-reduce activations
    activation_bytes_per_element: float = Field(default=2.0, gt=0)


class BudgetsPart(Strict):
    #: time per output token (= decode step time)
    tpot_s: float | None = Field(default=None, gt=0)


class ObjectivePart(Strict):
    metric: Objective = "tokens_per_s"


class PlacementFile(Strict):
    name: InstanceName
    kind: Literal["placement"]
    description: str = Field(min_length=1)
    provenance: str = Field(min_length=1)
    workload: WorkloadPart
    devices: DevicesPart
    routing: RoutingPart = Field(default_factory=RoutingPart)
    network: NetworkPart = Field(default_factory=NetworkPart)
    budgets: BudgetsPart = Field(default_factory=BudgetsPart)
    objective: ObjectivePart = Field(default_factory=ObjectivePart)
    system: SystemPart = Field(default_factory=SystemPart)
    baseline: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PlacementFile:
        dv = self.devices
        if dv.domains is not None and sum(dv.domains) != dv.count:
            raise ValueError(f"devices.domains sum to {sum(dv.domains)}, devices.count is {dv.count}")
        if dv.domains is not None and dv.domain_size is not None:
            raise ValueError("give devices.domains or devices.domain_size, not both")
        if dv.count % dv.tp:
            raise ValueError(f"devices.tp = {dv.tp} must divide devices.count = {dv.count}")
        if self.workload.batch % dv.count:
            raise ValueError(f"workload.batch = {self.workload.batch} must be a multiple of devices.count = {dv.count}")
        r = self.routing
        if r.profile == "weights" and not r.weights:
            raise ValueError("routing.profile = 'weights' needs routing.weights (one per expert)")
        if r.profile != "weights" and r.weights is not None:
            raise ValueError("routing.weights is given but routing.profile is not 'weights'")
        if r.weights is not None and any(x <= 0 for x in r.weights):
            raise ValueError("routing.weights must be positive")
        return self


#: a placement instance (``spec`` is a :class:`PlacementFile`)
PlacementInstance = FamilyInstance


def list_placement_instances() -> list[str]:
    return list_mapping_instances("placement")


def load_placement(name_or_path: str, *, calibration: CalibrationSet | None = None) -> PlacementInstance:
    """A placement instance by name or path, evaluated under ``calibration`` (None: the shipped one)."""
    path = family_path(name_or_path, "placement")
    return placement_from_data(load_toml(path), source=path, calibration=calibration)


def placement_from_data(raw: dict[str, Any], *, source: Path | str | None = None,
                        calibration: CalibrationSet | None = None) -> PlacementInstance:
    spec = validate(PlacementFile, raw, file=source or "<memory>")
    _check_references(spec, source)
    return PlacementInstance(spec, Path(source) if source else None, raw,
                             shipped() if calibration is None else calibration)


def _check_references(spec: PlacementFile, source: Path | str | None) -> None:
    wl = spec.workload
    try:
        w = load_workload(wl.workload)
    except InputError as exc:
        raise InputError(exc.message, file=source, key="workload.workload", value=wl.workload, suggestion=exc.suggestion) from None
    if w.moe is None:
        raise InputError("expert placement needs an MoE workload", file=source, key="workload.workload", value=wl.workload, expected="deepseek-v3, qwen3-235b-a22b, mixtral-8x7b, ...")
    if w.sliding_window is not None or w.moe.interleave != 1:
        raise InputError("the placement model needs full-attention layers and an MoE block in every layer after the dense ones", file=source, key="workload.workload", value=wl.workload)
    if wl.layers is not None and not (w.moe.first_dense_layers < wl.layers <= w.num_layers):
        raise InputError(f"the model has {w.num_layers} layers, {w.moe.first_dense_layers} of them dense first", file=source, key="workload.layers", value=wl.layers, expected=f"{w.moe.first_dense_layers + 1}..{w.num_layers}")
    E = wl.experts or w.moe.num_experts
    if wl.experts is not None and wl.experts > w.moe.num_experts:
        raise InputError(f"the model has {w.moe.num_experts} experts", file=source, key="workload.experts", value=wl.experts, expected=f"<= {w.moe.num_experts}")
    if spec.routing.weights is not None and len(spec.routing.weights) != E:
        raise InputError(f"expected one weight per expert ({E})", file=source, key="routing.weights", value=f"list of {len(spec.routing.weights)}")
    chips = catalog.list_ids("chips")
    if spec.devices.chip not in chips:
        raise InputError(f"unknown chip {spec.devices.chip!r}", file=source, key="devices.chip", value=spec.devices.chip, suggestion=did_you_mean(spec.devices.chip, chips))
    check_engine(source, lambda: chip_rules(spec.system.engine, [spec.devices.chip]))
    t = spec.devices.tp
    if w.num_attention_heads % t:
        raise InputError(f"tp = {t} must divide the {w.num_attention_heads} attention heads", file=source, key="devices.tp", value=t)
    if w.mla is None and not (w.num_kv_heads % t == 0 or t % w.num_kv_heads == 0):
        raise InputError(f"tp = {t} and the {w.num_kv_heads} KV heads must divide one another", file=source, key="devices.tp", value=t)


# --- generator --------------------------------------------------------------------------------


def generate_placement(
    devices: int,
    experts: int | None = None,
    domains: int | list[int] | None = None,
    *,
    workload: str = "qwen3-235b-a22b",
    chip: str = "h100-sxm",
    tp: int = 1,
    layers: int | None = None,
    batch_per_device: int = 32,
    context_tokens: int = 4096,
    precision: str = "fp8",
    zipf_exponent: float | None = 1.0,
    levels: int | None = 4,
    fragmented: bool = False,
    objective: str = "tokens_per_s",
    seed: int = 0,
    name: str | None = None,
) -> dict[str, Any]:
    """A placement instance as a TOML-able dict (write it with ``tomli_w`` or pass it to
    :func:`placement_from_data`).

    Args:
        devices: number of identical ``chip`` devices.
        experts: routed experts per MoE layer (default: the workload's; fewer = a cut-down model).
        domains: the scale-up domains: a list of sizes (sum = devices), a number of domains
            (sizes as equal as possible, or random with ``fragmented``), or None (the chip's
            scale_up_domain_size).
        workload: an MoE workload id of the catalog.
        tp: attention TP group size (divides devices).
        layers: serve only the first N decoder layers.
        batch_per_device: sequences per device (the batch is devices x this).
        zipf_exponent: None for a uniform routing profile; else a Zipf profile with this exponent
            over the experts in a random order drawn from ``seed``.
        levels: histogram the Zipf profile into this many frequency levels (None = every expert
            its own frequency: as many classes as experts, much harder to prove).
        fragmented: with an integer ``domains``, draw random domain sizes (each >= 1) from ``seed``:
            the free slots of a fragmented cluster allocation.
        objective: "tokens_per_s" or "energy_per_token_J".
        seed: seeds the expert order of the profile and the fragment sizes.

    The result is deterministic in its arguments. Hardness grows with the number of frequency
    levels times devices: 2 levels on 64 devices prove in seconds; 4 levels on 64 devices left a
    1.8 % gap after 90 s with both solvers (formulations/placement.md §7).
    """
    rng = np.random.default_rng(seed)
    w = load_workload(workload)
    E = experts or w.moe.num_experts
    dev: dict[str, Any] = {"chip": chip, "count": devices, "tp": tp}
    if isinstance(domains, list):
        dev["domains"] = list(domains)
    elif isinstance(domains, int):
        if fragmented:
            cuts = np.sort(rng.choice(np.arange(1, devices), size=domains - 1, replace=False)) if domains > 1 else np.array([], dtype=int)
            bounds = [0, *cuts.tolist(), devices]
            dev["domains"] = [int(bounds[i + 1] - bounds[i]) for i in range(domains)]
        else:
            dev["domains"] = [len(x) for x in np.array_split(np.arange(devices), domains)]
    routing: dict[str, Any] = {"profile": "uniform", "source": "generated: uniform routing"}
    if zipf_exponent is not None:
        wts = zipf_weights(E, zipf_exponent, levels)
        order = rng.permutation(E)
        per_expert = np.empty(E)
        per_expert[order] = wts  # expert order[r] has rank r
        routing = {
            "profile": "weights",
            "weights": [float(x) for x in per_expert],
            "source": f"generated: Zipf exponent {zipf_exponent}, {levels or E} levels, expert order from seed {seed}",
        }
    wl: dict[str, Any] = {"workload": workload, "precision": precision, "batch": devices * batch_per_device, "context_tokens": context_tokens}
    if experts is not None:
        wl["experts"] = experts
    if layers is not None:
        wl["layers"] = layers
    doms = dev.get("domains")
    return {
        "name": name or as_name(f"gen-{Path(workload).stem}-{devices}d-{E}e-s{seed}"),
        "kind": "placement",
        "description": f"generated: {workload} with {E} experts on {devices} x {chip}" + (f" in domains {doms}" if doms else "") + f", tp {tp}",
        "provenance": "codesign.kinds.placement.spec.generate_placement",
        "workload": wl,
        "devices": dev,
        "routing": routing,
        "objective": {"metric": objective},
    }
