"""Instance generator for mapping instances (``codesign generate mapping ...``).

:func:`generate_mapping` returns a TOML-able dict that :func:`codesign.kinds.mapping.spec.mapping_from_data`
accepts; the benchmark scales devices, modules and layers with it.
"""

from __future__ import annotations

from typing import Any


def generate_mapping(
    *,
    devices: int = 4,
    modules: int = 4,
    layers: int | None = None,
    workload: str = "llama-3.1-405b",
    chips: tuple[str, ...] = ("h100-sxm",),
    ports: int = 1,
    host_GiB: float = 0.0,
    batch_per_stage: int = 16,
    context_tokens: int = 8192,
    precision: str = "fp8",
    weights: tuple[str, ...] = ("local", "pool"),
    kv: tuple[str, ...] = ("local", "pool"),
    objective: str = "tokens_per_s",
    assumed_device_bandwidth_GBps: float | None = None,
    max_devices_per_module: int | None = None,
    tpot_s: float | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """A pipelined-decode mapping instance.

    Args:
        devices: pipeline stages (devices); with several ``chips`` they are split into groups
            of near-equal size in the given order (a heterogeneous pipeline).
        modules: Photonic Fabric modules used (1..16); 0 = no appliance.
        layers: decoder layers served (default: the whole model).
        workload: a catalog workload whose layers are all alike.
        chips: catalog chip ids, one group each.
        ports: optical ports per device (modules each device may attach to).
        host_GiB: host memory per device (0: no host tier; 'host' is then dropped from the tiers).
        batch_per_stage: micro-batch size m; the batch is m x devices.
        context_tokens: cached tokens per sequence.
        precision: weights and KV precision.
        weights, kv: tier kinds allowed ("local", "host", "pool").
        objective: "tokens_per_s" or "energy_per_token_J".
        assumed_device_bandwidth_GBps: the paper's per-device pooled bandwidth (ports ignored).
        max_devices_per_module: devices that may share one module port.
        tpot_s: time-per-output-token budget.
        name: instance name (default: derived from the sizes).
    """
    if devices < 1 or modules < 0:
        raise ValueError("need devices >= 1 and modules >= 0")
    groups = []
    per, extra = divmod(devices, len(chips))
    for i, chip in enumerate(chips):
        count = per + (1 if i < extra else 0)
        if count:
            groups.append({
                "name": chip.replace(".", "-") if len(chips) > 1 else "dev",
                "chip": chip,
                "count": count,
                "pool_ports": ports if modules else 0,
                "host_capacity_GiB": float(host_GiB),
            })
    tiers_w = [t for t in weights if (t != "pool" or modules) and (t != "host" or host_GiB > 0)]
    tiers_k = [t for t in kv if (t != "pool" or modules) and (t != "host" or host_GiB > 0)]
    label = name or f"gen-{workload}-{devices}d-{modules}m" + (f"-{layers}l" if layers else "")
    data: dict[str, Any] = {
        "name": label,
        "kind": "mapping",
        "description": f"generated: {workload} over {devices} devices ({', '.join(chips)}), {modules} pooled modules",
        "provenance": "codesign.kinds.mapping.generate.generate_mapping; figures from the catalog (chips, Photonic Fabric appliance)",
        "workload": {
            "workload": workload,
            "precision": precision,
            "batch": batch_per_stage * devices,
            "context_tokens": context_tokens,
        },
        "devices": groups,
        "tiers": {"weights": tiers_w, "kv": tiers_k},
        "objective": {"metric": objective},
    }
    if layers is not None:
        data["workload"]["layers"] = layers
    if modules:
        app: dict[str, Any] = {"id": "photonic-fabric-appliance", "medium": "photonic", "modules": modules}
        if assumed_device_bandwidth_GBps is not None:
            app["assumed_device_bandwidth_GBps"] = assumed_device_bandwidth_GBps
        if max_devices_per_module is not None:
            app["max_devices_per_module"] = max_devices_per_module
        data["appliance"] = app
    if tpot_s is not None:
        data["budgets"] = {"tpot_s": tpot_s}
    return data
