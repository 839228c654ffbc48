"""People's views of a placement instance: what ``show`` adds to the shared summary and the
device table of a design."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.markup import escape
from rich.table import Table

from codesign.kinds.placement.spec import PlacementInstance
from codesign.model.placement import PlacementProblem
from codesign.model.units import GiB


def decisions_text(pb: PlacementProblem) -> str:
    s = f"{pb.experts} experts ({len(pb.classes)} classes) x {pb.devices} devices in {len(pb.domains)} domains"
    if pb.tp > 1:
        s += f"; {pb.groups} TP groups of {pb.tp}"
    return s


def summary(inst: PlacementInstance, pb: PlacementProblem) -> dict[str, Any]:
    """The instance's facts beyond its decisions (JSON-ready)."""
    s = inst.spec
    return {
        "workload": s.workload.model_dump(),
        "devices": s.devices.model_dump(),
        "domains": pb.domains,
        "tp": pb.tp,
        "experts": pb.experts,
        "top_k": pb.top_k,
        "moe_layers": pb.moe_layers,
        "routing": {"profile": s.routing.profile, "source": s.routing.source,
                    "classes": [{"p": c.p, "q": c.q, "count": len(c.members)} for c in pb.classes]},
        "per_device": {
            "fixed_store_B": pb.fixed_store_B,
            "expert_store_B": pb.expert_store_B,
            "usable_capacity_B": pb.capacity_B,
            "max_experts": pb.max_experts_per_device,
            "fixed_step_s": pb.fixed_time_s,
        },
        "links": {"scale_up_Bps": pb.up_Bps, "scale_out_Bps": pb.out_Bps, "J_per_B_up": pb.J_per_B_up,
                  "J_per_B_out": pb.J_per_B_out},
        "budgets": s.budgets.model_dump(exclude_none=True),
    }


def print_summary(console, data: dict[str, Any]) -> None:
    console.print(f"{data['experts']} experts (top-{data['top_k']}) x {data['moe_layers']} MoE layers; devices: "
                  f"{data['devices']['count']} x {data['devices']['chip']} in domains {data['domains']}; attention TP {data['tp']}")
    t = Table(title=f"routing profile ({data['routing']['profile']})")
    for c in ("class", "experts", "p (per token)", "q (touched per step)"):
        t.add_column(c, justify="right")
    for i, c in enumerate(data["routing"]["classes"]):
        t.add_row(str(i), str(c["count"]), f"{c['p']:.5g}", f"{c['q']:.5g}")
    console.print(t)
    if data["routing"]["source"]:
        console.print(f"[dim]profile: {escape(data['routing']['source'])}[/]")
    pd = data["per_device"]
    console.print(
        f"per device: fixed {pd['fixed_store_B'] / GiB:.2f} GiB + {pd['expert_store_B'] / GiB:.3f} GiB per expert (all MoE "
        f"layers), usable {pd['usable_capacity_B'] / GiB:.2f} GiB -> at most {pd['max_experts']} experts; fixed step part "
        f"{pd['fixed_step_s'] * 1e3:.3f} ms"
    )


def print_design(console, pb, design: dict[str, Any], ev) -> None:
    t = Table(title="devices")
    for c in ("device", "domain", "group", "experts", "load P_d", "expert ms/layer", "GiB"):
        t.add_column(c, justify="left" if c in ("device", "experts") else "right")
    group_of = {d: g for g, members in enumerate(design["groups"]) for d in members}
    by_dev: dict[int, list[int]] = {d: [] for d in range(pb.devices)}
    for e, d in enumerate(design["experts"]):
        by_dev[d].append(e)
    for d in range(pb.devices):
        ex = by_dev[d]
        shown = ",".join(map(str, ex[:12])) + (f",... ({len(ex)})" if len(ex) > 12 else "")
        t.add_row(str(d), str(int(pb.domain_of[d])), str(group_of.get(d, "-")), shown, f"{ev.load[d]:.4f}", f"{ev.expert_s[d] * 1e3:.4f}", f"{ev.used_B[d] / GiB:.1f}")
    if pb.devices <= 64:
        console.print(t)
    console.print(
        f"step {ev.step_s * 1e3:.4f} ms = fixed {ev.fixed_s * 1e3:.4f} + {pb.moe_layers} MoE layers x (experts {ev.expert_phase_s * 1e3:.4f} + dispatch "
        f"{ev.dispatch_s * 1e3:.4f} + combine {ev.combine_s * 1e3:.4f} + latency) + {pb.tp_calls:g} all-reduce equivalents ({pb.allreduces} all-reduces and the logits all-gather) x {ev.tp_allreduce_s * 1e3:.4f} ms"
    )
    console.print(f"load max/mean {max(ev.load) / (pb.top_k / pb.devices):.4f}")
    if pb.tp > 1:
        c = Counter(tuple(x) for x in ev.group_parts)
        console.print("TP groups (members per domain): " + "; ".join(f"{n} x {list(k)}" for k, n in sorted(c.items(), reverse=True)) + f"; {ev.cross_domain_groups} cross-domain")
