"""The DLRM embedding model: where each embedding table of a recommendation model lives and what a
forward embedding stage costs (formulations/dlrm.md).

A DLRM instance (:mod:`codesign.kinds.dlrm.spec`) serves ``T`` embedding tables (``R_t`` rows of
``h`` elements of ``b`` bytes: row bytes r = h·b) to ``D`` identical GPUs that run the dense part
data-parallel, ``B/D`` samples each, ``B`` samples per iteration. Every sample looks up ``L_t``
rows of table t (its pooling factor) and sums them into one pooled vector per table.

A design places every table, split into ``k_t`` column shards (k_t from the instance's list,
dividing h; shard j holds h/k_t of every row), each shard at one *location*:

* ``hbm:d``  the HBM of GPU d (model-parallel embeddings, TorchRec table-wise/column-wise);
* ``host:d`` the host memory of GPU d, read over its PCIe link (GPU d owns the shard);
* ``pool:m:s`` tier s (hbm/ddr) of module m of a pooled-memory appliance;

or, where the instance allows spreading, the whole table at one *spread option*: ``hbm:*`` /
``host:*`` row-wise over every GPU's HBM / host memory (TorchRec row-wise), ``pool:*:s`` striped
over tier s of every module (lookups uniform over rows, as MLPerf's synthetic multi-hot draws them).

Per iteration, for one shard of table t with k shards (eq. numbers of dlrm.md):

    stored   S = R_t·r/k                      gathered G = B·L_t·r/k                (D1)
    indices  I = B·L_t·ι                      (every shard needs every index, ι bytes each)
    output   O = B·r/k pooled; a pool shard of an appliance that does not pool sends the rows
             unpooled, O = B·L_t·r/k                                                     (D2)

Summed over the shards at each location (S_ℓ, G_ℓ, I_ℓ, O_ℓ), and for GPU d over its owned
locations hbm:d and host:d (I_d, O_d; totals I_gpu, O_gpu over all GPUs, I_app, O_app over the
appliance), the iteration runs three bulk-synchronous phases:

    in     = max( max_d max((D−1)/D·I_d, (I_gpu − I_d)/D) / BW_nv,                   (D3)
                  (I_app/D) / BW_link,  max_m I_m / BW_port,  I_app / BW_switch )
    lookup = max( max_d G_hbm:d / BW_hbm,  max_d G_host:d / BW_pcie,
                  max_{m,s} G_m,s / BW_mod,s )                                        (D4)
    out    = the same as ``in`` with O for I                                          (D5)
    T      = in + lookup + out;   samples/s = B / T                                    (D6)

(an all-to-all on NVLink: GPU d receives the indices of the other GPUs' B/D samples for its
shards and sends its own samples' indices for the others'; a full-duplex link runs the larger
direction). Under the paper's assumption (``assumed_device_bandwidth_GBps``) a GPU reaches the
appliance at that bandwidth and module-port and switch limits are not applied; the modules'
memory bandwidth (D4) is applied in both.

Energy per iteration (D7) = Σ_ℓ G_ℓ·e_ℓ (memory; host: DDR5 + PCIe) + (D−1)/D·(I_gpu + O_gpu)·e_nv
+ (I_app + O_app)·e_path (adapter + switch + adapter); per sample: / B. Capacity: S_ℓ <= C_ℓ (HBM:
usable memory minus the instance's reserve for the dense part).

This module is the single source of truth; the MIP of :mod:`codesign.kinds.dlrm.formulation`
compiles it and every solve is re-checked here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, PositiveInt

from codesign import catalog
from codesign.errors import InputError, did_you_mean
from codesign.model import network
from codesign.model.hardware import achieved_memory_Bps, usable_capacity_B
from codesign.model.units import BYTES_PER_ELEMENT, PICO, TB, GBps, GiB, Precision
from codesign.paths import catalog_dir
from codesign.schema import Strict, load_toml, validate

BITS_PER_BYTE = 8
#: relative tolerance of capacity checks (float round-off only)
FEASIBILITY_RTOL = 1e-9
#: the host link of a GPU's host tier and the host memory behind it (energy per byte)
HOST_LINK = "pcie-gen5-x16"
HOST_MEMORY = "ddr5"
#: quantities summed per location: stored, gathered, index and output bytes
STORED, GATHERED, INDEX, OUTPUT = range(4)


# --- the workload catalog (instances/catalog/dlrm/) -------------------------------------------


class TableEntry(Strict):
    name: str = Field(min_length=1)
    rows: PositiveInt
    pooling_factor: PositiveInt


class DlrmWorkloadFile(Strict):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    source: list[str] = Field(min_length=1)
    embedding_dim: PositiveInt
    precision: Precision
    reference_batch: PositiveInt | None = None
    assumptions: list[str] = Field(default_factory=list)
    tables: list[TableEntry] = Field(min_length=1)


def list_dlrm_workloads() -> list[str]:
    return sorted(p.stem for p in catalog_dir("dlrm").glob("*.toml"))


def load_dlrm_workload(id_or_path: str) -> DlrmWorkloadFile:
    """A DLRM workload of the catalog by id (or a path to its TOML file)."""
    p = Path(id_or_path)
    path = p if p.suffix == ".toml" and p.exists() else catalog_dir("dlrm") / f"{id_or_path}.toml"
    if not path.exists():
        raise InputError(f"unknown DLRM workload {id_or_path!r}", expected=", ".join(list_dlrm_workloads()),
                         suggestion=did_you_mean(str(id_or_path), list_dlrm_workloads()))
    w = validate(DlrmWorkloadFile, load_toml(path), file=path)
    names = [t.name for t in w.tables]
    if len(set(names)) != len(names):
        raise InputError("table names repeat", file=path, key="tables", value=names)
    return w


# --- problem ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """A place for a table shard: a GPU's HBM or host memory, or an appliance module's tier."""

    label: str
    kind: str  # hbm | host | pool
    owner: int  # the GPU of an hbm/host location; -1 for pool
    module: int  # the module of a pool location; -1 otherwise
    capacity_B: float
    s_per_B: float  # gather time per byte read here
    J_per_B: float  # energy per byte read here (host: DDR5 + PCIe)


@dataclass
class DlrmProblem:
    """Everything the model needs, in SI units, derived once from the instance."""

    name: str
    table_names: list[str]
    rows: np.ndarray  # (T,)
    pooling: np.ndarray  # (T,)
    row_B: float  # h·b
    dim: int
    index_B: float  # ι
    batch: int
    gpus: int
    shards: tuple[int, ...]
    locations: list[Location]
    nv_s_per_B: float  # NVLink, per direction, per GPU
    link_s_per_B: float  # a GPU's link(s) into the appliance (0 without one)
    port_s_per_B: float  # one module's port (0: not applied)
    switch_s_per_B: float  # the appliance's switch (0: not applied)
    paper_mode: bool
    appliance_pools: bool
    J_per_B_nv: float
    J_per_B_path: float
    objective: str
    modules: int = 0
    #: spread options: (label, member locations), a table row-wise over all GPUs' HBM or hosts, or
    #: striped over every module's tier
    spreads: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        """Every location's label, then every spread option's (index = len(locations) + j)."""
        return [loc.label for loc in self.locations] + [lab for lab, _ in self.spreads]

    def spread(self, t: int, j: int) -> np.ndarray:
        """(locations, 4): S, G, I, O of table t spread by option j over its n members (D1', D2'): each
        member holds R/n rows and serves 1/n of the lookups and indices; a GPU or host member sends
        the partial sums of all B samples (B·r, reduce-scattered), a module B·L·r/n unpooled (B·r
        partial sums if the appliance pools)."""
        members = self.spreads[j][1]
        n = len(members)
        B, L, r = float(self.batch), float(self.pooling[t]), self.row_B
        out = np.zeros((len(self.locations), 4))
        for i in members:
            raw = self.locations[i].kind == "pool" and not self.appliance_pools
            out[i] = (float(self.rows[t]) * r / n, B * L * r / n, B * L * self.index_B / n, B * L * r / n if raw else B * r)
        return out

    @property
    def tables(self) -> int:
        return len(self.rows)

    def index(self, kind: str) -> np.ndarray:
        return np.array([i for i, loc in enumerate(self.locations) if loc.kind == kind], dtype=np.int64)

    def shard(self, t: int, k: int) -> np.ndarray:
        """(locations, 4): S, G, I, O of one shard of table t split k ways at each location (D1, D2)."""
        B, L, r = float(self.batch), float(self.pooling[t]), self.row_B
        out = np.empty((len(self.locations), 4))
        out[:, STORED] = float(self.rows[t]) * r / k
        out[:, GATHERED] = B * L * r / k
        out[:, INDEX] = B * L * self.index_B
        pooled = np.array([loc.kind != "pool" or self.appliance_pools for loc in self.locations])
        out[:, OUTPUT] = np.where(pooled, B * r / k, B * L * r / k)
        return out


def build_problem(inst: Any) -> DlrmProblem:
    """Derive the numbers of a DLRM instance (:class:`codesign.kinds.dlrm.spec.DlrmInstance`)."""
    s = inst.spec
    w = load_dlrm_workload(s.workload.workload)
    tables = [t for t in w.tables if s.workload.tables is None or t.name in s.workload.tables]
    prec = s.workload.precision or w.precision
    row_B = w.embedding_dim * BYTES_PER_ELEMENT[prec]
    dv = s.devices
    chip = catalog.load_chip(dv.chip)
    cal = inst.calibration.for_chip(dv.chip)
    mem = catalog.load_memory(chip.memory_technology)
    nv = catalog.load_interconnect(chip.scale_up_interconnect)
    host_link = catalog.load_interconnect(HOST_LINK)
    host_mem = catalog.load_memory(HOST_MEMORY)
    D = dv.count
    hbm_cap = float(usable_capacity_B((dv.memory_capacity_GiB or chip.memory_capacity_GiB) * GiB, cal)) - dv.reserved_GiB * GiB
    hbm_s = 1.0 / float(achieved_memory_Bps((dv.memory_bandwidth_GBps or chip.memory_bandwidth_GBps) * GBps, cal))
    locs = [Location(f"hbm:{d}", "hbm", d, -1, hbm_cap, hbm_s, mem.energy_pJ_per_bit * BITS_PER_BYTE * PICO) for d in range(D)]
    if dv.host_capacity_GiB > 0:
        host_s = 1.0 / (chip.host_link_bandwidth_GBps_per_direction * GBps * cal.network_efficiency)
        host_J = (host_link.energy_pJ_per_bit + host_mem.energy_pJ_per_bit) * BITS_PER_BYTE * PICO
        locs += [Location(f"host:{d}", "host", d, -1, dv.host_capacity_GiB * GiB, host_s, host_J) for d in range(D)]
    nv_s = 1.0 / (chip.scale_up_bandwidth_GBps_per_direction * GBps * cal.network_efficiency) if D > 1 else 0.0
    out = DlrmProblem(
        name=s.name, table_names=[t.name for t in tables], rows=np.array([t.rows for t in tables], dtype=float),
        pooling=np.array([t.pooling_factor for t in tables], dtype=float), row_B=row_B, dim=w.embedding_dim,
        index_B=float(s.workload.index_bytes), batch=s.workload.batch, gpus=D, shards=tuple(s.sharding.column_shards),
        locations=locs, nv_s_per_B=nv_s, link_s_per_B=0.0, port_s_per_B=0.0, switch_s_per_B=0.0, paper_mode=False,
        appliance_pools=False, J_per_B_nv=nv.energy_pJ_per_bit * BITS_PER_BYTE * PICO, J_per_B_path=0.0,
        objective=s.objective.metric,
    )
    ap = s.appliance
    if ap is not None:
        app = catalog.load_appliance(ap.id)
        M = ap.modules or app.modules
        e = getattr(app.energy_pJ_per_bit, ap.medium)
        g = network.appliance_system(1, 1, adapter_pJ_per_bit=e.adapter, switch_pJ_per_bit=e.switch)
        out.J_per_B_path = network.path_energy_pJ_per_bit(g, "dev0", "mod0") * BITS_PER_BYTE * PICO
        out.modules = M
        out.appliance_pools = ap.pools
        port_Bps = app.port_bandwidth_GBps * app.ports_per_module * GBps
        if ap.assumed_device_bandwidth_GBps is not None:
            out.paper_mode = True
            out.link_s_per_B = 1.0 / (ap.assumed_device_bandwidth_GBps * GBps)
        else:
            out.link_s_per_B = 1.0 / (dv.pool_ports * port_Bps)
            out.port_s_per_B = 1.0 / port_Bps
            out.switch_s_per_B = 1.0 / (app.switching_capacity_GBps * GBps)
        by_name = {t.name: t for t in app.tiers}
        for m in range(M):
            for tier in ap.tiers:
                t = by_name[tier]
                tech = catalog.load_memory(t.memory_technology)
                bw = ap.module_tier_GBps[tier] * GBps * cal.memory_efficiency
                locs.append(Location(f"pool:{m}:{tier}", "pool", -1, m, t.capacity_TB * TB / app.modules, 1.0 / bw,
                                     tech.energy_pJ_per_bit * BITS_PER_BYTE * PICO))
    if s.sharding.spread:
        for kind in ("hbm", "host"):
            members = tuple(i for i, loc in enumerate(locs) if loc.kind == kind)
            if members and D > 1:
                out.spreads.append((f"{kind}:*", members))
        for tier in ap.tiers if ap is not None else []:
            members = tuple(i for i, loc in enumerate(locs) if loc.label.endswith(f":{tier}") and loc.kind == "pool")
            out.spreads.append((f"pool:*:{tier}", members))
    return out


# --- designs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DlrmDesign:
    """The locations of each table's shards (one per shard; sorted location indices)."""

    shards: tuple[tuple[int, ...], ...]
    labels: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"tables": {n: [self.labels[i] for i in s] for n, s in zip(self.names, self.shards, strict=True)}}


def make_design(pb: DlrmProblem, shards) -> DlrmDesign:
    return DlrmDesign(tuple(tuple(sorted(int(i) for i in s)) for s in shards), tuple(pb.labels), tuple(pb.table_names))


def parse_design(pb: DlrmProblem, data: dict[str, Any], source: str = "design") -> DlrmDesign:
    """A design from ``{"tables": {name: [location, ...]}}`` (every table; InputError otherwise)."""
    tables = data.get("tables") if isinstance(data, dict) else None
    if not isinstance(tables, dict):
        raise InputError("a DLRM design is a table 'tables' of table name -> list of locations", file=source,
                         key="tables", value=type(tables).__name__)
    labels = {lab: i for i, lab in enumerate(pb.labels)}
    Lc = len(pb.locations)
    unknown = [n for n in tables if n not in pb.table_names]
    if unknown:
        raise InputError("unknown table", file=source, key=f"tables.{unknown[0]}", value=unknown[0],
                         expected=", ".join(pb.table_names), suggestion=did_you_mean(str(unknown[0]), pb.table_names))
    shards = []
    for n in pb.table_names:
        if n not in tables:
            raise InputError("every table needs its locations", file=source, key=f"tables.{n}", expected="a list of locations")
        v = tables[n]
        spread = isinstance(v, list) and len(v) == 1 and labels.get(v[0], -1) >= Lc
        if not isinstance(v, list) or not (len(v) in pb.shards or spread):
            raise InputError("a list of one location per column shard", file=source, key=f"tables.{n}", value=v,
                             expected=f"a list of {' | '.join(map(str, pb.shards))} locations"
                                      + (f", or one of {', '.join(lab for lab, _ in pb.spreads)}" if pb.spreads else ""))
        bad = [x for x in v if not isinstance(x, str) or x not in labels or (labels[x] >= Lc and len(v) > 1)]
        if bad:
            raise InputError("unknown location", file=source, key=f"tables.{n}", value=bad[0],
                             expected="hbm:<gpu>, host:<gpu> or pool:<module>:<tier> of this instance",
                             suggestion=did_you_mean(str(bad[0]), list(labels)))
        shards.append([labels[x] for x in v])
    return make_design(pb, shards)


def space_size(pb: DlrmProblem) -> int:
    """Π_t Σ_k C(locations + k − 1, k): the multisets of k locations for each table."""
    n = len(pb.locations)
    return math.prod(sum(math.comb(n + k - 1, k) for k in pb.shards) + len(pb.spreads) for _ in range(pb.tables))


def aggregate(pb: DlrmProblem, design: DlrmDesign) -> np.ndarray:
    """(locations, 4): S, G, I, O summed over the shards at each location."""
    A = np.zeros((len(pb.locations), 4))
    Lc = len(pb.locations)
    for t, s in enumerate(design.shards):
        if s and s[0] >= Lc:
            A += pb.spread(t, s[0] - Lc)
            continue
        per = pb.shard(t, len(s))
        for i in s:
            A[i] += per[i]
    return A


# --- evaluation -------------------------------------------------------------------------------


@dataclass
class Costs:
    """The model's figures of N designs (arrays of N) from their per-location sums (N, locations, 4)."""

    in_s: np.ndarray
    lookup_s: np.ndarray
    out_s: np.ndarray
    iteration_s: np.ndarray
    energy_J: dict[str, np.ndarray]
    capacity_ok: np.ndarray
    parts: dict[str, np.ndarray]

    @property
    def total_energy_J(self) -> np.ndarray:
        return sum(self.energy_J.values())


def _exchange(pb: DlrmProblem, X: np.ndarray, own: np.ndarray, pool: np.ndarray, modules: np.ndarray, what: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The slowest stream of the index (X = I) or output (X = O) exchange (D3, D5)."""
    D = pb.gpus
    per_gpu = X[:, own].sum(2) if own.size else np.zeros((X.shape[0], D))  # (N, D)
    tot = per_gpu.sum(1, keepdims=True)
    nv = np.maximum((D - 1) / D * per_gpu, (tot - per_gpu) / D).max(1) * pb.nv_s_per_B
    app = X[:, pool].sum(1) if pool.size else np.zeros(X.shape[0])
    link = app / D * pb.link_s_per_B
    port = np.zeros(X.shape[0])
    if pool.size and pb.port_s_per_B:
        per_mod = np.zeros((X.shape[0], pb.modules))
        np.add.at(per_mod.T, modules, X[:, pool].T)
        port = per_mod.max(1) * pb.port_s_per_B
    switch = app * pb.switch_s_per_B
    parts = {f"{what}.nvlink_s": nv, f"{what}.appliance_link_s": link, f"{what}.module_port_s": port, f"{what}.switch_s": switch}
    return np.maximum(np.maximum(nv, link), np.maximum(port, switch)), parts


def costs(pb: DlrmProblem, A: np.ndarray) -> Costs:
    """Iteration time, energy by component and capacity of designs given as per-location sums."""
    A = np.asarray(A, dtype=float).reshape(-1, len(pb.locations), 4)
    hbm, host, pool = pb.index("hbm"), pb.index("host"), pb.index("pool")
    own = np.stack([hbm, host], 1) if host.size else hbm[:, None]  # (D, 1 or 2): the GPU's own locations
    modules = np.array([pb.locations[i].module for i in pool], dtype=np.int64)
    t_in, p_in = _exchange(pb, A[:, :, INDEX], own, pool, modules, "in")
    t_out, p_out = _exchange(pb, A[:, :, OUTPUT], own, pool, modules, "out")
    gather = A[:, :, GATHERED] * np.array([loc.s_per_B for loc in pb.locations])
    lk = {k: (gather[:, idx].max(1) if idx.size else np.zeros(A.shape[0])) for k, idx in (("hbm", hbm), ("host", host), ("pool", pool))}
    t_lookup = np.maximum(np.maximum(lk["hbm"], lk["host"]), lk["pool"])
    D = pb.gpus
    gpu_own = A[:, own.ravel(), :]
    energy = {
        "memory_J": (A[:, :, GATHERED] * np.array([loc.J_per_B for loc in pb.locations])).sum(1),
        "nvlink_J": (D - 1) / D * (gpu_own[:, :, INDEX].sum(1) + gpu_own[:, :, OUTPUT].sum(1)) * pb.J_per_B_nv,
        "appliance_path_J": (A[:, pool, INDEX].sum(1) + A[:, pool, OUTPUT].sum(1)) * pb.J_per_B_path if pool.size else np.zeros(A.shape[0]),
    }
    cap = np.array([loc.capacity_B for loc in pb.locations])
    ok = np.all(A[:, :, STORED] <= cap * (1 + FEASIBILITY_RTOL), axis=1)
    parts = {**p_in, "lookup.hbm_s": lk["hbm"], "lookup.host_s": lk["host"], "lookup.pool_s": lk["pool"], **p_out}
    return Costs(t_in, t_lookup, t_out, t_in + t_lookup + t_out, energy, ok, parts)


@dataclass
class DlrmEvaluation:
    feasible: bool
    violations: list[str]
    iteration_s: float
    samples_per_s: float
    energy_per_sample_J: float
    objective: float
    phases_s: dict[str, float]
    parts_s: dict[str, float]
    energy_J: dict[str, float]
    stored_B: list[float]
    gathered_B: list[float]
    index_B: list[float]
    output_B: list[float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible, "violations": list(self.violations), "objective": self.objective,
            "iteration_s": self.iteration_s, "samples_per_s": self.samples_per_s, "energy_per_sample_J": self.energy_per_sample_J,
            **{f"phase.{k}": v for k, v in self.phases_s.items()}, **self.parts_s,
            **{f"energy_per_iteration.{k}": v for k, v in self.energy_J.items()},
            "energy_per_iteration_J": sum(self.energy_J.values()),
            "stored_B_per_location": list(self.stored_B), "gathered_B_per_iteration": sum(self.gathered_B),
            "index_B_per_iteration": sum(self.index_B), "output_B_per_iteration": sum(self.output_B),
        }


def evaluate(pb: DlrmProblem, design: DlrmDesign) -> DlrmEvaluation:
    """The model's verdict on one design."""
    A = aggregate(pb, design)
    c = costs(pb, A)
    violations = [f"capacity of {loc.label}: {A[i, STORED] / GiB:.3f} GiB stored > {loc.capacity_B / GiB:.3f} GiB"
                  for i, loc in enumerate(pb.locations) if A[i, STORED] > loc.capacity_B * (1 + FEASIBILITY_RTOL)]
    T = float(c.iteration_s[0])
    e = {k: float(v[0]) for k, v in c.energy_J.items()}
    eps = sum(e.values()) / pb.batch
    sps = pb.batch / T if T > 0 else math.inf
    return DlrmEvaluation(
        feasible=not violations, violations=violations, iteration_s=T, samples_per_s=sps, energy_per_sample_J=eps,
        objective=sps if pb.objective == "samples_per_s" else eps,
        phases_s={"in_s": float(c.in_s[0]), "lookup_s": float(c.lookup_s[0]), "out_s": float(c.out_s[0])},
        parts_s={k: float(v[0]) for k, v in c.parts.items()}, energy_J=e,
        stored_B=A[:, STORED].tolist(), gathered_B=A[:, GATHERED].tolist(), index_B=A[:, INDEX].tolist(), output_B=A[:, OUTPUT].tolist(),
    )
