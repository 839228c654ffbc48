"""Training instance files (``kind = "training"``): schema, loading, and the model's numbers.

A training instance fixes a dense workload, a global batch, identical devices in nodes and, if
given, a pooled appliance the devices' optical ports reach; it asks for the parallel layout (tp,
pp, dp), the ZeRO stage, the micro-batch, recomputation and the path of each traffic class. The
model is :mod:`codesign.model.training`; the MIP is :mod:`codesign.kinds.training.formulation`.

Files live in ``instances/mapping/`` beside the other fixed-hardware kinds and are addressed by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator

from codesign import catalog
from codesign.errors import InputError, did_you_mean
from codesign.kinds.mapping.spec import (
    FamilyInstance,
    MAX_BANDWIDTH_GBps,
    MIN_BANDWIDTH_GBps,
    distinct,
    family_path,
)
from codesign.model import memory
from codesign.model.calibration import CalibrationSet, shipped
from codesign.model.hardware import usable_capacity_B
from codesign.model.training import PATHS, ZERO_STAGES, TrainingSetup
from codesign.model.units import PICO, TBPS_TO_BPS, GBps, GiB
from codesign.model.workload import layer_weight_params, load_workload
from codesign.schema import InstanceName, Strict, load_toml, validate

Objective = Literal["tokens_per_s", "energy_per_step_J", "network_energy_per_step_J"]
#: bits per byte (per-bit energies -> J/B)
BITS_PER_BYTE = 8.0
#: a path through the appliance crosses its one switch: adapter + switch + adapter
APPLIANCE_SWITCHES = 1


class WorkloadPart(Strict):
    workload: str = Field(min_length=1)
    #: tokens per sequence
    sequence_tokens: PositiveInt
    #: sequences per optimizer step (all devices together)
    global_batch: PositiveInt
    #: train only the first N decoder layers (tiny versions brute force enumerates)
    layers: PositiveInt | None = None


class DevicesPart(Strict):
    chip: str = Field(min_length=1)
    count: PositiveInt
    #: devices per NVLink domain (default: the chip's scale_up_domain_size)
    node_size: PositiveInt | None = None


class AppliancePart(Strict):
    id: str = Field(min_length=1)
    #: optical ports of each device to the appliance
    ports_per_device: PositiveInt = 1
    #: the paper's assumption: each device reaches the appliance at this bandwidth, whatever its
    #: ports and the switch (CelestiSim's 26,800 GB/s); not given: min(ports, switch share)
    assumed_device_bandwidth_GBps: float | None = Field(default=None, ge=MIN_BANDWIDTH_GBps, le=MAX_BANDWIDTH_GBps)


class SpacePart(Strict):
    tp: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8])
    pp: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8])
    zero: list[int] = Field(default_factory=lambda: list(ZERO_STAGES))
    micro_batch: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4])
    recompute: list[bool] = Field(default_factory=lambda: [False, True])
    #: the paths collectives may take (without an appliance: only "electrical")
    paths: list[Literal["electrical", "appliance"]] = Field(default_factory=lambda: list(PATHS))

    @field_validator("tp", "pp", "zero", "micro_batch", "recompute", "paths")
    @classmethod
    def _distinct(cls, value: Any) -> Any:
        return distinct(value)

    @field_validator("zero")
    @classmethod
    def _stages(cls, value: list[int]) -> list[int]:
        if any(z not in ZERO_STAGES for z in value):
            raise ValueError(f"ZeRO stages are {list(ZERO_STAGES)}, got {value}")
        return value


class BudgetsPart(Strict):
    step_time_s: float | None = Field(default=None, gt=0)
    #: average power of the devices over a step (energy per step / step time)
    power_W: float | None = Field(default=None, gt=0)


class ObjectivePart(Strict):
    metric: Objective = "energy_per_step_J"


class TrainingFile(Strict):
    name: InstanceName
    kind: Literal["training"]
    description: str = Field(min_length=1)
    provenance: str = Field(min_length=1)
    workload: WorkloadPart
    devices: DevicesPart
    appliance: AppliancePart | None = None
    space: SpacePart = Field(default_factory=SpacePart)
    budgets: BudgetsPart = Field(default_factory=BudgetsPart)
    objective: ObjectivePart = Field(default_factory=ObjectivePart)
    baseline: dict[str, Any] | None = None


#: a training instance (``spec`` is a :class:`TrainingFile`): the family's one instance record
TrainingInstance = FamilyInstance


def load_training(name_or_path: str, *, calibration: CalibrationSet | None = None) -> TrainingInstance:
    path = family_path(name_or_path, "training")
    return training_from_data(load_toml(path), source=path, calibration=calibration)


def training_from_data(raw: dict[str, Any], *, source: Path | str | None = None,
                       calibration: CalibrationSet | None = None) -> TrainingInstance:
    spec = validate(TrainingFile, raw, file=source or "<memory>")
    inst = TrainingInstance(spec, Path(source) if source else None, raw, shipped() if calibration is None else calibration)
    build_setup(inst)  # every reference checked at load
    return inst


def _fail(inst: TrainingInstance, msg: str, key: str, value: Any, **kw: Any) -> InputError:
    return InputError(msg, file=inst.source or "<memory>", key=key, value=value, **kw)


def build_setup(inst: TrainingInstance) -> TrainingSetup:
    """The model's numbers of an instance (InputError naming the key when a reference is wrong)."""
    sp = inst.spec
    try:
        w = load_workload(sp.workload.workload)
    except InputError as exc:
        raise _fail(inst, exc.message, "workload.workload", sp.workload.workload, suggestion=exc.suggestion) from None
    if w.moe is not None or w.mla is not None or w.sliding_window is not None:
        raise _fail(inst, "the training model covers dense full-attention decoders (no MoE, MLA or sliding window)",
                    "workload.workload", sp.workload.workload, expected="llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, ...")
    layers = sp.workload.layers or w.num_layers
    if layers > w.num_layers:
        raise _fail(inst, f"the model has {w.num_layers} layers", "workload.layers", layers, expected=f"<= {w.num_layers}")
    chips = catalog.list_ids("chips")
    if sp.devices.chip not in chips:
        raise _fail(inst, f"unknown chip {sp.devices.chip!r}", "devices.chip", sp.devices.chip,
                    suggestion=did_you_mean(sp.devices.chip, chips))
    chip = catalog.load_chip(sp.devices.chip)
    if "bf16" not in chip.peak_dense_TFLOPS:
        raise _fail(inst, "the chip has no bf16 peak (training runs in bf16)", "devices.chip", sp.devices.chip)
    cal = inst.calibration.for_chip(sp.devices.chip)
    mem = catalog.load_memory(chip.memory_technology)
    nvl = catalog.load_interconnect(chip.scale_up_interconnect)
    ib = catalog.load_interconnect(chip.scale_out_interconnect)
    lp = layer_weight_params(w)
    layer_params = lp.attention + lp.dense_mlp + lp.layer_norms
    layer_mm = lp.attention_matmul + lp.dense_mlp
    emb = w.vocab_size * w.hidden_size
    paths = tuple(sp.space.paths)
    app_Bps, app_J = 0.0, 0.0
    if sp.appliance is not None:
        try:
            app = catalog.load_appliance(sp.appliance.id)
        except InputError as exc:
            raise _fail(inst, exc.message, "appliance.id", sp.appliance.id, suggestion=exc.suggestion) from None
        if sp.appliance.assumed_device_bandwidth_GBps is not None:
            raw_Bps = sp.appliance.assumed_device_bandwidth_GBps * GBps
        else:
            raw_Bps = float(memory.pooled_bandwidth_Bps(sp.appliance.ports_per_device, app.port_bandwidth_Tbps * TBPS_TO_BPS,
                                                        app.switching_capacity_Tbps * TBPS_TO_BPS, sp.devices.count))
        app_Bps = raw_Bps * cal.network_efficiency
        app_J = catalog.path_energy_pJ_per_bit(app, "photonic", APPLIANCE_SWITCHES) * PICO * BITS_PER_BYTE
        ports = sp.appliance.ports_per_device * sp.devices.count
        if ports > app.modules * app.ports_per_module:
            raise _fail(inst, f"{ports} device ports but the appliance has {app.modules * app.ports_per_module}",
                        "appliance.ports_per_device", sp.appliance.ports_per_device)
    elif "appliance" in paths:
        raise _fail(inst, "a path through the appliance needs an [appliance]", "space.paths", list(paths),
                    expected='["electrical"], or add [appliance]')
    peak = chip.peak_dense_TFLOPS["bf16"] * 1e12
    return TrainingSetup(
        layers=layers, hidden=w.hidden_size, attention_width=w.num_attention_heads * w.head_dim,
        heads=w.num_attention_heads, kv_heads=w.num_kv_heads, layer_params=layer_params, layer_matmul_params=layer_mm,
        embedding_params=emb, lm_head_params=emb, tied=w.tied_embeddings,
        sequence_tokens=sp.workload.sequence_tokens, global_batch=sp.workload.global_batch,
        devices=sp.devices.count, node_size=sp.devices.node_size or chip.scale_up_domain_size,
        peak_flops=peak, compute_efficiency=cal.compute_efficiency_at("bf16"),
        J_per_flop=cal.compute_power_fraction * chip.tdp_W / peak, static_W=cal.static_power_fraction * chip.tdp_W,
        capacity_B=float(usable_capacity_B(chip.memory_capacity_GiB * GiB, cal)),
        hbm_J_per_B=mem.energy_pJ_per_bit * PICO * BITS_PER_BYTE,
        nvlink_Bps=chip.scale_up_bandwidth_GBps_per_direction * GBps * cal.network_efficiency,
        nvlink_J_per_B=nvl.energy_pJ_per_bit * PICO * BITS_PER_BYTE,
        ib_Bps=chip.scale_out_bandwidth_GBps_per_direction * GBps * cal.network_efficiency,
        ib_J_per_B=ib.energy_pJ_per_bit * PICO * BITS_PER_BYTE,
        appliance_Bps=app_Bps, appliance_J_per_B=app_J,
        tp_options=tuple(sp.space.tp), pp_options=tuple(sp.space.pp), zero_options=tuple(sp.space.zero),
        micro_batch_options=tuple(sp.space.micro_batch), recompute_options=tuple(sp.space.recompute), paths=paths,
        objective=sp.objective.metric, step_time_budget_s=sp.budgets.step_time_s, power_budget_W=sp.budgets.power_W,
    )

