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
    tp: int = 1,
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
        tp: devices per stage (tensor parallelism inside a stage; the devices above are stages).
        name: instance name (default: derived from the sizes).
    """
    if devices < 1 or modules < 0 or tp < 1:
        raise ValueError("need devices >= 1, modules >= 0 and tp >= 1")
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
                **({"tp": tp} if tp > 1 else {}),
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


#: the chips a joint instance's stage groups choose from (Hopper and Blackwell, 700 W and 1,000 W)
JOINT_CHIPS = ("h100-sxm", "h200-sxm", "b200")


def generate_joint(
    *,
    devices: int = 8,
    groups: int = 4,
    chips: tuple[str, ...] = JOINT_CHIPS,
    workload: str = "dense-1t",
    layers: int | None = None,
    modules: int | list[int] = 8,
    ports: int | list[int] = 1,
    host_GiB: float = 0.0,
    tiers: tuple[str, ...] = ("local", "host", "pool"),
    batch_per_stage: int = 8,
    context_tokens: int = 8192,
    power_W_per_device: float | None = 875.0,
    tpot_s: float | None = None,
    port_static_power_W: float = 5.04,
    objective: str = "energy_per_token_J",
    tp: int = 1,
    name: str | None = None,
) -> dict[str, Any]:
    """A joint (hardware and mapping) pipeline instance (formulations/mapping.md §4): ``devices``
    stages in ``groups`` consecutive groups of near-equal size, each group's chip a decision over
    ``chips`` (``len(chips) ** groups`` chip assignments), optionally the module count and the ports
    per device as decisions too (lists), under a provisioned-power envelope of
    ``power_W_per_device x devices`` (875 W: at most half the devices on 1,000 W chips when the
    others take 700 W ones) and an optional tpot budget. ``tp`` devices form each stage (tensor
    parallelism inside a stage): ``devices / tp`` stages, so a single pipeline serves up to
    ``layers x tp`` devices (256 for dense-1t at tp 2).

    The mapping is :func:`generate_mapping`'s (a single pipeline, so ``devices`` is at most the
    workload's layer count); the lasers' static power defaults to the Photonic Fabric Link's 5.04 W
    per lit port (as in the named joint instances).
    """
    if tp < 1 or devices % tp:
        raise ValueError(f"need tp >= 1 dividing the devices, got devices {devices}, tp {tp}")
    stages = devices // tp
    if not 1 <= groups <= stages:
        raise ValueError("need 1 <= groups <= devices / tp (stages)")
    data = generate_mapping(devices=stages, modules=max(modules) if isinstance(modules, list) else modules,
                            layers=layers, workload=workload, chips=tuple(f"g{i}" for i in range(groups)), ports=1,
                            host_GiB=host_GiB, batch_per_stage=batch_per_stage, context_tokens=context_tokens,
                            weights=tiers, kv=tiers, objective=objective, tpot_s=tpot_s, tp=tp,
                            name=name or f"joint-{workload}-{devices}d-{groups}g" + (f"-tp{tp}" if tp > 1 else ""))
    for g in data["devices"]:  # the placeholder chip ids above only named and sized the groups
        g["name"], g["chip"] = g["chip"], list(chips) if len(chips) > 1 else chips[0]
        g["pool_ports"] = ports if "appliance" in data else 0
    if "appliance" in data:
        data["appliance"]["modules"] = modules
        data["appliance"]["port_static_power_W"] = port_static_power_W
    if power_W_per_device is not None:
        data.setdefault("budgets", {})["power_W"] = power_W_per_device * devices
    stages_text = f"{stages} pipeline stages of {tp} devices" if tp > 1 else f"{devices} pipeline stages"
    data["description"] = (f"generated joint instance: {workload} over {stages_text} in {groups} groups, "
                           f"each group's chip one of {', '.join(chips)}; modules {modules}, ports {ports}")
    data["provenance"] = ("codesign.kinds.mapping.generate.generate_joint; figures from the catalog (chips, Photonic "
                          "Fabric appliance); 5.04 W per lit port as in the named joint instances")
    return data
