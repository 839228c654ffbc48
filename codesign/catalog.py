"""The hardware catalog: accelerator chips, memory technologies, interconnects, memory appliances.

Each entry is one TOML file under ``instances/catalog/<kind>/<id>.toml`` whose keys carry their
unit (``memory_bandwidth_GBps``, ``tdp_W``, ``energy_pJ_per_bit``) and whose figures cite a
``source``. A figure that is not public is still given a value, and the file says so in its
``assumptions`` list: one string per figure, ``"<key>: <why this value>"``.

Unit conventions of the files (SI helpers on each model convert once):

- ``GB``/``GBps``/``TB``/``Tbps`` are decimal (1 GB = 1e9 B; 1 Tbps = 1e12 bit/s).
- ``GiB``/``MiB`` are binary (1 GiB = 2**30 B); DRAM capacities are binary by construction
  (a 16 Gb die holds 2**34 bits, so eight of them make a 16 GiB stack).
- ``Gb`` for a DRAM die density is binary too (16 Gb = 2**34 bit).
- ``*_per_direction`` bandwidths count one direction of a full-duplex link; vendors' "900 GB/s
  NVLink" is both directions added, so 450 GB/s per direction.

Look-ups: :func:`load_chip`, :func:`load_memory`, :func:`load_interconnect`,
:func:`load_appliance` take a catalog id (or a path to a TOML file); :func:`list_ids` lists a
kind; :func:`check_references` loads everything and checks that every id a file names exists.
"""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path
from typing import Literal, TypeVar, get_args

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from codesign.errors import InputError, did_you_mean
from codesign.names import alias_index, resolve_name
from codesign.paths import catalog_dir
from codesign.schema import Strict, is_file, load_toml, validate

# ---- unit factors (file unit -> SI) -------------------------------------------------------------
BYTES_PER_GiB = 2**30
BYTES_PER_GB = 1e9
BITS_PER_BYTE = 8
FLOPS_PER_TFLOPS = 1e12
GB_PER_TB = 1e3
GBPS_PER_TBPS_BITS = 1e3 / BITS_PER_BYTE  # 1 Tbit/s = 1000 Gbit/s = 125 GB/s
GiB_PER_Gb = 1 / BITS_PER_BYTE  # binary die density (Gb) -> binary capacity (GiB)
J_PER_PJ = 1e-12
S_PER_NS = 1e-9

#: the physical range of a chip's peak (TFLOPS): its reciprocal, a time per FLOP, stays a normal number
MIN_PEAK_TFLOPS, MAX_PEAK_TFLOPS = 1e-3, 1e6

# Tolerance for checking that appliance tiers add up to the quoted pooled capacity.
CAPACITY_SUM_REL_TOL = 1e-9

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

MemoryKind = Literal["hbm", "3d-dram", "ddr", "gddr"]
STACKED_MEMORY_KINDS: frozenset[str] = frozenset({"hbm", "3d-dram"})

InterconnectKind = Literal["scale-up", "scale-out", "die-to-die", "photonic", "host"]
Medium = Literal["photonic", "electrical"]

KINDS: tuple[str, ...] = ("chips", "memory", "interconnects", "appliances")


# ---- schemas ------------------------------------------------------------------------------------
def _assumed_key(assumption: str) -> str:
    """The top-level key an assumption names: ``"tiers[0].capacity_TB: ..."`` -> ``tiers``."""
    return assumption.partition(":")[0].strip().split(".")[0].split("[")[0]


class StrictData(Strict):
    """Strict types as well as strict keys: a quoted number ("3350") is an error, not coerced."""

    model_config = ConfigDict(strict=True)


class CatalogEntry(StrictData):
    """Fields every catalog file has: identity, provenance and (declared last by each subclass,
    so that validators of ``assumptions`` see every other field) its explicit assumptions."""

    id: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str = Field(min_length=1)
    source: str | list[str] = Field(min_length=1)
    notes: str = ""

    @property
    def sources(self) -> list[str]:
        """``source`` as a list, whether the file gave one string or several."""
        return [self.source] if isinstance(self.source, str) else list(self.source)

    @field_validator("assumptions", check_fields=False)
    @classmethod
    def _assumptions_name_a_key(cls, value: list[str]) -> list[str]:
        """Each assumption reads ``"<key>: <reason>"`` and ``<key>`` is a field of this schema."""
        for entry in value:
            _, sep, reason = entry.partition(":")
            key = _assumed_key(entry)
            if not sep or not reason.strip() or key not in cls.model_fields:
                hint = did_you_mean(key, cls.model_fields) if key else None
                raise ValueError(
                    f"assumption {entry!r} must read '<key>: <reason>' with <key> one of this "
                    f"file's keys" + (f" ({hint})" if hint else "")
                )
        return value


class Chip(CatalogEntry):
    """One accelerator as it ships in its usual system (per GPU for multi-GPU boards)."""

    vendor: str = Field(min_length=1)
    # Dense tensor-core (matrix) peak per precision, no structured sparsity; "fp32" is the
    # non-tensor vector rate unless the file's notes say otherwise.
    peak_dense_TFLOPS: dict[str, float] = Field(min_length=1)
    memory_technology: str = Field(min_length=1)
    memory_capacity_GiB: float = Field(gt=0)
    memory_bandwidth_GBps: float = Field(gt=0)
    tdp_W: float = Field(gt=0)
    die_area_mm2: float = Field(ge=0)  # 0 = not public; then an assumption must say so
    process: str = Field(min_length=1)
    sram_MiB: float = Field(ge=0)
    scale_up_interconnect: str = Field(min_length=1)
    scale_up_bandwidth_GBps_per_direction: float = Field(gt=0)
    scale_up_domain_size: int = Field(ge=1)
    #: a scale-up fabric of PCIe through the CPUs of a two-socket server: the cards each socket
    #: holds, and the bandwidth between cards of different sockets as a fraction of that between
    #: cards of one socket. A TP ring over more cards than one socket holds crosses the sockets'
    #: link, its slowest hop (model.md eq. 3.17b). None: one fabric, no socket boundary
    scale_up_socket_size: int | None = Field(default=None, ge=1)
    cross_socket_bandwidth_fraction: float | None = Field(default=None, gt=0, le=1)
    scale_out_interconnect: str = Field(min_length=1)
    scale_out_bandwidth_GBps_per_direction: float = Field(gt=0)
    host_link_bandwidth_GBps_per_direction: float = Field(gt=0)
    #: exponentials per second, in billions, of the special-function units (MUFU.EX2, the softmax's
    #: exponential in attention kernels): SMs x clock x exponentials per clock per SM (16 on NVIDIA
    #: compute capability 5.0-10.0), at the clock the tensor peaks above are quoted at, so that the
    #: two rates compare at one clock. Attention is priced max(score FLOPs at the tensor peak,
    #: exponentials at this rate) (model.md eq. 2.15m). None: no limit, the attention priced by its
    #: FLOPs alone -- chips whose figure is not written here, and designed hardware (the 3D
    #: family's tiles), whose special-function rate is a design question this field does not answer
    sfu_exp_G_per_s: float | None = Field(default=None, gt=0)
    #: other names of this chip in measurement files (nvidia-smi's, a product name), read as this
    #: id by :func:`resolve_chip` (``codesign.names``)
    aliases: list[str] = Field(default_factory=list)
    #: calibration family (VALIDATION.md §4): chips with the same die, power limit and TP fabric,
    #: fitted as one and sharing one calibration; a chip without its own calibration table takes
    #: its family's (``CalibrationSet.for_chip``). None: a family of its own
    family: str | None = Field(default=None, min_length=1)
    assumptions: list[str] = Field(default_factory=list)

    @field_validator("peak_dense_TFLOPS")
    @classmethod
    def _known_precisions(cls, value: dict[str, float]) -> dict[str, float]:
        for precision, tflops in value.items():
            if precision not in PRECISIONS:
                hint = did_you_mean(precision, PRECISIONS)
                raise ValueError(
                    f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}"
                    + (f" ({hint})" if hint else "")
                )
            if not (MIN_PEAK_TFLOPS <= tflops <= MAX_PEAK_TFLOPS):
                raise ValueError(f"{precision}: peak must be {MIN_PEAK_TFLOPS:g} to {MAX_PEAK_TFLOPS:g} TFLOPS "
                                 "(1 GFLOP/s to 1 EFLOP/s)")
        return value

    @field_validator("assumptions")
    @classmethod
    def _unknown_area_is_assumed(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("die_area_mm2") == 0 and "die_area_mm2" not in map(_assumed_key, value):
            raise ValueError("die_area_mm2 is 0 (not public) but no assumption names it")
        return value

    @model_validator(mode="after")
    def _sockets_whole(self) -> Chip:
        socket, fraction = self.scale_up_socket_size, self.cross_socket_bandwidth_fraction
        if (socket is None) != (fraction is None):
            raise ValueError("scale_up_socket_size and cross_socket_bandwidth_fraction go together: give both or neither")
        if socket is not None and socket >= self.scale_up_domain_size:
            raise ValueError(f"scale_up_socket_size {socket} must be below scale_up_domain_size "
                             f"{self.scale_up_domain_size} (a domain of one socket has no socket boundary: leave both unset)")
        return self

    def peak_dense_FLOPS(self, precision: str) -> float:
        """Dense peak in FLOP/s at ``precision``; InputError if the chip does not list it."""
        if precision not in self.peak_dense_TFLOPS:
            raise InputError(
                f"chip {self.id!r} lists no peak for this precision",
                key="peak_dense_TFLOPS",
                value=precision,
                expected="one of: " + ", ".join(self.peak_dense_TFLOPS),
                suggestion=did_you_mean(precision, self.peak_dense_TFLOPS),
            )
        return self.peak_dense_TFLOPS[precision] * FLOPS_PER_TFLOPS

    @property
    def memory_capacity_B(self) -> float:
        return self.memory_capacity_GiB * BYTES_PER_GiB

    @property
    def memory_bandwidth_Bps(self) -> float:
        return self.memory_bandwidth_GBps * BYTES_PER_GB

    @property
    def scale_up_bandwidth_Bps_per_direction(self) -> float:
        return self.scale_up_bandwidth_GBps_per_direction * BYTES_PER_GB

    @property
    def scale_out_bandwidth_Bps_per_direction(self) -> float:
        return self.scale_out_bandwidth_GBps_per_direction * BYTES_PER_GB

    @property
    def host_link_bandwidth_Bps_per_direction(self) -> float:
        return self.host_link_bandwidth_GBps_per_direction * BYTES_PER_GB


class MemoryTechnology(CatalogEntry):
    """A DRAM technology, described per stack (HBM, 3D DRAM) or per device/DIMM (DDR, GDDR)."""

    kind: MemoryKind
    pin_rate_Gbps: float = Field(gt=0)
    io_width_bits: int = Field(gt=0)  # per stack (hbm, 3d-dram) / per device or DIMM (ddr, gddr)
    capacity_per_die_Gb: float = Field(gt=0)
    max_dies_per_stack: int = Field(ge=1)
    energy_pJ_per_bit: float = Field(gt=0)
    # Stacked kinds only (required for hbm and 3d-dram, may be left out for ddr and gddr).
    tsv_pitch_um: float | None = Field(default=None, gt=0, validate_default=True)
    die_thickness_um: float | None = Field(default=None, gt=0, validate_default=True)
    max_stack_height_um: float | None = Field(default=None, gt=0)
    banks_per_die: int = Field(gt=0)
    access_latency_ns: float = Field(gt=0)
    assumptions: list[str] = Field(default_factory=list)

    @field_validator("tsv_pitch_um", "die_thickness_um")
    @classmethod
    def _stacked_needs_geometry(cls, value: float | None, info: ValidationInfo) -> float | None:
        kind = info.data.get("kind")
        if value is None and kind in STACKED_MEMORY_KINDS:
            raise ValueError(f"required for stacked memory (kind {kind!r})")
        return value

    @property
    def bandwidth_per_stack_GBps(self) -> float:
        """Peak bandwidth of one stack/device: pins x Gb/s / 8 (HBM3: 1024 x 6.4 / 8 = 819.2)."""
        return self.io_width_bits * self.pin_rate_Gbps / BITS_PER_BYTE

    @property
    def bandwidth_per_stack_Bps(self) -> float:
        return self.bandwidth_per_stack_GBps * BYTES_PER_GB

    @property
    def max_capacity_per_stack_GiB(self) -> float:
        """Capacity of the tallest stack at this die density (binary: 8 x 16 Gb = 16 GiB)."""
        return self.capacity_per_die_Gb * self.max_dies_per_stack * GiB_PER_Gb

    @property
    def energy_J_per_bit(self) -> float:
        return self.energy_pJ_per_bit * J_PER_PJ

    @property
    def access_latency_s(self) -> float:
        return self.access_latency_ns * S_PER_NS


class Interconnect(CatalogEntry):
    """A link technology; ``bandwidth_scope`` and ``energy_scope`` say what the figures count."""

    kind: InterconnectKind
    bandwidth_GBps_per_direction: float = Field(gt=0)
    bandwidth_scope: str = Field(min_length=1)  # e.g. "per GPU, all links", "per port"
    latency_ns: float = Field(gt=0)
    energy_pJ_per_bit: float = Field(gt=0)
    energy_scope: str = Field(min_length=1)  # e.g. "one link", "GPU to GPU through one switch"
    bandwidth_density_GBps_per_mm: float | None = Field(default=None, gt=0)
    bandwidth_density_GBps_per_mm2: float | None = Field(default=None, gt=0)
    #: the switches reduce in the network (NVLink SHARP): a TP all-reduce inside one domain of at
    #: least network.IN_SWITCH_MIN_RANKS devices runs in the switch instead of a ring (model.md §3.4)
    in_switch_reduction: bool = False
    assumptions: list[str] = Field(default_factory=list)

    @property
    def bandwidth_Bps_per_direction(self) -> float:
        return self.bandwidth_GBps_per_direction * BYTES_PER_GB

    @property
    def latency_s(self) -> float:
        return self.latency_ns * S_PER_NS

    @property
    def energy_J_per_bit(self) -> float:
        return self.energy_pJ_per_bit * J_PER_PJ


class ApplianceTier(StrictData):
    """One memory tier of a pooled-memory appliance."""

    name: str = Field(min_length=1)
    memory_technology: str = Field(min_length=1)
    capacity_TB: float = Field(gt=0)


class PathEnergy(StrictData):
    """Energy per bit of the pieces of a path (pJ/bit, the unit is on the parent table)."""

    adapter: float = Field(gt=0)  # at each end: NIC/adapter or optical transceiver
    switch: float = Field(gt=0)  # per switch traversed
    intra_tray: float = Field(gt=0)  # device to device inside one tray


class ApplianceEnergy(StrictData):
    """Path energies for the two media the appliance paper compares."""

    photonic: PathEnergy
    electrical: PathEnergy


class Appliance(CatalogEntry):
    """A pooled-memory appliance: memory modules behind an all-to-all switch."""

    modules: int = Field(ge=1)
    port_bandwidth_Tbps: float = Field(gt=0)  # per port, per direction
    ports_per_module: int = Field(ge=1)
    switching_capacity_Tbps: float = Field(gt=0)
    pooled_capacity_TB: float = Field(gt=0)
    tiers: list[ApplianceTier] = Field(min_length=1)
    latency_ns: float = Field(gt=0)
    energy_pJ_per_bit: ApplianceEnergy
    assumptions: list[str] = Field(default_factory=list)

    @field_validator("tiers")
    @classmethod
    def _tiers_add_up(cls, value: list[ApplianceTier], info: ValidationInfo) -> list[ApplianceTier]:
        names = [tier.name for tier in value]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names repeat: {names}")
        pooled = info.data.get("pooled_capacity_TB")
        total = sum(tier.capacity_TB for tier in value)
        if pooled is not None and not math.isclose(total, pooled, rel_tol=CAPACITY_SUM_REL_TOL):
            raise ValueError(
                f"tier capacities add up to {total} TB, not pooled_capacity_TB = {pooled}"
            )
        return value

    @property
    def port_bandwidth_GBps(self) -> float:
        """One port, one direction, in GB/s (7.2 Tbps = 900 GB/s)."""
        return self.port_bandwidth_Tbps * GBPS_PER_TBPS_BITS

    @property
    def switching_capacity_GBps(self) -> float:
        """All-to-all switching capacity in GB/s (115 Tbps = 14,375 GB/s)."""
        return self.switching_capacity_Tbps * GBPS_PER_TBPS_BITS

    @property
    def total_port_bandwidth_GBps(self) -> float:
        """Sum over every port of every module (16 x 900 = 14,400 GB/s)."""
        return self.modules * self.ports_per_module * self.port_bandwidth_GBps

    @property
    def pooled_capacity_B(self) -> float:
        return self.pooled_capacity_TB * GB_PER_TB * BYTES_PER_GB


def path_energy_pJ_per_bit(appliance: Appliance, medium: Medium, switches: int) -> float:
    """Energy per bit of a path through ``switches`` switches: E = 2 E_adapter + switches E_switch.

    where E_adapter is the per-end adapter (electrical) or transceiver (photonic) energy and
    E_switch the energy of one switch traversal, both in pJ/bit (Photonic Fabric paper,
    arXiv 2507.14000: one-switch electrical 65+35+65 = 165, photonic 5+25+5 = 35).
    """
    if isinstance(switches, bool) or not isinstance(switches, int) or switches < 0:
        raise InputError(
            "switch count must be a non-negative integer", key="switches", value=switches
        )
    energy = _path_energy(appliance, medium)
    return 2 * energy.adapter + switches * energy.switch


def intra_tray_energy_pJ_per_bit(appliance: Appliance, medium: Medium) -> float:
    """Energy per bit of a device-to-device transfer inside one tray (electrical 50, photonic 10)."""
    return _path_energy(appliance, medium).intra_tray


def _path_energy(appliance: Appliance, medium: str) -> PathEnergy:
    if medium not in ApplianceEnergy.model_fields:
        raise InputError(
            "unknown medium",
            key="medium",
            value=medium,
            expected="one of: " + ", ".join(ApplianceEnergy.model_fields),
            suggestion=did_you_mean(medium, ApplianceEnergy.model_fields),
        )
    energy: PathEnergy = getattr(appliance.energy_pJ_per_bit, medium)
    return energy


# ---- loading ------------------------------------------------------------------------------------
E = TypeVar("E", bound=CatalogEntry)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InputError(
            "unknown catalog kind",
            value=kind,
            expected="one of: " + ", ".join(KINDS),
            suggestion=did_you_mean(kind, KINDS),
        )


def list_ids(kind: str) -> list[str]:
    """Sorted ids of one catalog kind (``chips``, ``memory``, ``interconnects``, ``appliances``)."""
    _check_kind(kind)
    return sorted(p.stem for p in catalog_dir(kind).glob("*.toml"))


def engine_names() -> list[str]:
    """Sorted names of the serving-engine profiles (``engines/*.toml``; loaded by
    :mod:`codesign.model.engines`)."""
    return sorted(p.stem for p in catalog_dir("engines").glob("*.toml"))


def chip_family(chip_id: str) -> str:
    """A catalog chip's calibration family: its ``family``, else its own id (a family of its own);
    an id that is not a catalog chip is its own family too."""
    if not is_file(catalog_dir("chips") / f"{chip_id}.toml"):  # one stat, not a directory listing
        return chip_id
    return load_chip(chip_id).family or chip_id


def _is_path(id_or_path: str | Path) -> bool:
    text = str(id_or_path)
    return isinstance(id_or_path, Path) or text.endswith(".toml") or "/" in text or "\\" in text


@cache
def _load_file(model: type[E], path: Path) -> E:
    return validate(model, load_toml(path), file=path)


def _load(model: type[E], kind: str, id_or_path: str | Path) -> E:
    if _is_path(id_or_path):
        # realpath, not Path.resolve: a symlink loop is refused by the reader, not a RuntimeError here
        return _load_file(model, Path(os.path.realpath(id_or_path)))
    path = catalog_dir(kind) / f"{id_or_path}.toml"
    if not is_file(path):  # (one stat: listing the directory on every load cost a sweep point 7 ms)
        ids = list_ids(kind)
        raise InputError(
            f"unknown {kind} id",
            value=id_or_path,
            expected="one of: " + ", ".join(ids),
            suggestion=did_you_mean(str(id_or_path), ids),
        )
    path = path.resolve()
    entry = _load_file(model, path)
    if entry.id != id_or_path:
        raise InputError(
            "id does not match the file name",
            file=path,
            key="id",
            value=entry.id,
            expected=repr(id_or_path),
        )
    return entry


def load_chip(id_or_path: str | Path) -> Chip:
    """A chip by catalog id (``h100-sxm``) or path to a chip TOML file."""
    return _load(Chip, "chips", id_or_path)


@cache
def _chip_names() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    entries = {cid: load_chip(cid).aliases for cid in list_ids("chips")}
    return entries, alias_index(entries, release_tags=False)


def resolve_chip(name: str) -> str | None:
    """The chip id ``name`` stands for: the id itself or one of a chip's ``aliases``, compared
    after ``codesign.names.normalized_name`` (no release tags: GPU names end in model numbers);
    None if it names no chip or more than one."""
    entries, index = _chip_names()
    return resolve_name(name, entries, release_tags=False, index=index)


def load_memory(id_or_path: str | Path) -> MemoryTechnology:
    """A memory technology by catalog id (``hbm3``) or path."""
    return _load(MemoryTechnology, "memory", id_or_path)


def load_interconnect(id_or_path: str | Path) -> Interconnect:
    """An interconnect by catalog id (``nvlink4``) or path."""
    return _load(Interconnect, "interconnects", id_or_path)


def load_appliance(id_or_path: str | Path) -> Appliance:
    """A pooled-memory appliance by catalog id (``photonic-fabric-appliance``) or path."""
    return _load(Appliance, "appliances", id_or_path)


def _require_id(kind: str, ids: list[str], value: str, *, file: str, key: str) -> None:
    if value not in ids:
        raise InputError(
            f"no {kind} entry with this id",
            file=file,
            key=key,
            value=value,
            expected="one of: " + ", ".join(ids),
            suggestion=did_you_mean(value, ids),
        )


def check_references() -> None:
    """Load every catalog file and check the ids they name; the first problem is an InputError.

    Checks: chip ``memory_technology`` is a memory id; ``scale_up_interconnect`` and
    ``scale_out_interconnect`` are interconnect ids of a fitting kind (scale-up or host for
    scale-up, host whenever the scale-up domain is a single device; scale-out for scale-out);
    every appliance tier names a memory id.
    """
    memory_ids = list_ids("memory")
    for memory_id in memory_ids:
        load_memory(memory_id)
    links = {link_id: load_interconnect(link_id) for link_id in list_ids("interconnects")}
    link_ids = sorted(links)

    for chip_id in list_ids("chips"):
        chip = load_chip(chip_id)
        file = str(catalog_dir("chips") / f"{chip_id}.toml")
        _require_id(
            "memory", memory_ids, chip.memory_technology, file=file, key="memory_technology"
        )
        _require_id(
            "interconnects",
            link_ids,
            chip.scale_up_interconnect,
            file=file,
            key="scale_up_interconnect",
        )
        _require_id(
            "interconnects",
            link_ids,
            chip.scale_out_interconnect,
            file=file,
            key="scale_out_interconnect",
        )
        up_kind = links[chip.scale_up_interconnect].kind
        allowed_up = ("host",) if chip.scale_up_domain_size == 1 else ("scale-up", "host")
        if up_kind not in allowed_up:
            raise InputError(
                f"scale-up interconnect has kind {up_kind!r}",
                file=file,
                key="scale_up_interconnect",
                value=chip.scale_up_interconnect,
                expected="an interconnect of kind "
                + " or ".join(allowed_up)
                + (" (scale_up_domain_size is 1)" if chip.scale_up_domain_size == 1 else ""),
            )
        out_kind = links[chip.scale_out_interconnect].kind
        if out_kind != "scale-out":
            raise InputError(
                f"scale-out interconnect has kind {out_kind!r}",
                file=file,
                key="scale_out_interconnect",
                value=chip.scale_out_interconnect,
                expected="an interconnect of kind scale-out",
            )

    for appliance_id in list_ids("appliances"):
        appliance = load_appliance(appliance_id)
        file = str(catalog_dir("appliances") / f"{appliance_id}.toml")
        for i, tier in enumerate(appliance.tiers):
            _require_id(
                "memory",
                memory_ids,
                tier.memory_technology,
                file=file,
                key=f"tiers[{i}].memory_technology",
            )
