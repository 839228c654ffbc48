"""A TP ring across the two CPU sockets of a PCIe server (model.md eq. 3.17b).

Hand-derived figures. Llama 3.1 70B (hidden 8,192, 80 layers, vocabulary 128,256), 64 sequences,
one decode step, 16-bit activations on the A100 PCIe card's 8-card server (sockets of 4 cards,
cross-socket bandwidth 0.72 of the in-socket path, 31.5 GB/s per direction):

    all-reduce message M = 64 x 8,192 x 2 = 1,048,576 B; two per layer = 160 all-reduces
    logits all-gather of 64 x 128,256 x 2 = 16,416,768 B
    TP 4 (one socket):  160 x 2 x 3/4 x M + 3/4 x 16,416,768 = 251,658,240 + 12,312,576
                        = 263,970,816 B per device, none across the sockets
    TP 8 (both):        160 x 2 x 7/8 x M + 7/8 x 16,416,768 = 293,601,280 + 14,364,672
                        = 307,965,952 B per device, all of them across: timed at the cross-socket
                        pace, 307,965,952 / 0.72 = 427,730,488.9 B of in-socket link time
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from codesign import catalog
from codesign.calibration.engine import evaluate_row, row_instance
from codesign.calibration.rows import Row
from codesign.errors import InputError
from codesign.kinds.grid.spec import Instance, InstanceFile
from codesign.model import network
from codesign.model.calibration import shipped
from codesign.model.evaluate import evaluate
from codesign.model.placement import pattern_cost
from codesign.model.schedule import schedule_table
from codesign.paths import catalog_dir


def test_only_rings_wider_than_a_socket_cross():
    got = network.crosses_sockets(np.array([1.0, 2.0, 4.0, 5.0, 8.0, 16.0]), 8, 4)
    assert np.array_equal(got, [0, 0, 0, 1, 1, 1])
    # beyond the domain only its own ring is on scale-up: a domain of 4 never crosses a socket of 4
    assert np.array_equal(network.crosses_sockets(np.array([8.0, 16.0]), 4, 4), [0.0, 0.0])
    assert np.array_equal(network.crosses_sockets(np.array([8.0]), 8, None), [0.0])


def _row(tp: int) -> Row:
    return Row("s", "llama-3.1-70b", "a100-pcie-80gb", tp, tp, 1, 1, 1, "fp16", 1000, 1000, 64,
                 "output_tokens_per_s", 1.0)


def _bytes(tp: int) -> tuple[float, float]:
    f = schedule_table(row_instance(_row(tp), 64), "main").features
    return float(f["decode.bytes_scale_up"][0]), float(f["decode.bytes_scale_up_cross"][0])


def _one_fabric(monkeypatch) -> None:
    """The A100 PCIe card as if its server had no socket boundary (the catalog read through a copy
    of the chip without its socket fields)."""
    plain = catalog.load_chip("a100-pcie-80gb").model_copy(
        update={"scale_up_socket_size": None, "cross_socket_bandwidth_fraction": None})
    real = catalog.load_chip
    monkeypatch.setattr(catalog, "load_chip", lambda cid: plain if cid == "a100-pcie-80gb" else real(cid))


def test_tp8_crosses_the_sockets_and_tp4_does_not(monkeypatch):
    assert _bytes(8) == (307_965_952, 307_965_952)
    assert _bytes(4) == (263_970_816, 0)
    _one_fabric(monkeypatch)  # one fabric: no byte across
    assert _bytes(8) == (307_965_952, 0)


def test_the_crossing_costs_time_at_the_cross_socket_pace_and_no_energy(monkeypatch):
    """TP 8: the step's scale-up link time is 1 / 0.72 of the one-fabric time, its link energy the
    same (the bytes moved do not change)."""
    m = evaluate_row(_row(8), 64).workload_metrics["main"]
    _one_fabric(monkeypatch)
    x = evaluate_row(_row(8), 64).workload_metrics["main"]
    assert m["energy_per_token_scale_up_J"] > 0
    assert m["energy_per_token_scale_up_J"] == pytest.approx(x["energy_per_token_scale_up_J"], rel=1e-12)
    for ph in ("prefill", "decode"):
        assert x[f"{ph}_step.scale_up_bw_cross_s"] == 0
        link = m[f"{ph}_step.scale_up_bw_s"] + m[f"{ph}_step.scale_up_bw_cross_s"]
        assert link == pytest.approx(x[f"{ph}_step.scale_up_bw_s"] / 0.72, rel=1e-12)
    # by hand, decode: 427,730,488.9 B at 31.5 GB/s x the fitted network efficiency
    eff = shipped().for_chip("a100-pcie-80gb").network_efficiency
    link = m["decode_step.scale_up_bw_s"] + m["decode_step.scale_up_bw_cross_s"]
    assert link == pytest.approx(307_965_952 / 0.72 / (31.5e9 * eff), rel=1e-12)


def _instance(chips: list[str], scale_up: str | None = None) -> Instance:
    raw = {
        "name": "sockets", "description": "t",
        # NCCL's all-reduce: the physics' fastest needs one scale-up link for all chips
        "system": {"devices": 8, "scale_up_domain": 8, "allreduce": "nccl", **({"scale_up": scale_up} if scale_up else {})},
        "hardware": {"family": "catalog", "chip": chips[0], "decisions": {"chip": chips}},
        "workloads": [{"name": "main", "workload": "llama-3.1-70b", "precision": "fp16", "input_tokens": 1000,
                       "output_tokens": 1000, "decisions": {"tp": [4, 8], "batch": [64]}}],
    }
    return Instance(InstanceFile.model_validate(raw), source=None, raw=raw)


def test_an_instance_takes_the_sockets_from_its_chip_and_only_on_the_chips_own_fabric():
    """Solving an A100 PCIe instance prices the socket crossing as validation does; an instance
    that names its own scale-up link (here NVLink 3) does not cross any socket."""
    def cross_s(inst: Instance) -> float:
        ev = evaluate(inst, {**inst.baseline(), "chip": inst.hardware.chip, "tp": 8})
        return ev.workload_metrics["main"]["decode_step.scale_up_bw_cross_s"]

    assert cross_s(_instance(["a100-pcie-80gb"])) > 0
    assert cross_s(_instance(["a100-pcie-80gb"], scale_up="nvlink3")) == 0
    # a chip without sockets beside one with: its hardware column is 0
    assert cross_s(_instance(["a100-sxm-80gb", "a100-pcie-80gb"])) == 0


def test_chips_of_different_socket_sizes_cannot_share_an_instance(monkeypatch):
    other = catalog.load_chip("a100-pcie-80gb").model_copy(update={"scale_up_socket_size": 2})
    real = catalog.load_chip

    def load_chip(cid):
        return other if cid == "h100-pcie" else real(cid)

    monkeypatch.setattr(catalog, "load_chip", load_chip)
    with pytest.raises(InputError) as err:
        evaluate(_instance(["a100-pcie-80gb", "h100-pcie"]), {"chip": "a100-pcie-80gb", "pool_ports": 1, "tp": 8, "pp": 1, "ep": 1, "batch": 64, "weights_tier": "local", "kv_tier": "local"})
    assert "socket" in str(err.value)


def test_placement_prices_the_crossing_like_the_schedule():
    """pattern_cost (eq. P8): one part of t = 8 on a 31.5 GB/s link, M = 1e6 B: 2 x 7/8 x 1e6 /
    31.5e9 = 55.556 us in one socket, / 0.72 = 77.160 us across two; t = 4 is not slowed."""
    pb = SimpleNamespace(tp_message_B=1e6, up_Bps=31.5e9, up_latency_s=0.0, out_Bps=25e9, out_latency_s=0.0,
                         J_per_B_up=0.0, J_per_B_out=0.0, domains=[8], up_socket=4, cross_socket_fraction=0.72)
    t8, _ = pattern_cost(pb, (8,))
    assert t8 == pytest.approx(2 * 7 / 8 * 1e6 / 31.5e9 / 0.72, rel=1e-12)
    t4, _ = pattern_cost(pb, (4,))
    assert t4 == pytest.approx(2 * 3 / 4 * 1e6 / 31.5e9, rel=1e-12)
    pb.up_socket = None
    assert pattern_cost(pb, (8,))[0] == pytest.approx(2 * 7 / 8 * 1e6 / 31.5e9, rel=1e-12)


def test_the_socket_fields_go_together_and_below_the_domain(tmp_path):
    src = (catalog_dir("chips") / "a100-pcie-80gb.toml").read_text()
    cases = {
        "no-fraction": src.replace("cross_socket_bandwidth_fraction = 0.72\n", ""),
        "socket-is-domain": src.replace("scale_up_socket_size = 4", "scale_up_socket_size = 8"),
    }
    for name, text in cases.items():
        p = tmp_path / f"{name}.toml"
        p.write_text(text)
        with pytest.raises(InputError) as err:
            catalog.load_chip(str(p))
        assert "scale_up_socket_size" in str(err.value), name


def test_brute_force_equals_both_solvers_with_the_sockets(solvers_match_brute_force, monkeypatch):
    """The crossing is one more product of a schedule column and a hardware column, so the MIP stays
    an exact compilation of the model: on 8 A100 PCIe cards at TP 8 (PP 1-2, three batches, a TPOT
    budget) brute force, HiGHS and CP-SAT agree with the sockets and without them, the model gives
    the returned design the optimum, and the sockets lower the optimum (a MIP that dropped the
    crossing product would not)."""
    raw = {
        "name": "sockets-exact", "description": "t",
        "system": {"devices": 8, "scale_up_domain": 8},
        "hardware": {"family": "catalog", "chip": "a100-pcie-80gb"},
        "workloads": [{"name": "main", "workload": "llama-3.1-70b", "precision": "fp16", "input_tokens": 1000,
                       "output_tokens": 1000, "tpot_slo_ms": 400.0,
                       "decisions": {"tp": [8], "pp": [1, 2], "batch": [16, 64, 256]}}],
    }
    inst = Instance(InstanceFile.model_validate(raw), source=None, raw=raw)
    with_sockets = solvers_match_brute_force(inst).objective
    _one_fabric(monkeypatch)
    raw = {**raw, "name": "sockets-exact-one-fabric"}  # another instance: nothing computed for the first is reused
    one_fabric = Instance(InstanceFile.model_validate(raw), source=None, raw=raw)
    assert with_sockets < solvers_match_brute_force(one_fabric).objective * 0.95
