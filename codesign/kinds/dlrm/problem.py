"""The DLRM kind: where each embedding table of a recommendation model lives — GPU HBM shards,
host memory or a pooled-memory appliance's modules — and in how many column shards
(``kind = "dlrm"``; schema :mod:`codesign.kinds.dlrm.spec`, model :mod:`codesign.model.dlrm`, MIP
:mod:`codesign.kinds.dlrm.formulation`, formulations/dlrm.md).
"""

from __future__ import annotations

import math
import time
from functools import cached_property
from itertools import combinations_with_replacement
from typing import Any, ClassVar

import numpy as np

from codesign import catalog
from codesign.errors import InputError
from codesign.kinds.base import (
    Assessment,
    BruteForce,
    DecisionInfo,
    Formulation,
    InstanceProblem,
    Lint,
    Problem,
    Sense,
    register,
)
from codesign.kinds.dlrm import render
from codesign.kinds.dlrm.formulation import build_dlrm
from codesign.kinds.dlrm.spec import OBJECTIVES, dlrm_from_data, load_dlrm
from codesign.kinds.fixed import BACKEND_OPTIONS
from codesign.kinds.mapping.render import host_term_lints
from codesign.model.dlrm import (
    DlrmProblem,
    build_problem,
    costs,
    evaluate,
    make_design,
    parse_design,
    space_size,
)

#: brute force refuses spaces larger than this
MAX_POINTS = 5e6
CHUNK = 20_000


@register
class Dlrm(InstanceProblem):
    """A DLRM instance: wraps :data:`codesign.kinds.dlrm.spec.DlrmInstance`."""

    kind: ClassVar[str] = "dlrm"
    objectives: ClassVar[tuple[str, ...]] = OBJECTIVES
    #: CP-SAT: both solvers prove the named instances, CP-SAT sooner (BENCHMARKS.md §2, on 2 cores:
    #: pf-dlrm-consistent 1.4 s against HiGHS's 7.7 s, pf-dlrm-paper 1.4 s against 2.4 s)
    default_solver: ClassVar[str] = "cpsat"

    load_instance = staticmethod(load_dlrm)
    instance_from_data = staticmethod(dlrm_from_data)

    @cached_property
    def model(self) -> DlrmProblem:
        return build_problem(self.inst)

    # --- the question ---------------------------------------------------------------------
    @property
    def metric(self) -> str:
        return self.model.objective

    @property
    def sense(self) -> Sense:
        return "max" if self.metric == "samples_per_s" else "min"

    def with_objective(self, metric: str | None) -> Problem:
        if metric is None or metric == self.metric:
            return self
        if metric not in OBJECTIVES:
            raise InputError("unknown objective for a DLRM instance", key="--objective", value=metric, expected=" | ".join(OBJECTIVES))
        data = {**self.inst.raw, "objective": {"metric": metric}}
        return type(self).from_data(data, source=str(self.source or "<memory>"), calibration=self.calibration)

    def decisions(self) -> list[DecisionInfo]:
        pb = self.model
        text = f"for each of {pb.tables} tables: " + " or ".join(
            ([f"{' | '.join(map(str, pb.shards))} column shards, each at one of {len(pb.locations)} locations (GPU HBM, host memory, "
              "appliance modules)"] if pb.shards else [])
            + ([f"spread whole over {' | '.join(lab for lab, _ in pb.spreads)}"] if pb.spreads else []))
        return [DecisionInfo("tables", text, "placement")]

    def space_size(self) -> int:
        return space_size(self.model)

    def baseline(self) -> dict[str, Any]:
        given = self.inst.spec.baseline
        if given is not None:
            return dict(given)
        pb = self.model
        return make_design(pb, [[t % pb.gpus] for t in range(pb.tables)]).as_dict()

    @property
    def baseline_description(self) -> str:
        return self.inst.spec.baseline_description or ("the instance's [baseline]" if self.inst.spec.baseline is not None
                                                       else "table t whole in the HBM of GPU t mod D (round robin)")

    # --- the model ------------------------------------------------------------------------
    def parse_design(self, data: dict[str, Any], source: str = "design") -> dict[str, Any]:
        """The tables given, the baseline's locations for the others."""
        if not isinstance(data, dict):
            raise InputError("a dlrm design is a table", file=source, value=type(data).__name__)
        base = self.baseline().get("tables", {})
        given = data.get("tables", {})
        if not isinstance(given, dict):
            raise InputError("a DLRM design's 'tables' maps table name -> list of locations", file=source, key="tables", value=given)
        extra = [k for k in data if k != "tables"]
        if extra:
            raise InputError("unknown decision", file=source, key=extra[0], expected="tables")
        return parse_design(self.model, {"tables": {**base, **given}}, source).as_dict()

    def assess(self, design: dict[str, Any]) -> Assessment:
        pb = self.model
        ev = evaluate(pb, parse_design(pb, design))
        internal = ev.iteration_s if pb.objective == "samples_per_s" else ev.energy_per_sample_J
        metrics = {k: v for k, v in ev.as_dict().items() if k not in ("feasible", "violations", "objective")}
        return Assessment(design, ev.feasible, ev.objective, internal, metrics, tuple(ev.violations), (), ev)

    def to_user(self, internal: float) -> float:
        if self.metric == "samples_per_s":
            return self.model.batch / internal if internal > 0 else math.inf
        return internal

    @property
    def internal_description(self) -> str:
        if self.metric == "samples_per_s":
            return f"the iteration time in s: samples/s = {self.model.batch} / it"
        return "energy per sample in J"

    # --- the MIP ----------------------------------------------------------------------------
    def formulate(self, solver: str, *, presolve: bool = True) -> Formulation:
        """(No presolve removes designs from this kind's MIP: ``presolve`` changes nothing.)"""
        dm = build_dlrm(self.model)
        return Formulation(mip=dm.mip, objective_unit=dm.objective_unit, decode=lambda x: dm.decode(x).as_dict(),
                           design_vars=dm.design_vars, stats=dict(dm.stats), backend_options=BACKEND_OPTIONS)

    def brute_force(self, *, deadline: float | None = None) -> BruteForce:
        """Every (shard count, multiset of locations) of every table, evaluated with the model."""
        pb = self.model
        Lc = len(pb.locations)
        options: list[list[tuple[int, ...]]] = []
        sums: list[np.ndarray] = []
        for t in range(pb.tables):
            opts, mats = [], []
            for k in pb.shards:
                per = pb.shard(t, k)
                for combo in combinations_with_replacement(range(Lc), k):
                    m = np.zeros((Lc, 4))
                    for loc in combo:
                        m[loc] += per[loc]
                    opts.append(combo)
                    mats.append(m)
            for j in range(len(pb.spreads)):
                opts.append((Lc + j,))
                mats.append(pb.spread(t, j))
            options.append(opts)
            sums.append(np.array(mats))
        radix = [len(o) for o in options]
        total = math.prod(radix)
        if total > MAX_POINTS:
            raise ValueError(f"{total:.3g} points: too many for brute force (limit {MAX_POINTS:.0e})")
        sense = 1.0 if self.sense == "max" else -1.0
        best_val, best_code, feasible, complete = -math.inf, None, 0, True
        for lo in range(0, total, CHUNK):
            if deadline is not None and lo and time.perf_counter() > deadline:
                complete = False
                break
            codes = np.arange(lo, min(lo + CHUNK, total))
            A = np.zeros((len(codes), Lc, 4))
            rest = codes.copy()
            digits = []
            for t in range(pb.tables):
                d = rest % radix[t]
                rest //= radix[t]
                digits.append(d)
                A += sums[t][d]
            c = costs(pb, A)
            ok = c.capacity_ok
            feasible += int(ok.sum())
            if not ok.any():
                continue
            value = pb.batch / c.iteration_s if sense > 0 else c.total_energy_J / pb.batch
            score = np.where(ok, sense * value, -np.inf)
            i = int(np.argmax(score))
            if score[i] > best_val:
                best_val, best_code = float(score[i]), [int(d[i]) for d in digits]
        best = None
        if best_code is not None:
            design = make_design(pb, [options[t][j] for t, j in enumerate(best_code)])
            best = self.assess(design.as_dict())
        return BruteForce(best, total, feasible, complete)

    # --- views --------------------------------------------------------------------------------
    def lints(self) -> list[Lint]:
        s = self.inst.spec
        out = host_term_lints([s.devices.chip], self.calibration)
        ap = s.appliance
        if ap is None or ap.assumed_device_bandwidth_GBps is None:
            return out
        app = catalog.load_appliance(ap.id)
        bw, ports, port = ap.assumed_device_bandwidth_GBps, s.devices.pool_ports, app.port_bandwidth_GBps * app.ports_per_module
        if bw > ports * port:
            out.append(Lint("pool-bandwidth-exceeds-ports", "warning",
                            f"assumed {bw:,.0f} GB/s per GPU, but {ports} port(s) x {port:,.0f} GB/s carry {ports * port:,.0f} GB/s "
                            f"({bw / (ports * port):.1f}x)", {"assumed_GBps": bw, "ports": ports, "port_GBps": port}))
        D = s.devices.count
        if bw * D > app.switching_capacity_GBps:
            out.append(Lint("pool-bandwidth-exceeds-switch", "warning",
                            f"{D} GPUs x {bw:,.0f} GB/s = {D * bw:,.0f} GB/s, but the switch carries {app.switching_capacity_GBps:,.0f} GB/s",
                            {"devices": D, "assumed_GBps": bw, "switch_GBps": app.switching_capacity_GBps}))
        return out

    def summary(self) -> dict[str, Any]:
        return render.summary(self.inst, self.model)

    def render_summary(self, console: Any, summary: dict[str, Any]) -> None:
        render.print_summary(console, summary)

    def render_design(self, console: Any, assessment: Assessment) -> None:
        render.print_design(console, self.model, assessment.detail)
