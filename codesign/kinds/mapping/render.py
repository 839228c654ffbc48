"""People's views of a mapping instance: what ``show`` adds to the shared summary, the stage table
of a design, and the instance's lints."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.table import Table

from codesign import catalog
from codesign.kinds.base import Lint
from codesign.kinds.mapping.spec import MappingInstance
from codesign.model.calibration import CalibrationSet
from codesign.model.engines import rules_of
from codesign.model.mapping import MappingProblem
from codesign.model.units import GiB


def summary(inst: MappingInstance, p: MappingProblem) -> dict[str, Any]:
    """The instance's facts beyond its decisions (JSON-ready)."""
    s = inst.spec
    return {
        "workload": s.workload.model_dump(),
        "layers": p.layers,
        "micro_batch": p.micro_batch,
        "devices": [g.model_dump() for g in s.devices],
        "appliance": None if s.appliance is None else s.appliance.model_dump(),
        "modules": p.modules,
        "tiers": [t.label for t in p.tiers],
        "weight_tiers": [p.tiers[i].label for i in p.weight_tiers],
        "kv_tiers": [p.tiers[i].label for i in p.kv_tiers],
        "per_layer": {
            "weights_B": p.layer.w_store_B,
            "weights_read_per_period_B": p.layer.w_read_B,
            "kv_cache_B": p.layer.kv_store_B,
            "kv_read_per_period_B": p.layer.kv_read_B,
            "flops_per_period": p.layer.flops,
        },
        "budgets": s.budgets.model_dump(exclude_none=True),
    }


def host_term_lints(chips: list[str], calibration: CalibrationSet, engine: str | None = None) -> list[Lint]:
    """A warning per chip with a host time per sequence of a step that the model kind leaves out:
    the calibration's (``host_us_per_sequence``, fitted only by ``codesign calibrate --fit-host``),
    which only the design model charges (model.md eq. 5.3), plus, for a kind that does not charge
    it either, ``engine``'s (its profile's ``host_us_per_sequence``; the mapping model charges the
    engine's, eq. 9.2b, and passes None)."""
    out = []
    for chip in sorted(set(chips)):
        cal_us = calibration.for_chip(chip).host_us_per_sequence
        eng_us = 0.0 if engine is None else rules_of(engine, chip, catalog.load_chip(chip).memory_capacity_GiB).host_us_per_sequence
        host_us = cal_us + eng_us
        if host_us > 0:
            parts = [f"the calibration {calibration.name} gives {chip} a host time of {cal_us:g} µs" if cal_us else "",
                     f"engine {engine} one of {eng_us:g} µs" if eng_us else ""]
            out.append(Lint(
                "host-term-not-modelled", "warning",
                f"{' and '.join(x for x in parts if x)} per sequence of a step; this model kind leaves "
                f"{'them' if cal_us and eng_us else 'it'} out, so its step times leave out {host_us:g} µs x the "
                "sequences of each step",
                {"host_us_per_sequence": host_us, "calibration_us": cal_us, "engine_us": eng_us},
            ))
    return out


def lints(inst: MappingInstance) -> list[Lint]:
    """The paper-assumption check (a per-device pooled bandwidth its ports cannot carry) and the
    calibration's host term, which this model kind does not charge (the engine's it does: eq. 9.2b)."""
    s = inst.spec
    out = host_term_lints([c for g in s.devices for c in (g.chip if isinstance(g.chip, list) else [g.chip])],
                          inst.calibration)
    if s.appliance is None or s.appliance.assumed_device_bandwidth_GBps is None:
        return out
    app = catalog.load_appliance(s.appliance.id)
    bw = s.appliance.assumed_device_bandwidth_GBps
    devices = sum(g.count * g.tp for g in s.devices)
    ports = max(g.pool_ports for g in s.devices) or 1
    port = app.port_bandwidth_GBps * app.ports_per_module
    if bw > ports * port:
        out.append(Lint(
            "pool-bandwidth-exceeds-ports", "warning",
            f"assumed {bw:,.0f} GB/s per device, but {ports} port(s) x {port:,.0f} GB/s carry {ports * port:,.0f} GB/s "
            f"({bw / (ports * port):.1f}x)",
            {"assumed_GBps": bw, "ports": ports, "port_GBps": port},
        ))
    if bw * devices > app.switching_capacity_GBps:
        out.append(Lint(
            "pool-bandwidth-exceeds-switch", "warning",
            f"{devices} devices x {bw:,.0f} GB/s = {devices * bw:,.0f} GB/s, but the switch carries "
            f"{app.switching_capacity_GBps:,.0f} GB/s",
            {"devices": devices, "assumed_GBps": bw, "switch_GBps": app.switching_capacity_GBps},
        ))
    return out


def print_summary(console, data: dict[str, Any]) -> None:
    console.print(f"{data['layers']} layers, micro-batch {data['micro_batch']}")
    t = Table(title="devices (pipeline order)")
    for c in ("group", "chip", "count", "pool ports", "host GiB"):
        t.add_column(c)
    for g in data["devices"]:
        chip = " | ".join(g["chip"]) if isinstance(g["chip"], list) else g["chip"]  # a list: a decision
        t.add_row(g["name"], chip, str(g["count"]), str(g["pool_ports"]), str(g["host_capacity_GiB"]))
    console.print(t)
    console.print(f"weights may live in: {', '.join(_kinds(data['weight_tiers']))};  "
                  f"KV cache in: {', '.join(_kinds(data['kv_tiers']))}")


def _kinds(labels: list[str]) -> list[str]:
    c = Counter(lbl.split(":")[0] for lbl in labels)
    return [k if v == 1 else f"{k} ({v} tiers)" for k, v in c.items()]


def print_design(console, p, design: dict[str, Any], ev) -> None:
    t = Table(title="stages")
    for c in ("device", "layers", "weights", "KV cache", "attach", "compute ms", "memory ms", "stage ms", "local GiB"):
        t.add_column(c, justify="left" if c in ("device", "layers", "weights", "KV cache") else "right")
    lo = 0
    for d, n in enumerate(design["layers_per_stage"]):
        w = Counter(design["weights"][lo : lo + n])
        k = Counter(design["kv"][lo : lo + n])
        t.add_row(
            p.devices[d].name,
            f"{lo}-{lo + n - 1} ({n})",
            ", ".join(f"{c} {lbl}" for lbl, c in sorted(w.items())),
            ", ".join(f"{c} {lbl}" for lbl, c in sorted(k.items())),
            ",".join(map(str, design["attach"][d])) or "-",
            f"{ev.compute_s[d] * 1e3:.3f}",
            f"{ev.memory_s[d] * 1e3:.3f}",
            f"{ev.stage_s[d] * 1e3:.3f}",
            f"{ev.local_used_B[d] / GiB:.1f}",
        )
        lo += n
    console.print(t)
    console.print(
        f"period {ev.period_s * 1e3:.4f} ms (bottleneck: {ev.bottleneck})"
    )
    if ev.port_load_s and max(ev.port_load_s) > 0:
        console.print(f"busiest module port {max(ev.port_load_s) * 1e3:.4f} ms, switch {ev.switch_load_s * 1e3:.4f} ms per period")
