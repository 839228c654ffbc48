"""Command-line views of mapping instances (called by :mod:`codesign.cli` when the instance has
``kind = "mapping"``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table

from codesign.jsonio import write_json_atomic
from codesign.kinds.family import design_or_baseline, solve_command
from codesign.kinds.mapping.solve import require_design, solve_mapping
from codesign.kinds.mapping.spec import MappingInstance, list_mapping_instances, load_mapping
from codesign.model.mapping import (
    GiB,
    build_problem,
    evaluate_mapping,
    format_count,
    objective_sense,
    space_size,
)


def instance_rows() -> list[dict[str, Any]]:
    rows = []
    for name in list_mapping_instances():
        inst = load_mapping(name)
        p = build_problem(inst)
        rows.append({
            "name": name,
            "kind": "mapping",
            "workloads": [inst.spec.workload.workload],
            "objective": p.objective,
            "decisions": f"{p.layers} layers x {p.stages} devices x {p.modules} modules",
            "space_size": space_size(p),
            "description": inst.spec.description,
        })
    return rows


def check_solution(data: dict[str, Any], path: Path) -> dict[str, Any]:
    from codesign.kinds.mapping.solve import check_mapping_solution

    return check_mapping_solution(data, path)


def summary(name: str) -> dict[str, Any]:
    inst = load_mapping(name)
    p = build_problem(inst)
    s = inst.spec
    return {
        "name": inst.name,
        "kind": "mapping",
        "description": s.description,
        "provenance": s.provenance,
        "source": str(inst.source),
        "content_hash": inst.content_hash,
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
        "space_size": space_size(p),
        "objective": {"metric": p.objective, "sense": objective_sense(p)},
        "budgets": s.budgets.model_dump(exclude_none=True),
        "lints": lints(inst),
    }


def host_term_lints(chips: list[str]) -> list[dict[str, str]]:
    """A warning per chip whose calibration sets a host time per sequence (``host_us_per_sequence``,
    fitted only by ``codesign calibrate --fit-host``): the mapping and placement models have no
    host term (model.md eq. 5.3 is the design model's), so their step times leave it out."""
    from codesign.model.hardware import calibration_for, calibration_path

    out = []
    for chip in sorted(set(chips)):
        host_us = calibration_for(chip).host_us_per_sequence
        if host_us > 0:
            out.append({
                "severity": "warning",
                "code": "host-term-not-modelled",
                "message": f"the calibration {calibration_path()} gives {chip} a host time of {host_us:g} µs per "
                           "sequence of a step; this model kind leaves it out (only the design model charges "
                           "it, eq. 5.3), so its step times leave out that time x the sequences of each step",
            })
    return out


def lints(inst: MappingInstance) -> list[dict[str, str]]:
    """The paper-assumption check (a per-device pooled bandwidth its ports cannot carry) and the
    calibration's host term, which this model kind does not charge."""
    from codesign import catalog

    s = inst.spec
    out: list[dict[str, str]] = host_term_lints([g.chip for g in s.devices])
    if s.appliance is None or s.appliance.assumed_device_bandwidth_GBps is None:
        return out
    app = catalog.load_appliance(s.appliance.id)
    bw = s.appliance.assumed_device_bandwidth_GBps
    devices = sum(g.count for g in s.devices)
    ports = max(g.pool_ports for g in s.devices) or 1
    port = app.port_bandwidth_GBps * app.ports_per_module
    if bw > ports * port:
        out.append({
            "severity": "warning",
            "code": "pool-bandwidth-exceeds-ports",
            "message": f"assumed {bw:,.0f} GB/s per device, but {ports} port(s) x {port:,.0f} GB/s carry {ports * port:,.0f} GB/s ({bw / (ports * port):.1f}x)",
        })
    if bw * devices > app.switching_capacity_GBps:
        out.append({
            "severity": "warning",
            "code": "pool-bandwidth-exceeds-switch",
            "message": f"{devices} devices x {bw:,.0f} GB/s = {devices * bw:,.0f} GB/s, but the switch carries {app.switching_capacity_GBps:,.0f} GB/s",
        })
    return out


def print_summary(console, data: dict[str, Any]) -> None:
    console.print(f"[bold]{data['name']}[/] (mapping): {data['description']}")
    console.print(f"[dim]{data['provenance']}[/]")
    console.print(
        f"objective: {data['objective']['sense']} {data['objective']['metric']}    space: {format_count(data['space_size'])} points    "
        f"{data['layers']} layers, micro-batch {data['micro_batch']}"
    )
    t = Table(title="devices (pipeline order)")
    for c in ("group", "chip", "count", "pool ports", "host GiB"):
        t.add_column(c)
    for g in data["devices"]:
        t.add_row(g["name"], g["chip"], str(g["count"]), str(g["pool_ports"]), str(g["host_capacity_GiB"]))
    console.print(t)
    console.print(f"weights may live in: {', '.join(_kinds(data['weight_tiers']))};  KV cache in: {', '.join(_kinds(data['kv_tiers']))}")
    for x in data["lints"]:
        console.print(f"[yellow]lint {x['severity']} {x['code']}[/]: {x['message']}", highlight=False)


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
        f"period {ev.period_s * 1e3:.4f} ms (bottleneck: {ev.bottleneck}); tokens/s {ev.tokens_per_s:,.1f}; "
        f"tpot {ev.tpot_s * 1e3:.2f} ms; energy/token {ev.energy_per_token_J:.4g} J"
    )
    if ev.port_load_s and max(ev.port_load_s) > 0:
        console.print(f"busiest module port {max(ev.port_load_s) * 1e3:.4f} ms, switch {ev.switch_load_s * 1e3:.4f} ms per period")
    for v in ev.violations:
        console.print(f"[red]violation[/]: {v}")


def evaluate(console, name: str, design_data: dict[str, Any] | None, source: str, as_json: bool, emit) -> None:
    inst = load_mapping(name)
    p = build_problem(inst)
    design_data, source = design_or_baseline(inst, design_data, source)
    d = require_design(p, design_data, source)
    ev = evaluate_mapping(p, d)
    if as_json:
        emit({"instance": inst.name, "kind": "mapping", "objective_metric": p.objective, "sense": objective_sense(p), "design": d.as_dict(), **ev.as_dict()})
        return
    print_design(console, p, d.as_dict(), ev)
    status = "[green]feasible[/]" if ev.feasible else "[red]infeasible[/]"
    console.print(f"objective {objective_sense(p)} {p.objective} = {ev.objective:.10g}  ({status})")


def solve(console, err, name: str, solver: str, time_limit, threads, cross_check: bool, save: bool, out_dir: Path | None, as_json: bool, emit) -> None:
    inst = load_mapping(name)

    def show_design(sol) -> None:
        p = build_problem(inst)
        print_design(console, p, sol.design, evaluate_mapping(p, require_design(p, sol.design, "solution")))

    def explain() -> dict[str, Any]:
        from codesign.kinds.mapping.solve import explain_infeasible

        return explain_infeasible(inst, solver=solver, time_limit=time_limit)

    solve_command(
        console, err, inst, solve_mapping, show_design, solver=solver, time_limit=time_limit, threads=threads,
        cross_check_both=cross_check, save=save, out_dir=out_dir, as_json=as_json, emit=emit, explain=explain,
    )


def certify(console, name: str, design_data: dict[str, Any] | None, source: str, solver: str, time_limit, solutions: Path, output: Path | None, as_json: bool, emit) -> None:
    """How far a mapping design is from the best: the model's audit and objective, and the
    proven bound (a stored solution of the same instance content, else a solve)."""
    from codesign.jsonio import read_json
    from codesign.proof.driver import GAP_TOL, user_gap

    inst = load_mapping(name)
    p = build_problem(inst)
    design_data, source = design_or_baseline(inst, design_data, source)
    d = require_design(p, design_data, source)
    ev = evaluate_mapping(p, d)
    sense = objective_sense(p)
    stored = Path(solutions) / "mapping" / f"{inst.name}.json"
    bound = provenance = None
    if stored.exists():
        rec = read_json(stored)
        if rec.get("instance_hash") == inst.content_hash and rec.get("bound") is not None:
            bound = rec["bound"]
            provenance = {"source": str(stored), "solver": rec.get("solver"), "status": rec.get("status")}
    if bound is None:
        sol = solve_mapping(inst, solver=solver, time_limit=time_limit)
        bound = sol.bound
        provenance = {"source": "solve", "solver": solver, "status": sol.status}
    gap = None
    if bound is not None and ev.feasible:
        gap = max(user_gap(sense, ev.objective, bound), 0.0)
    if not ev.feasible:
        statement = "the design is infeasible: " + "; ".join(ev.violations)
    elif gap is None:
        statement = "no bound available"
    elif gap <= GAP_TOL:
        statement = f"the design is optimal (gap {gap:.2e} <= {GAP_TOL:g})"
    else:
        better = "higher" if sense == "max" else "lower"
        statement = f"no feasible design beats this one by more than {100 * gap:.3g} % ({better} is better; bound {bound:.10g})"
    cert = {
        "instance": inst.name, "instance_hash": inst.content_hash, "kind": "mapping", "design": d.as_dict(),
        "feasible": ev.feasible, "violations": ev.violations, "sense": sense, "objective_metric": p.objective,
        "objective": ev.objective, "bound": bound, "gap": gap, "statement": statement, "bound_provenance": provenance,
        "metrics": ev.as_dict(),
    }
    if output is not None:
        write_json_atomic(output, cert)
    if as_json:
        emit(cert)
        return
    print_design(console, p, d.as_dict(), ev)
    console.print(f"{sense} {p.objective}: design {ev.objective:.10g}, bound {'-' if bound is None else f'{bound:.10g}'}")
    console.print(f"[{'green' if ev.feasible else 'red'}]{statement}[/]")
    console.print(f"[dim]bound from {provenance['source']} ({provenance.get('solver')}, {provenance.get('status')})[/]")
    if output is not None:
        console.print(f"wrote {output}")
