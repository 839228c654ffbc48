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
from codesign.model import appliances


@dataclass(frozen=True)
class Lint:
    code: str
    severity: str  # "error": physically impossible; "warning": suspicious
    message: str
    numbers: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _port_lints(inst: Instance, app: Any) -> list[Lint]:
    """``appliance-ports-exhausted`` when no design of the instance's appliance decisions fits the
    ports (appliance count, pool ports, layout, uplinks: model/appliances.py), with the least
    appliance count that would; a warning where the shared layout's scenario-assumed links enter."""
    dom = {d.name: d.domain for d in inst.hardware_decisions}
    get = {k: dom.get(k, (appliances.DEFAULTS.get(k, 1),)) for k in ("appliances", "pool_ports", "pool_layout", "uplink_ports")}
    available = app.modules * app.ports_per_module
    devices = inst.system.devices
    used = min(float(appliances.ports_used(devices, n, p, lay == "shared", up))
               for n in get["appliances"] for p in get["pool_ports"] for lay in get["pool_layout"] for up in get["uplink_ports"])
    out: list[Lint] = []
    if used > available:
        p, most = min(get["pool_ports"]), max(get["appliances"])
        need = next(n for n in range(1, devices + 1) if devices % n == 0 and devices // n * p <= available) \
            if p <= available else None
        fix = (f"decide at least {need} appliances (hardware.decisions.appliances, a divisor of {devices})"
               if need else f"one device's {p} ports exceed an appliance's")
        out.append(Lint(
            "appliance-ports-exhausted", "error",
            f"{devices} devices x {p} port(s) over {most} appliance(s) = {devices * p / most:g} ports on each "
            f"appliance, but an appliance has {available}: {fix}",
            {"ports_needed": devices * p / most, "ports_available": available, "appliances_needed": need or 0},
        ))
    if "shared" in get["pool_layout"] and max(get["appliances"]) > 1:
        out.append(Lint(
            "appliance-links-assumed", "warning",
            "pool_layout 'shared' joins the appliances through a tier-2 switch of the same catalog entry over "
            "uplink_ports: no public figure for an appliance-to-appliance link exists in the cited sources, so "
            "its bandwidth (a port's per uplink) and energy (two more switches: the tier-2's and the other appliance's) are a scenario assumption",
            {"appliances": max(get["appliances"]), "port_GBps": app.port_bandwidth_GBps},
        ))
    return out


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
            per = sysm.devices // max(next((d.domain for d in inst.hardware_decisions if d.name == "appliances"), (1,)))
            total = assumed * per
            if total > switch:
                out.append(Lint(
                    "pooled-bandwidth-exceeds-switch", "error",
                    f"{per} devices{' on one appliance' if per < sysm.devices else ''} x {assumed:,.0f} GB/s = {total:,.0f} GB/s exceeds the "
                    f"appliance's {app.switching_capacity_Tbps:g} Tbps switching capacity "
                    f"({switch:,.0f} GB/s; {total / switch:.1f}x)",
                    {"devices": per, "assumed_GBps": assumed, "total_GBps": total, "switch_GBps": switch},
                ))
            if assumed > switch:
                out.append(Lint(
                    "pooled-bandwidth-exceeds-appliance", "error",
                    f"one device alone is assumed to draw {assumed:,.0f} GB/s, more than the whole "
                    f"appliance switches ({switch:,.0f} GB/s)",
                    {"assumed_GBps": assumed, "switch_GBps": switch},
                ))
        out.extend(_port_lints(inst, app))
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
