"""People's views of a DLRM instance: what ``show`` adds to the shared summary, and the locations
and phases of a design."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from codesign.model.dlrm import DlrmEvaluation, DlrmProblem
from codesign.model.units import GiB


def summary(inst: Any, pb: DlrmProblem) -> dict[str, Any]:
    s = inst.spec
    return {
        "workload": s.workload.model_dump(exclude_none=True),
        "tables": [{"name": n, "rows": int(r), "pooling_factor": int(L)} for n, r, L in zip(pb.table_names, pb.rows, pb.pooling, strict=True)],
        "row_B": pb.row_B,
        "stored_B": float(pb.rows.sum() * pb.row_B),
        "lookups_per_sample": int(pb.pooling.sum()),
        "gpus": pb.gpus,
        "column_shards": list(pb.shards),
        "locations": [{"label": x.label, "capacity_B": x.capacity_B, "gather_Bps": 1.0 / x.s_per_B, "J_per_B": x.J_per_B} for x in pb.locations],
        "links": {"nvlink_Bps": 1.0 / pb.nv_s_per_B if pb.nv_s_per_B else None,
                  "appliance_link_Bps": 1.0 / pb.link_s_per_B if pb.link_s_per_B else None,
                  "module_port_Bps": 1.0 / pb.port_s_per_B if pb.port_s_per_B else None,
                  "switch_Bps": 1.0 / pb.switch_s_per_B if pb.switch_s_per_B else None,
                  "paper_mode": pb.paper_mode, "appliance_pools": pb.appliance_pools},
    }


def print_summary(console, data: dict[str, Any]) -> None:
    console.print(f"{len(data['tables'])} tables, {data['lookups_per_sample']} lookups per sample, {data['row_B']:g} B per row, "
                  f"{data['stored_B'] / 1e9:,.2f} GB stored; batch {data['workload']['batch']} on {data['gpus']} GPUs; "
                  f"column shards {data['column_shards']}")
    kinds: dict[str, list[dict[str, Any]]] = {}
    for loc in data["locations"]:
        kinds.setdefault(loc["label"].split(":")[0], []).append(loc)
    t = Table(title="locations")
    for c in ("kind", "count", "capacity GiB each", "gather GB/s each", "pJ/bit"):
        t.add_column(c, justify="right")
    for k, locs in kinds.items():
        x = locs[0]
        t.add_row(k, str(len(locs)), f"{x['capacity_B'] / GiB:,.1f}", f"{x['gather_Bps'] / 1e9:,.1f}", f"{x['J_per_B'] / 8e-12:.2f}")
    console.print(t)
    links = data["links"]
    shown = {k: v for k, v in links.items() if k.endswith("_Bps") and v}
    console.print("links (GB/s): " + ", ".join(f"{k.removesuffix('_Bps')} {v / 1e9:,.1f}" for k, v in shown.items())
                  + ("  [paper assumption: ports and switch not applied]" if links["paper_mode"] else ""))


def print_design(console, pb: DlrmProblem, ev: DlrmEvaluation) -> None:
    t = Table(title="locations used")
    for c in ("location", "stored GiB", "capacity GiB", "gathered GB", "indices GB", "output GB"):
        t.add_column(c, justify="left" if c == "location" else "right")
    for i, loc in enumerate(pb.locations):
        if ev.stored_B[i] > 0:
            t.add_row(loc.label, f"{ev.stored_B[i] / GiB:,.2f}", f"{loc.capacity_B / GiB:,.1f}", f"{ev.gathered_B[i] / 1e9:,.3f}",
                      f"{ev.index_B[i] / 1e9:,.3f}", f"{ev.output_B[i] / 1e9:,.3f}")
    console.print(t)
    ph = ev.phases_s
    console.print(f"iteration {ev.iteration_s * 1e3:.4f} ms = indices in {ph['in_s'] * 1e3:.4f} + lookup {ph['lookup_s'] * 1e3:.4f} "
                  f"+ pooled out {ph['out_s'] * 1e3:.4f} ms; {ev.samples_per_s:,.0f} samples/s")
    console.print("energy per iteration: " + ", ".join(f"{k.removesuffix('_J')} {v:.4g} J" for k, v in ev.energy_J.items())
                  + f"; {ev.energy_per_sample_J * 1e6:.4g} µJ per sample")
