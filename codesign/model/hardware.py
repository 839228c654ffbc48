"""Hardware features: every per-device rate, energy, capacity, power, temperature and area of each
hardware design of an instance, as one table over the enumerated hardware space (model.md §3).

A *hardware design* fixes every hardware decision (for the 3D family: DRAM layers, vertical
connections, their pitch, compute area, clock and buffer; for catalog chips: the chip and its
appliance ports). Its *features* are the quantities the latency/energy model combines with the
schedule's features (``codesign.model.evaluate``). Features are in SI: s per FLOP, s per byte,
J per FLOP, J per byte, W, B, C, mm².
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from codesign import catalog
from codesign.errors import InputError, did_you_mean
from codesign.model import appliances, compute, engines, memory, power_cap, thermal
from codesign.model.calibration import Calibration
from codesign.model.units import (
    BYTES_PER_ELEMENT,
    GIGA,
    MICRO,
    NANO,
    PICO,
    PRECISION_FALLBACK,
    WEIGHT_ONLY_KV_PRECISION,
    GBps,
    GiB,
    MiB,
)
from codesign.paths import catalog_dir
from codesign.schema import Strict, is_file, load_toml, validate

if TYPE_CHECKING:
    from codesign.catalog import Chip
    from codesign.kinds.grid.spec import Instance




# --- 3D family parameters ---------------------------------------------------------------------
class StackCompute(Strict):
    reference_clock_GHz: float = Field(gt=0)
    dense_TFLOPS_per_mm2: dict[str, float]
    energy_pJ_per_FLOP: dict[str, float]
    vf_curve_GHz: list[float]
    vf_curve_V: list[float]
    static_W_per_mm2: float = Field(ge=0)
    fixed_logic_area_mm2: float = Field(ge=0)
    logic_bandwidth_GBps_per_mm2: float = Field(gt=0)


class StackSram(Strict):
    density_MiB_per_mm2: float = Field(gt=0)


class StackDram(Strict):
    capacity_GiB_per_mm2: float = Field(gt=0)
    banks_per_mm2: float = Field(gt=0)
    bytes_per_activation: float = Field(gt=0)
    tRC_ns: float = Field(gt=0)
    max_active_bank_fraction: float = Field(gt=0, le=1)
    array_energy_pJ_per_bit: float = Field(ge=0)
    per_layer_energy_pJ_per_bit: float = Field(ge=0)
    static_W_per_layer: float = Field(ge=0)
    base_latency_ns: float = Field(gt=0)
    per_layer_latency_ns: float = Field(ge=0)


class StackVertical(Strict):
    rate_Gbps: float = Field(gt=0)
    reference_pitch_um: float = Field(gt=0)
    energy_pJ_per_bit_at_reference: float = Field(ge=0)
    keep_out_factor: float = Field(ge=1)


class StackThermal(Strict):
    r0_C_per_W: float = Field(gt=0)
    r_per_layer_C_per_W: float = Field(ge=0)
    dram_junction_max_C: float


class StackLink(Strict):
    bandwidth_GBps_per_direction: float = Field(gt=0)
    latency_ns: float = Field(ge=0)
    energy_pJ_per_bit: float = Field(ge=0)
    scale_out_bandwidth_GBps_per_direction: float = Field(gt=0)
    scale_out_latency_ns: float = Field(ge=0)
    scale_out_energy_pJ_per_bit: float = Field(ge=0)
    io_power_W: float = Field(ge=0)
    in_switch_reduction: bool = False  # as the catalog interconnect's field


class StackFamily(Strict):
    id: str
    name: str
    source: list[str]
    compute: StackCompute
    sram: StackSram
    dram: StackDram
    vertical: StackVertical
    thermal: StackThermal
    link: StackLink


@cache
def load_family(family_id: str) -> StackFamily:
    path = catalog_dir("families") / f"{family_id}.toml"
    if not is_file(path):
        ids = sorted(p.stem for p in catalog_dir("families").glob("*.toml"))
        raise InputError(
            f"unknown 3D family {family_id!r}", expected=f"one of {ids}", suggestion=did_you_mean(family_id, ids)
        )
    return validate(StackFamily, load_toml(path), file=path)


# --- calibration applied -------------------------------------------------------------------
def achieved_memory_fraction(memory_efficiency: Any, cap_GBps: float | None, peak_GBps: Any) -> Any:
    """Fraction of the peak local-memory bandwidth a step sustains: min(e, cap / peak), e without
    a cap   (eq. 3.21a)."""
    if cap_GBps is None:
        return memory_efficiency
    return np.minimum(memory_efficiency, cap_GBps / np.asarray(peak_GBps, dtype=float))


def achieved_memory_Bps(peak_Bps: Any, cal: Calibration) -> Any:
    """Local-memory bandwidth a step sustains: e x peak, at most the die's cap   (eq. 3.21a)."""
    peak = np.asarray(peak_Bps, dtype=float)
    return peak * achieved_memory_fraction(cal.memory_efficiency, cal.memory_bandwidth_cap_GBps, peak / GBps)


def usable_capacity_B(raw_B: Any, cal: Calibration) -> Any:
    """Memory weights and the KV-cache pool may take: u·C_raw − R, at least 0   (eq. 3.5a, 3.21)."""
    return np.maximum(np.asarray(raw_B, dtype=float) * cal.usable_memory_fraction - cal.runtime_reserve_GiB * GiB, 0.0)


# --- the table --------------------------------------------------------------------------------
@dataclass
class HardwareTable:
    """All hardware designs of an instance (rows) and their features (columns)."""

    decisions: dict[str, np.ndarray]  # decision name -> values per row (object or numeric)
    features: dict[str, np.ndarray] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # feature -> description with unit

    @property
    def size(self) -> int:
        return len(next(iter(self.decisions.values()))) if self.decisions else 1

    def column(self, name: str) -> np.ndarray:
        """A feature, or a product of features written ``a*b``."""
        out = np.ones(self.size)
        for part in name.split("*"):
            out = out * self.features[part]
        return out

    def row(self, i: int) -> dict[str, float]:
        return {k: float(v[i]) for k, v in self.features.items()}

    def index_of(self, design: dict[str, Any]) -> int:
        mask = np.ones(self.size, dtype=bool)
        for k, vals in self.decisions.items():
            mask &= vals == design[k]
        idx = np.flatnonzero(mask)
        if len(idx) != 1:
            raise InputError("design does not name exactly one hardware design", value={k: design[k] for k in self.decisions})
        return int(idx[0])


def enumerate_decisions(decisions: list[Any]) -> dict[str, np.ndarray]:
    """Cartesian product of the domains, one array per decision (first decision slowest)."""
    if not decisions:
        return {}
    names = [d.name for d in decisions]
    grids = list(itertools.product(*[d.domain for d in decisions]))
    out = {}
    for j, n in enumerate(names):
        vals = [g[j] for g in grids]
        arr = np.array(vals, dtype=object if isinstance(vals[0], str) else None)
        out[n] = arr
    return out


def precisions_of(inst: Instance) -> list[str]:
    """The precisions the instance's math runs at: each workload's, and its attention's
    (:func:`attention_precision`), each a column ``s_per_flop@<precision>``."""
    return sorted({w.precision for w in inst.workloads} | {attention_precision(inst, w) for w in inst.workloads})


def attention_precision(inst: Instance, spec: Any) -> str:
    """The precision a workload's attention (QK^T, score x V) runs at (eq. 2.15m): the KV cache's
    (the workload's, else the engine's rule, :meth:`engines.Rules.kv_precision`), never narrower
    than the weights': an engine quantises the query to the cache's format only where the
    checkpoint's activations are as narrow (trtllm-bench builds FP8 context FMHA for FP8 and NVFP4
    checkpoints, tensorrt_llm/bench/build/build.py; no engine runs an FP4 FMHA)."""
    kv = engines.instance_rules(inst).kv_precision(spec.precision, spec.kv_precision, WEIGHT_ONLY_KV_PRECISION)
    return kv if BYTES_PER_ELEMENT[kv] >= BYTES_PER_ELEMENT[spec.precision] else spec.precision


def exp_limited(inst: Instance) -> bool:
    """Whether any hardware design of the instance has a special-function (exponential) rate: a
    catalog chip with ``sfu_exp_G_per_s`` (the 3D family's tiles have none, eq. 2.15m)."""
    if inst.hardware.family != "catalog":
        return False
    chips = inst.hardware.decisions.get("chip") or [inst.hardware.chip]
    return any(catalog.load_chip(c).sfu_exp_G_per_s is not None for c in chips)


def hardware_table(inst: Instance, designs: dict[str, np.ndarray] | None = None) -> HardwareTable:
    """Features of the given hardware designs (default: every hardware design of the instance)."""
    if designs is None:
        designs = enumerate_decisions(inst.hardware_decisions)
    table = HardwareTable(decisions=designs)
    if inst.hardware.family == "stacked-3d":
        _stacked_features(inst, table)
    else:
        _catalog_features(inst, table)
    appliances.pool_features(inst, table)  # pooled memory over one or several appliances
    _stream_split(inst, table)
    table.features["one"] = np.ones(table.size)
    for name, values in designs.items():  # numeric decisions by value, for custom budgets
        if values.dtype != object:
            table.features[f"value:{name}"] = values.astype(float)
    return table


def _stream_split(inst: Instance, t: HardwareTable) -> None:
    """Each stream's time per unit split into its overlapped part o·s (``<col>_ovl``, the step's
    max group) and its serial part (1 - o)·s (``<col>_seq``, added), o = ``stream_overlap``
    (eq. 3.26). An infinite time per unit (a tier the design does not have) stays infinite in a
    part with a positive share and is 0 in a part with none (never 0·inf)."""
    o = t.features["stream_overlap"]
    cols = [f"s_per_flop@{p}" for p in precisions_of(inst)] + ["s_per_exp", "s_per_B_local", "s_per_B_pool"]
    for col in cols:
        base, _, prec = col.partition("@")
        s = t.features[col]
        for part, share in (("ovl", o), ("seq", 1.0 - o)):
            with np.errstate(invalid="ignore"):
                v = np.where(share > 0, share * s, 0.0)
            _put(t, f"{base}_{part}" + (f"@{prec}" if prec else ""), v,
                 f"{'overlapped' if part == 'ovl' else 'serial'} part of {col}")


def _put(table: HardwareTable, name: str, value: Any, label: str) -> None:
    table.features[name] = np.broadcast_to(np.asarray(value, dtype=float), (table.size,)).copy()
    table.labels[name] = label


def _fixed(inst: Instance, table: HardwareTable, name: str) -> np.ndarray:
    """A hardware decision's values per row (its single default if not a decision)."""
    if name in table.decisions:
        return table.decisions[name]
    raise InputError(
        f"hardware decision {name!r} needs a domain",
        key=f"hardware.decisions.{name}",
        expected="a list of values in the instance file",
    )


def _stacked_features(inst: Instance, t: HardwareTable) -> None:
    fam = load_family(inst.hardware.stack)
    cal = inst.calibration.for_chip(fam.id, stacked=True)
    c, d, v, th, ln = fam.compute, fam.dram, fam.vertical, fam.thermal, fam.link
    layers = _fixed(inst, t, "dram_layers").astype(float)
    tsv = _fixed(inst, t, "tsv_count").astype(float)
    pitch = _fixed(inst, t, "tsv_pitch_um").astype(float)
    area_c = _fixed(inst, t, "compute_area_mm2").astype(float)
    clock = _fixed(inst, t, "clock_GHz").astype(float)
    sram = _fixed(inst, t, "sram_MiB").astype(float)

    area_sram = sram / fam.sram.density_MiB_per_mm2
    area_tsv = memory.tsv_area_mm2(tsv, pitch, v.keep_out_factor)
    footprint = area_c + area_sram + area_tsv + c.fixed_logic_area_mm2
    _put(t, "area_mm2", footprint, "logic-die (and stack) footprint, mm²")
    _put(t, "tsv_area_mm2", area_tsv, "area of vertical connections, mm²")
    _put(t, "area_compute_mm2", area_c, "compute area, mm²")
    _put(t, "area_sram_mm2", area_sram, "buffer (SRAM) area, mm²")
    _put(t, "area_fixed_logic_mm2", c.fixed_logic_area_mm2, "fixed logic area (I/O, control), mm²")

    volt = compute.voltage_V(clock, c.vf_curve_GHz, c.vf_curve_V)
    v_ref = float(compute.voltage_V(c.reference_clock_GHz, c.vf_curve_GHz, c.vf_curve_V))
    for prec in precisions_of(inst):
        p = math_format(c.dense_TFLOPS_per_mm2, prec, f"family {fam.id} compute.dense_TFLOPS_per_mm2")
        peak = compute.peak_flops(area_c, clock, c.dense_TFLOPS_per_mm2[p], c.reference_clock_GHz)
        _put(t, f"peak_flops@{prec}", peak, f"peak dense FLOP/s at {prec}")
        _put(t, f"s_per_flop@{prec}", 1.0 / (peak * cal.compute_efficiency_at(p)), "s per FLOP (achievable)")
        e = compute.energy_per_flop_J(c.energy_pJ_per_FLOP[p], volt, v_ref)
        _put(t, f"J_per_flop@{prec}", e, "dynamic J per FLOP")
    _put(t, "s_per_exp", 0.0, "s per softmax exponential (0: no limit, the family has no SFU rate)")
    ref_prec = "bf16" if "bf16" in c.dense_TFLOPS_per_mm2 else next(iter(c.dense_TFLOPS_per_mm2))
    peak_ref = compute.peak_flops(area_c, clock, c.dense_TFLOPS_per_mm2[ref_prec], c.reference_clock_GHz)
    p_compute = peak_ref * compute.energy_per_flop_J(c.energy_pJ_per_FLOP[ref_prec], volt, v_ref)
    p_static_logic = compute.static_power_W(footprint, c.static_W_per_mm2, volt, v_ref)

    bw_vert = memory.vertical_bandwidth_Bps(tsv, v.rate_Gbps)
    bw_bank = memory.bank_bandwidth_Bps(
        layers, footprint, d.banks_per_mm2, d.bytes_per_activation, d.tRC_ns, d.max_active_bank_fraction
    )
    lat = memory.access_latency_s(layers, d.base_latency_ns, d.per_layer_latency_ns)
    bw_little = memory.littles_law_bandwidth_Bps(sram * MiB, lat)
    bw_logic = area_c * c.logic_bandwidth_GBps_per_mm2 * GBps
    bw = np.minimum(np.minimum(bw_vert, bw_bank), np.minimum(bw_little, bw_logic))
    _put(t, "bw_vertical_Bps", bw_vert, "vertical-connection limit, B/s")
    _put(t, "bw_bank_Bps", bw_bank, "bank-activation limit, B/s")
    _put(t, "bw_littles_law_Bps", bw_little, "buffer (Little's law) limit, B/s")
    _put(t, "bw_logic_Bps", bw_logic, "logic-side limit, B/s")
    _put(t, "bandwidth_Bps", bw, "local DRAM bandwidth = min of the four limits, B/s")
    _put(t, "s_per_B_local", 1.0 / achieved_memory_Bps(bw, cal), "s per local DRAM byte")
    _put(t, "stream_overlap", cal.stream_overlap, "overlapping fraction of the compute and memory streams")
    e_dram = memory.stacked_energy_J_per_B(
        layers, pitch, d.array_energy_pJ_per_bit, d.per_layer_energy_pJ_per_bit,
        v.energy_pJ_per_bit_at_reference, v.reference_pitch_um,
    )
    _put(t, "J_per_B_local", e_dram, "J per local DRAM byte")
    cap = memory.stack_capacity_B(layers, footprint, d.capacity_GiB_per_mm2)
    _put(t, "capacity_B", usable_capacity_B(cap, cal), "usable local memory, B")
    _put(t, "raw_capacity_B", cap, "local DRAM capacity, B")

    p_dram_static = layers * d.static_W_per_layer
    p_dram_dyn = bw * e_dram
    power = p_compute + p_static_logic + p_dram_static + p_dram_dyn + ln.io_power_W
    _put(t, "power_compute_W", p_compute, "compute power at peak, W")
    _put(t, "power_static_W", p_static_logic + p_dram_static, "static power (logic leakage + DRAM refresh), W")
    _put(t, "power_dram_W", p_dram_dyn, "DRAM power at full bandwidth, W")
    _put(t, "io_power_W", ln.io_power_W, "link I/O power, W")
    _put(t, "power_W", power, "device design power (all parts at full load), W")
    _put(t, "static_W", p_static_logic + p_dram_static, "power drawn whenever the device is on, W")
    r_th = thermal.thermal_resistance_C_per_W(layers, th.r0_C_per_W, th.r_per_layer_C_per_W)
    _put(t, "r_th_C_per_W", r_th, "stack thermal resistance, C/W")
    _put(t, "temperature_C", thermal.junction_temperature_C(power, r_th, inst.system.ambient_C), "junction temperature at design power, C")
    _put(t, "junction_max_C", th.dram_junction_max_C, "DRAM junction limit, C")

    _links(
        t, cal, host_us=cal.host_us_per_sequence + engines.host_us_per_sequence(inst),
        up_bw=ln.bandwidth_GBps_per_direction * GBps, up_lat=ln.latency_ns * NANO, up_e=ln.energy_pJ_per_bit,
        out_bw=ln.scale_out_bandwidth_GBps_per_direction * GBps, out_lat=ln.scale_out_latency_ns * NANO,
        out_e=ln.scale_out_energy_pJ_per_bit, in_switch=ln.in_switch_reduction,
    )


def math_format(table: dict[str, float], prec: str, where: str) -> str:
    """The format a chip runs precision ``prec`` at: the first of PRECISION_FALLBACK[prec] with a
    throughput in ``table`` (``where`` names the table in the error if none has)."""
    for p in PRECISION_FALLBACK.get(prec, (prec,)):
        if table.get(p, 0) > 0:
            return p
    raise InputError(f"no throughput at {prec} or a wider precision", key=where, value=sorted(table))


def _links(t: HardwareTable, cal: Calibration, *, host_us, up_bw, up_lat, up_e, out_bw, out_lat, out_e,
           in_switch=False) -> None:
    eff = cal.network_efficiency
    _reduction(t, in_switch)
    _put(t, "s_per_B_scale_up", 1.0 / (np.asarray(up_bw, dtype=float) * eff), "s per byte on scale-up links")
    _put(t, "s_per_B_scale_up_cross", 0.0, "extra s per scale-up ring byte across CPU sockets (none here)")
    _put(t, "s_per_step_scale_up", up_lat, "latency per collective step on scale-up, s")
    _put(t, "J_per_B_scale_up", np.asarray(up_e, dtype=float) * 8 * PICO, "J per byte on scale-up")
    _put(t, "s_per_B_scale_out", 1.0 / (np.asarray(out_bw, dtype=float) * eff), "s per byte on scale-out")
    _put(t, "s_per_step_scale_out", out_lat, "latency per collective step on scale-out, s")
    _put(t, "J_per_B_scale_out", np.asarray(out_e, dtype=float) * 8 * PICO, "J per byte on scale-out")
    _put(t, "s_per_layer", cal.layer_overhead_us * MICRO, "fixed overhead per layer per step, s")
    _put(t, "s_per_collective_step", cal.collective_step_latency_us * MICRO,
         "software time per ring step of a TP collective, s")
    _put(t, "s_per_sequence", host_us * MICRO, "host time per sequence of a step (calibration's + engine's), s")


def _reduction(t: HardwareTable, in_switch: Any) -> None:
    """Which all-reduce the scale-up links run (eq. 3.13e): ``reduce_ring`` = 1 where the devices
    reduce in a ring, ``reduce_in_switch`` = 1 where the switches reduce (NVLink SHARP)."""
    flag = np.asarray(in_switch, dtype=float)
    _put(t, "reduce_in_switch", flag, "1 if the scale-up switches reduce (in-network all-reduce)")
    _put(t, "reduce_ring", 1.0 - flag, "1 if the devices reduce in a ring")


def socket_fields(inst: Instance, chip: Chip) -> tuple[int, float] | None:
    """(devices per socket, cross-socket bandwidth fraction) of a catalog chip's two-socket PCIe
    server (eq. 3.17b), or None: the chip has no sockets, or the instance names a scale-up
    interconnect of its own instead of the chip's fabric."""
    if chip.scale_up_socket_size is None:
        return None
    if inst.system.scale_up is not None and inst.system.scale_up != chip.scale_up_interconnect:
        return None
    return chip.scale_up_socket_size, float(chip.cross_socket_bandwidth_fraction)


def socket_size_of(inst: Instance) -> int | None:
    """The devices per CPU socket of the instance's catalog chips that sit in two-socket PCIe
    servers (eq. 3.17b), None if none does. The schedule's crossing bytes depend on it, so the
    chips an instance may choose must agree on it (the cross-socket fraction may differ: it is a
    hardware column)."""
    if inst.hardware.family != "catalog":
        return None
    chips = inst.hardware.decisions.get("chip") or [inst.hardware.chip]
    sizes: dict[str, int] = {}
    for cid in chips:
        fields = socket_fields(inst, catalog.load_chip(cid))
        if fields is not None:
            sizes[cid] = fields[0]
    if len(set(sizes.values())) > 1:
        raise InputError(
            "the instance's chips sit in servers with different numbers of devices per CPU socket",
            key="hardware.decisions.chip",
            value=sizes,
            expected="chips whose scale_up_socket_size agree (or have none)",
            suggestion="solve the chips of each socket size as separate instances",
        )
    return next(iter(sizes.values()), None)


def _catalog_features(inst: Instance, t: HardwareTable) -> None:
    chips = t.decisions["chip"]
    uniq = sorted(set(chips.tolist()))
    cols: dict[str, np.ndarray] = {}

    def put(name: str, chip_id: str, value: float) -> None:
        cols.setdefault(name, np.zeros(t.size))[chips == chip_id] = value

    for cid in uniq:
        chip = catalog.load_chip(cid)
        cal = inst.calibration.for_chip(cid)
        mem = catalog.load_memory(chip.memory_technology)
        up = catalog.load_interconnect(inst.system.scale_up or chip.scale_up_interconnect)
        out = catalog.load_interconnect(inst.system.scale_out or chip.scale_out_interconnect)
        for prec in precisions_of(inst):
            p = math_format(chip.peak_dense_TFLOPS, prec, f"chip {cid} peak_dense_TFLOPS")
            peak = chip.peak_dense_TFLOPS[p] * 1e12
            put(f"peak_flops@{prec}", cid, peak)
            put(f"s_per_flop@{prec}", cid, 1.0 / (peak * cal.compute_efficiency_at(p)))
            put(f"J_per_flop@{prec}", cid, cal.compute_power_fraction * chip.tdp_W / peak)
        # the softmax's exponentials on the special-function units at the compute efficiency (eq.
        # 2.15m); 0 where the chip has no rate: no limit
        exp_rate = chip.sfu_exp_G_per_s
        put("s_per_exp", cid, 0.0 if exp_rate is None else 1.0 / (exp_rate * GIGA * cal.compute_efficiency))
        bw = chip.memory_bandwidth_GBps * GBps
        put("bandwidth_Bps", cid, bw)
        put("s_per_B_local", cid, 1.0 / achieved_memory_Bps(bw, cal))
        put("J_per_B_local", cid, mem.energy_pJ_per_bit * 8 * PICO)
        put("raw_capacity_B", cid, chip.memory_capacity_GiB * GiB)
        put("capacity_B", cid, usable_capacity_B(chip.memory_capacity_GiB * GiB, cal))
        put("power_W", cid, chip.tdp_W)
        put("static_W", cid, cal.static_power_fraction * chip.tdp_W)
        put("area_mm2", cid, chip.die_area_mm2)
        put("temperature_C", cid, np.nan)
        put("junction_max_C", cid, np.inf)
        # an instance that names its own links overrides the chip's (bandwidth, latency, energy)
        up_bw = (up.bandwidth_GBps_per_direction if inst.system.scale_up else chip.scale_up_bandwidth_GBps_per_direction) * GBps
        out_bw = (out.bandwidth_GBps_per_direction if inst.system.scale_out else chip.scale_out_bandwidth_GBps_per_direction) * GBps
        eff = cal.network_efficiency
        put("s_per_B_scale_up", cid, 1.0 / (up_bw * eff))
        # a ring across the server's CPU sockets runs at the fraction phi of the in-socket pace: its
        # bytes cost (1/phi - 1) x more on top (eq. 3.17b), on the chip's own PCIe fabric only
        sockets = socket_fields(inst, chip)
        put("s_per_B_scale_up_cross", cid, 0.0 if sockets is None else (1.0 / sockets[1] - 1.0) / (up_bw * eff))
        put("s_per_step_scale_up", cid, up.latency_ns * NANO)
        put("J_per_B_scale_up", cid, up.energy_pJ_per_bit * 8 * PICO)
        put("reduce_in_switch", cid, float(up.in_switch_reduction))
        put("s_per_B_scale_out", cid, 1.0 / (out_bw * eff))
        put("s_per_step_scale_out", cid, out.latency_ns * NANO)
        put("J_per_B_scale_out", cid, out.energy_pJ_per_bit * 8 * PICO)
        put("s_per_layer", cid, cal.layer_overhead_us * MICRO)
        put("s_per_collective_step", cid, cal.collective_step_latency_us * MICRO)
        # the host's time per sequence: the calibration's plus the engine's (engines.host_us_per_sequence)
        host_us = cal.host_us_per_sequence + engines.host_us_per_sequence(inst, cid, chip.memory_capacity_GiB)
        put("s_per_sequence", cid, host_us * MICRO)
        put("stream_overlap", cid, cal.stream_overlap)
    for name, col in cols.items():
        t.features[name] = col
        t.labels.setdefault(name, name)
    _reduction(t, t.features["reduce_in_switch"])
    power_cap.apply_caps(inst, t)  # a power limit lowers the compute clock (eq. 3.20d)


def check_hardware_references(inst: Instance, path: Path) -> None:
    """Catalog ids named by the hardware/system sections exist."""
    def wrap(fn, value, key):
        try:
            fn(value)
        except InputError as exc:
            raise InputError(
                exc.message, file=path, key=key, value=value, expected=exc.expected, suggestion=exc.suggestion
            ) from None

    hw = inst.hardware
    if hw.family == "stacked-3d":
        wrap(load_family, hw.stack, "hardware.stack")
    else:
        if hw.chip is not None:
            wrap(catalog.load_chip, hw.chip, "hardware.chip")
        for cid in hw.decisions.get("chip", []):
            wrap(catalog.load_chip, cid, "hardware.decisions.chip")
    if inst.system.appliance:
        wrap(catalog.load_appliance, inst.system.appliance, "system.appliance")
    appliances.check_decisions(inst, path)
    power_cap.check_limits(inst, path)
    for key in ("scale_up", "scale_out"):
        val = getattr(inst.system, key)
        if val:
            wrap(catalog.load_interconnect, val, f"system.{key}")
