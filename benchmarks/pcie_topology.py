"""PCIe server topologies for the A100 PCIe's TP traffic, tried and not kept (VALIDATION.md §5.4).

The catalog puts the eight cards of the measured A100 PCIe server in one PCIe domain (ring
all-reduce over PCIe Gen4 x16 at any TP). A typical 8-card PCIe server hangs the cards off PCIe
switches, four (or two) per switch, the switches off the CPU sockets: TP within a switch would
then be faster per byte than TP across switches. Each alternative gives the card a smaller
scale-up domain (the cards of one switch) and sends the traffic between domains over a second
link (the hierarchical all-reduce of model.md eq. 3.17: reduce-scatter inside, all-reduce across,
all-gather inside), re-fits the ampere-pcie family on its fit rows and reports its held-out MAPE
next to the catalog's:

* ``switch-4-pcie``: 4 cards per switch, the switches joined by PCIe Gen4 x16 (through the CPUs);
* ``switch-4-nic``: 4 cards per switch, the traffic between switches on the card's scale-out NIC
  (the catalog's HDR 200 Gb/s);
* ``switch-2-pcie``: 2 cards per switch, joined by PCIe Gen4 x16.

Writes validation/pcie_topology.json.

    python benchmarks/pcie_topology.py [--csv ../shared/validation/measurements.csv]

About a minute on two cores.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from codesign import validate as V
from codesign.jsonio import write_json_atomic

OUT = V.REPO_ROOT / "validation" / "pcie_topology.json"
FAMILY = "ampere-pcie"
CHIP = "a100-pcie-80gb"
TOPOLOGIES: dict[str, dict[str, Any]] = {
    "catalog": {},
    "switch-4-pcie": {"scale_up_domain": 4, "scale_out": "pcie-gen4-x16"},
    "switch-4-nic": {"scale_up_domain": 4},
    "switch-2-pcie": {"scale_up_domain": 2, "scale_out": "pcie-gen4-x16"},
}


@contextmanager
def topology(change: dict[str, Any]) -> Iterator[None]:
    """The validator with the A100 PCIe rows' system changed by ``change``; restored on exit."""
    original = V._system_of

    def system_of(row: V.Row, variant: V.Variant) -> dict[str, Any]:
        system = original(row, variant)
        return {**system, **change} if row.gpu == CHIP else system

    V._system_of = system_of
    try:
        yield
    finally:
        V._system_of = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=V.DEFAULT_MEASUREMENTS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    result: dict[str, dict] = {}
    for name, change in TOPOLOGIES.items():
        with topology(change):
            fit = V.fit_calibration(args.csv, V.DEFAULT_SPLIT, families=[FAMILY], pooled=False)[FAMILY]
        result[name] = {"system": change, **{k: fit[k] for k in ("params", "fit_mape_pct", "held_out_mape_pct",
                                                                  "n_held_out")}}
        print(f"{name:14s} held-out {fit['held_out_mape_pct']:.2f} %  fit {fit['fit_mape_pct']:.2f} %", flush=True)
    write_json_atomic(args.out, {"csv": str(args.csv), "split": str(V.DEFAULT_SPLIT), "family": FAMILY,
                                 "topologies": result, "seconds": time.perf_counter() - t0})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
