"""A TP ring across the two CPU sockets of a PCIe server (model.md eq. 3.17b, VALIDATION.md §5.14).

Hand-derived figures. Llama 3.1 70B (hidden 8,192, 80 layers, vocabulary 128,256), 64 sequences,
one decode step, 16-bit activations on the A100 PCIe card's 8-card server (sockets of 4 cards,
cross-socket bandwidth 0.72 of the in-socket path):

    all-reduce message M = 64 x 8,192 x 2 = 1,048,576 B; two per layer = 160 all-reduces
    logits all-gather of 64 x 128,256 x 2 = 16,416,768 B
    TP 4 (one socket):  160 x 2 x 3/4 x M + 3/4 x 16,416,768 = 251,658,240 + 12,312,576
                        = 263,970,816 B moved per device and as many timed
    TP 8 (both):        160 x 2 x 7/8 x M + 7/8 x 16,416,768 = 293,601,280 + 14,364,672
                        = 307,965,952 B moved; timed at the cross-socket pace
                        307,965,952 / 0.72 = 427,730,488.9 B of in-socket link time
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from codesign import catalog
from codesign import validate as V
from codesign.errors import InputError
from codesign.model import network
from codesign.model.placement import pattern_cost
from codesign.model.schedule import schedule_table
from codesign.paths import catalog_dir


def test_only_rings_wider_than_a_socket_slow_down():
    got = network.socket_slowdown(np.array([1.0, 2.0, 4.0, 5.0, 8.0, 16.0]), 8, 4, 0.72)
    assert np.allclose(got, [1, 1, 1, 1 / 0.72, 1 / 0.72, 1 / 0.72], rtol=1e-15, atol=0)
    # beyond the domain only its own ring is on scale-up: a domain of 4 never crosses a socket of 4
    assert np.array_equal(network.socket_slowdown(np.array([8.0, 16.0]), 4, 4, 0.72), [1.0, 1.0])
    assert np.array_equal(network.socket_slowdown(np.array([8.0]), 8, None, 0.72), [1.0])


def _bytes(tp: int, variant: V.Variant) -> tuple[float, float]:
    r = V.Row("s", "llama-3.1-70b", "a100-pcie-80gb", tp, tp, 1, 1, 1, "fp16", 1000, 1000, 64,
              "output_tokens_per_s", 1.0)
    f = schedule_table(V.row_instance(r, 64, variant), "main").features
    return float(f["decode.bytes_scale_up"][0]), float(f["decode.moved_scale_up"][0])


def test_tp8_on_the_pcie_server_is_timed_at_the_cross_socket_pace():
    timed, moved = _bytes(8, V.MODEL)
    assert moved == 307_965_952
    assert timed == pytest.approx(307_965_952 / 0.72, rel=1e-12)
    # the ablation: one fabric, every byte at the in-socket pace
    assert _bytes(8, V.Variant("x", one_socket=True)) == (307_965_952, 307_965_952)


def test_tp4_stays_inside_one_socket():
    assert _bytes(4, V.MODEL) == (263_970_816, 263_970_816)


def test_the_energy_counts_the_bytes_moved_not_the_time():
    """The cross-socket pace costs time, not bytes: the link energy per token is the same with and
    without the socket boundary, the link time 1 / 0.72 of it."""
    r = V.Row("s", "llama-3.1-70b", "a100-pcie-80gb", 8, 8, 1, 1, 1, "fp16", 1000, 1000, 64,
              "output_tokens_per_s", 1.0)
    m = V.evaluate_row(r, 64, V.MODEL).workload_metrics["main"]
    x = V.evaluate_row(r, 64, V.Variant("x", one_socket=True)).workload_metrics["main"]
    assert m["energy_per_token_scale_up_J"] > 0
    assert m["energy_per_token_scale_up_J"] == pytest.approx(x["energy_per_token_scale_up_J"], rel=1e-12)
    for ph in ("prefill", "decode"):
        assert m[f"{ph}_step.scale_up_bw_s"] == pytest.approx(x[f"{ph}_step.scale_up_bw_s"] / 0.72, rel=1e-12)


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
