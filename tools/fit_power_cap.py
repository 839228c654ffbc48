#!/usr/bin/env python3
"""Fit the DVFS model of a power cap (codesign/model/power_cap.py, eq. 3.20d) on public power-limit
measurements and check it on held-out ones: the held-out error first.

The measurements (instances/catalog/power/zeus_power_limit.csv) are the Zeus NSDI'23 power traces:
per GPU (V100, P100, RTX 6000, A40), workload and power limit, the time of one training epoch and
the average power; each workload at its largest batch size. Per series, throughput(cap) /
throughput(max limit) = t(max) / t(cap) is compared with the model's clock fraction r(cap), the
series' own draw at the max limit taking TDP's place as the full-clock power (a workload that draws
less than the cap loses nothing). Grid search over (static fraction, exponent, knee) minimising the
mean absolute relative error on the training GPUs; A40 held out.

    python tools/fit_power_cap.py            # fit, print held-out and training errors
"""

from __future__ import annotations

import csv
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codesign.model.power_cap import Dvfs, clock_fraction, load_power_limits  # noqa: E402
from codesign.paths import catalog_dir  # noqa: E402

HELD_OUT = ("A40",)
GRID = {
    "static_fraction": np.round(np.arange(0.0, 0.401, 0.02), 2),
    "exponent": np.round(np.arange(1.0, 4.001, 0.1), 1),
    "knee_clock_fraction": np.round(np.arange(0.30, 1.001, 0.05), 2),
}


def points() -> dict[str, np.ndarray]:
    """Capped points: gpu, cap, max limit, the series' draw at the max limit, measured relative
    throughput."""
    with open(catalog_dir("power") / "zeus_power_limit.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    key = ("gpu", "dataset", "network", "batch_size", "optimizer")
    tdp = {}
    for r in rows:
        tdp[r["gpu"]] = max(tdp.get(r["gpu"], 0.0), float(r["power_limit_W"]))
    top = {tuple(r[k] for k in key): r for r in rows if float(r["power_limit_W"]) == tdp[r["gpu"]]}
    out: dict[str, list] = {"gpu": [], "cap_W": [], "tdp_W": [], "full_W": [], "relative": []}
    for r in rows:
        cap, ref = float(r["power_limit_W"]), top[tuple(r[k] for k in key)]
        if cap == tdp[r["gpu"]]:
            continue
        out["gpu"].append(r["gpu"])
        out["cap_W"].append(cap)
        out["tdp_W"].append(tdp[r["gpu"]])
        out["full_W"].append(float(ref["average_power_W"]))
        out["relative"].append(float(ref["time_per_epoch_s"]) / float(r["time_per_epoch_s"]))
    return {k: np.array(v) for k, v in out.items()}


def mape(p: dict[str, np.ndarray], dvfs: Dvfs, mask: np.ndarray) -> float:
    """Mean absolute relative error of the predicted relative throughput on the masked points."""
    pred = clock_fraction(p["cap_W"][mask], p["full_W"][mask], p["tdp_W"][mask], dvfs)
    meas = p["relative"][mask]
    return float(np.mean(np.abs(pred - meas) / meas))


def with_params(s: float, a: float, k: float) -> Dvfs:
    base = load_power_limits().dvfs
    return base.model_copy(update={"static_fraction": float(s), "exponent": float(a), "knee_clock_fraction": float(k)})


def fit(p: dict[str, np.ndarray], train: np.ndarray) -> tuple[float, Dvfs]:
    """The grid point of least training MAPE (ties: the first in grid order)."""
    best: tuple[float, Dvfs] | None = None
    for s, a, k in itertools.product(*GRID.values()):
        d = with_params(s, a, k)
        e = mape(p, d, train)
        if best is None or e < best[0] - 1e-12:
            best = (e, d)
    assert best is not None
    return best


def main() -> None:
    p = points()
    held = np.isin(p["gpu"], HELD_OUT)
    err, d = fit(p, ~held)
    print(f"held-out ({', '.join(HELD_OUT)}, {held.sum()} points): MAPE {mape(p, d, held):.4f}")
    half = held & (p["cap_W"] >= 0.5 * p["tdp_W"])
    print(f"held-out, caps >= 50 % of the max limit ({half.sum()} points): MAPE {mape(p, d, half):.4f}")
    print(f"training ({(~held).sum()} points): MAPE {err:.4f}")
    print(f"fitted: static_fraction = {d.static_fraction}, exponent = {d.exponent}, "
          f"knee_clock_fraction = {d.knee_clock_fraction}")
    for gpu in sorted(set(p["gpu"])):
        m = p["gpu"] == gpu
        _, dg = fit(p, ~m)
        print(f"  leave {gpu} out: held-out MAPE {mape(p, dg, m):.4f} (s={dg.static_fraction}, "
              f"a={dg.exponent}, k={dg.knee_clock_fraction})")


if __name__ == "__main__":
    main()
