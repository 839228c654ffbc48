"""Consistency lints: assumptions of an instance that contradict its own hardware, with the numbers.

The flagship case is the Photonic Fabric paper (arXiv 2507.14000): its PFA configuration assumes
26,800 GB/s of pooled-memory bandwidth per GPU, while one appliance port carries 7.2 Tbps
(900 GB/s) and the whole switch 115 Tbps (14,375 GB/s) shared by every attached device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from codesign import catalog
from codesign.kinds.grid.spec import Instance


@dataclass(frozen=True)
class Lint:
    code: str
    severity: str  # "error": physically impossible; "warning": suspicious
    message: str
    numbers: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def lint(inst: Instance) -> list[Lint]:
    """Every inconsistency found in ``inst`` (empty list when consistent)."""
    out: list[Lint] = []
    sysm = inst.system
    if sysm.appliance:
        app = catalog.load_appliance(sysm.appliance)
        port = app.port_bandwidth_GBps
        switch = app.switching_capacity_GBps
        ports_dom = next((d.domain for d in inst.hardware_decisions if d.name == "pool_ports"), (1,))
        max_ports = max(ports_dom)
        assumed = sysm.pooled_bandwidth_GBps_per_device
        if assumed is not None:
            carry = max_ports * port
            if assumed > carry:
                out.append(Lint(
                    "pooled-bandwidth-exceeds-ports", "error",
                    f"each device is assumed to draw {assumed:,.0f} GB/s from {app.name}, but its "
                    f"{max_ports} port(s) of {app.port_bandwidth_Tbps:g} Tbps carry {carry:,.0f} GB/s "
                    f"({assumed / carry:.1f}x more than the ports deliver)",
                    {"assumed_GBps": assumed, "ports": max_ports, "port_GBps": port, "ports_carry_GBps": carry},
                ))
            total = assumed * sysm.devices
            if total > switch:
                out.append(Lint(
                    "pooled-bandwidth-exceeds-switch", "error",
                    f"{sysm.devices} devices x {assumed:,.0f} GB/s = {total:,.0f} GB/s exceeds the "
                    f"appliance's {app.switching_capacity_Tbps:g} Tbps switching capacity "
                    f"({switch:,.0f} GB/s; {total / switch:.1f}x)",
                    {"devices": sysm.devices, "assumed_GBps": assumed, "total_GBps": total, "switch_GBps": switch},
                ))
            if assumed > switch:
                out.append(Lint(
                    "pooled-bandwidth-exceeds-appliance", "error",
                    f"one device alone is assumed to draw {assumed:,.0f} GB/s, more than the whole "
                    f"appliance switches ({switch:,.0f} GB/s)",
                    {"assumed_GBps": assumed, "switch_GBps": switch},
                ))
        available = app.modules * app.ports_per_module
        need = sysm.devices * min(ports_dom)
        if need > available:
            out.append(Lint(
                "appliance-ports-exhausted", "error",
                f"{sysm.devices} devices x {min(ports_dom)} port(s) = {need} ports, but the appliance "
                f"has {available}",
                {"ports_needed": need, "ports_available": available},
            ))
    if sysm.scale_up_domain > sysm.devices:
        out.append(Lint(
            "scale-up-domain-larger-than-system", "warning",
            f"scale_up_domain = {sysm.scale_up_domain} exceeds the {sysm.devices} devices",
            {"scale_up_domain": sysm.scale_up_domain, "devices": sysm.devices},
        ))
    elif sysm.devices % sysm.scale_up_domain:
        out.append(Lint(
            "scale-up-domain-does-not-tile-system", "warning",
            f"{sysm.devices} devices do not split into scale-up domains of {sysm.scale_up_domain}: the last "
            f"domain would hold {sysm.devices % sysm.scale_up_domain}",
            {"scale_up_domain": sysm.scale_up_domain, "devices": sysm.devices},
        ))
    for w in inst.workloads:
        tp, pp = w.decisions.get("tp", [1]), w.decisions.get("pp", [1])
        idle = sorted({v for v in tp if all(sysm.devices % (v * p) for p in pp)})
        if idle:  # those values only prune: no layout of the system uses them
            out.append(Lint(
                "tp-never-fits-system", "warning",
                f"workload {w.name}: tp = {', '.join(map(str, idle))} with no pp of the domain divides the "
                f"{sysm.devices} devices into whole replicas (tp x pp must divide them); those layouts are infeasible",
                {"devices": sysm.devices, "tp_values": len(idle)},
            ))
    return out
