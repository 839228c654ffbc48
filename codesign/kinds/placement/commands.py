"""Command-line views of placement instances (called by :mod:`codesign.cli` when the instance has
``kind = "placement"``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from codesign.kinds.family import design_or_baseline, solve_command
from codesign.kinds.mapping.commands import host_term_lints
from codesign.kinds.placement.solve import require_design, solve_placement
from codesign.kinds.placement.spec import list_placement_instances, load_placement
from codesign.model.hardware import GiB
from codesign.model.placement import build_problem, evaluate_placement, objective_sense, space_size


def _decisions(pb) -> str:
    s = f"{pb.experts} experts ({len(pb.classes)} classes) x {pb.devices} devices in {len(pb.domains)} domains"
    if pb.tp > 1:
        s += f"; {pb.groups} TP groups of {pb.tp}"
    return s


def instance_rows() -> list[dict[str, Any]]:
    rows = []
    for name in list_placement_instances():
        inst = load_placement(name)
        pb = build_problem(inst)
        rows.append({
            "name": name,
            "kind": "placement",
            "workloads": [inst.spec.workload.workload],
            "objective": pb.objective,
            "decisions": _decisions(pb),
            "space_size": space_size(pb),
            "description": inst.spec.description,
        })
    return rows


def check_solution(data: dict[str, Any], path: Path) -> dict[str, Any]:
    from codesign.kinds.placement.solve import check_placement_solution

    return check_placement_solution(data, path)


def summary(name: str) -> dict[str, Any]:
    inst = load_placement(name)
    pb = build_problem(inst)
    s = inst.spec
    return {
        "name": inst.name,
        "kind": "placement",
        "description": s.description,
        "provenance": s.provenance,
        "source": str(inst.source),
        "content_hash": inst.content_hash,
        "workload": s.workload.model_dump(),
        "devices": s.devices.model_dump(),
        "domains": pb.domains,
        "tp": pb.tp,
        "experts": pb.experts,
        "top_k": pb.top_k,
        "moe_layers": pb.moe_layers,
        "routing": {"profile": s.routing.profile, "source": s.routing.source, "classes": [{"p": c.p, "q": c.q, "count": len(c.members)} for c in pb.classes]},
        "per_device": {
            "fixed_store_B": pb.fixed_store_B,
            "expert_store_B": pb.expert_store_B,
            "usable_capacity_B": pb.capacity_B,
            "max_experts": pb.max_experts_per_device,
            "fixed_step_s": pb.fixed_time_s,
        },
        "links": {"scale_up_Bps": pb.up_Bps, "scale_out_Bps": pb.out_Bps, "J_per_B_up": pb.J_per_B_up, "J_per_B_out": pb.J_per_B_out},
        "space_size": space_size(pb),
        "objective": {"metric": pb.objective, "sense": objective_sense(pb)},
        "budgets": s.budgets.model_dump(exclude_none=True),
        "lints": host_term_lints([s.devices.chip]),
    }


def print_summary(console, data: dict[str, Any]) -> None:
    from codesign.model.mapping import format_count

    console.print(f"[bold]{escape(data['name'])}[/] (placement): {escape(data['description'])}")
    console.print(f"[dim]{escape(data['provenance'])}[/]")
    console.print(
        f"objective: {data['objective']['sense']} {data['objective']['metric']}    space: {format_count(data['space_size'])} points    "
        f"{data['experts']} experts (top-{data['top_k']}) x {data['moe_layers']} MoE layers"
    )
    console.print(f"devices: {data['devices']['count']} x {data['devices']['chip']} in domains {data['domains']}; attention TP {data['tp']}")
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
        f"per device: fixed {pd['fixed_store_B'] / GiB:.2f} GiB + {pd['expert_store_B'] / GiB:.3f} GiB per expert (all MoE layers), usable "
        f"{pd['usable_capacity_B'] / GiB:.2f} GiB -> at most {pd['max_experts']} experts; fixed step part {pd['fixed_step_s'] * 1e3:.3f} ms"
    )
    for x in data["lints"]:
        console.print(f"[yellow]lint {x['severity']} {x['code']}[/]: {escape(x['message'])}", highlight=False)


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
    console.print(f"tokens/s {ev.tokens_per_s:,.1f}; energy/token {ev.energy_per_token_J:.5g} J; load max/mean {max(ev.load) / (pb.top_k / pb.devices):.4f}")
    if pb.tp > 1:
        c = Counter(tuple(x) for x in ev.group_parts)
        console.print("TP groups (members per domain): " + "; ".join(f"{n} x {list(k)}" for k, n in sorted(c.items(), reverse=True)) + f"; {ev.cross_domain_groups} cross-domain")
    for v in ev.violations:
        console.print(f"[red]violation[/]: {v}")


def evaluate(console, name: str, design_data: dict[str, Any] | None, source: str, as_json: bool, emit) -> None:
    inst = load_placement(name)
    pb = build_problem(inst)
    design_data, source = design_or_baseline(inst, design_data, source)
    d = require_design(pb, design_data, source)
    ev = evaluate_placement(pb, d)
    if as_json:
        emit({"instance": inst.name, "kind": "placement", "objective_metric": pb.objective, "sense": objective_sense(pb), "design": d.as_dict(), **ev.as_dict()})
        return
    print_design(console, pb, d.as_dict(), ev)
    status = "[green]feasible[/]" if ev.feasible else "[red]infeasible[/]"
    console.print(f"objective {objective_sense(pb)} {pb.objective} = {ev.objective:.10g}  ({status})")


def solve(console, err, name: str, solver: str, time_limit, threads, cross_check: bool, save: bool, out_dir: Path | None, as_json: bool, emit) -> None:
    inst = load_placement(name)

    def show_design(sol) -> None:
        p = build_problem(inst)
        print_design(console, p, sol.design, evaluate_placement(p, require_design(p, sol.design, "solution")))

    solve_command(
        console, err, inst, solve_placement, show_design, solver=solver, time_limit=time_limit, threads=threads,
        cross_check_both=cross_check, save=save, out_dir=out_dir, as_json=as_json, emit=emit,
    )
