"""People's views of a training instance: its lints, what ``show`` adds, and a design's breakdown."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from codesign import catalog
from codesign.kinds.base import Assessment, Lint
from codesign.kinds.training.spec import TrainingInstance
from codesign.model.training import TrainingSetup
from codesign.model.units import TBPS_TO_BPS, GBps, GiB


def lints(inst: TrainingInstance) -> list[Lint]:
    """The paper's per-device appliance bandwidth against what the ports and the switch carry."""
    ap = inst.spec.appliance
    if ap is None or ap.assumed_device_bandwidth_GBps is None:
        return []
    app = catalog.load_appliance(ap.id)
    n = inst.spec.devices.count
    assumed = ap.assumed_device_bandwidth_GBps
    ports = ap.ports_per_device * app.port_bandwidth_Tbps * TBPS_TO_BPS / GBps
    switch = app.switching_capacity_Tbps * TBPS_TO_BPS / GBps
    out = []
    if assumed > ports:
        out.append(Lint("pooled-bandwidth-exceeds-ports", "warning",
                        f"each device is assumed to reach the appliance at {assumed:,.0f} GB/s; its "
                        f"{ap.ports_per_device} port(s) carry {ports:,.0f} GB/s ({assumed / ports:.1f}x less)",
                        {"assumed_GBps": assumed, "ports_GBps": ports}))
    if assumed * n > switch:
        out.append(Lint("pooled-bandwidth-exceeds-switch", "warning",
                        f"{n} devices at {assumed:,.0f} GB/s need {assumed * n:,.0f} GB/s; the switch carries "
                        f"{switch:,.0f} GB/s", {"total_GBps": assumed * n, "switch_GBps": switch}))
    return out


def summary(inst: TrainingInstance, s: TrainingSetup) -> dict[str, Any]:
    sp = inst.spec
    return {
        "workload": sp.workload.model_dump(exclude_none=True),
        "devices": {**sp.devices.model_dump(exclude_none=True), "node_size": s.node_size},
        "appliance": None if sp.appliance is None else sp.appliance.model_dump(exclude_none=True),
        "parameters": s.total_params,
        "tokens_per_step": s.tokens_per_step,
        "per_device": {"usable_capacity_B": s.capacity_B, "peak_flops": s.peak_flops,
                       "compute_efficiency": s.compute_efficiency},
        "links": {
            "nvlink": {"achieved_Bps": s.nvlink_Bps, "J_per_B": s.nvlink_J_per_B},
            "infiniband": {"achieved_Bps": s.ib_Bps, "J_per_B": s.ib_J_per_B},
            "appliance": {"achieved_Bps": s.appliance_Bps, "J_per_B": s.appliance_J_per_B},
        },
        "budgets": sp.budgets.model_dump(exclude_none=True),
    }


def print_summary(console: Any, data: dict[str, Any]) -> None:
    wl, dv = data["workload"], data["devices"]
    console.print(f"{wl['workload']}: {data['parameters'] / 1e9:.2f}B parameters, {wl['global_batch']} sequences x "
                  f"{wl['sequence_tokens']} tokens per step; {dv['count']} x {dv['chip']} in nodes of {dv['node_size']}")
    t = Table(title="links (achieved, per direction)")
    for c in ("network", "GB/s", "pJ/bit"):
        t.add_column(c, justify="right")
    for name, v in data["links"].items():
        t.add_row(name, f"{v['achieved_Bps'] / GBps:,.1f}", f"{v['J_per_B'] / 8 * 1e12:.1f}")
    console.print(t)


def print_design(console: Any, a: Assessment) -> None:
    ev = a.detail
    if ev is None:
        return
    t = Table(title="one training step")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [
        ("dp x micro-batches", f"{ev.dp} x {ev.micro_batches}"),
        ("step time (s)", f"{ev.step_s:.4f}"),
        ("  compute / TP / PP / DP (s)", f"{ev.compute_s:.3f} / {ev.tp_comm_s:.3f} / {ev.pp_comm_s:.3f} / {ev.dp_comm_s:.3f}"),
        ("  bubble", f"{ev.bubble_fraction:.1%}"),
        ("memory per device (GiB)", f"{ev.memory_B_per_device / GiB:.2f} (state {ev.state_B_per_device / GiB:.2f}, "
                                    f"activations {ev.activation_B_per_device / GiB:.2f})"),
        ("energy per step (J)", f"{ev.energy_per_step_J:,.0f}"),
        ("  compute / static / HBM", f"{ev.compute_J:,.0f} / {ev.static_J:,.0f} / {ev.memory_J:,.0f}"),
        ("  data movement: NVLink / IB / appliance", f"{ev.nvlink_J:,.0f} / {ev.ib_J:,.0f} / {ev.appliance_J:,.0f}"),
        ("bytes sent: NVLink / IB / appliance (GB)", f"{ev.nvlink_B / 1e9:,.1f} / {ev.ib_B / 1e9:,.1f} / {ev.appliance_B / 1e9:,.1f}"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
