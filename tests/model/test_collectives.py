"""All-reduce algorithms, the fastest choice and the torus (model/collectives.py, model/topology.py;
model.md eqs. 3.14a, 3.17c, 3.17d), with numbers derived by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codesign.errors import InputError
from codesign.kinds.grid.spec import load_instance
from codesign.model import collectives, engines, network, topology
from codesign.model.schedule import schedule_table

M = 1_048_576.0  # 1 MiB


@pytest.mark.parametrize(
    ("name", "n", "timed", "moved", "steps"),
    [
        # ring: 2(n-1)/n M in 2(n-1) steps
        ("ring", 2, M, M, 2), ("ring", 8, 1.75 * M, 1.75 * M, 14),
        # two-shot: the ring's bytes, every peer at once: 2 steps
        ("two-shot", 2, M, M, 2), ("two-shot", 8, 1.75 * M, 1.75 * M, 2),
        # one-shot: the whole message of each of the n-1 others, 1 step
        ("one-shot", 2, M, M, 1), ("one-shot", 8, 7 * M, 7 * M, 1),
        # double binary tree: 2M, 2 ceil(log2 n) steps
        ("tree", 2, 2 * M, 2 * M, 2), ("tree", 8, 2 * M, 2 * M, 6),
        # in the switch: (n+1)/n M moved in 2 steps; timed as the ring below 5 ranks, else at
        # 0.82/0.61 M (NCCL's measured NVLS bus bandwidth on 8 H100)
        ("in-switch", 2, M, 1.5 * M, 2), ("in-switch", 8, 0.82 / 0.61 * M, 1.125 * M, 2),
    ],
)
def test_bytes_and_steps_of_each_algorithm(name: str, n: int, timed: float, moved: float, steps: int) -> None:
    t, mv, s = collectives.ALGORITHM_FUNCTIONS[name](n, M)
    assert (float(t), float(mv), float(s)) == pytest.approx((timed, moved, steps), rel=1e-12)


#: NVLink 4 at the default network efficiency: 1 / (0.8 x 450 GB/s) per byte; 0.5 us per step
S_PER_B = 1.0 / (0.8 * 450e9)
S_STEP = 0.5e-6
ALL = ("ring", "two-shot", "one-shot", "tree")


def test_the_fastest_choice_at_a_small_and_a_large_message() -> None:
    # n = 8. one-shot beats two-shot while 7 M s + 1 step < 1.75 M s + 2 steps, i.e.
    # M < 0.5 us / (5.25 x 2.778 ps) = 34,286 B
    choose = lambda m, names=ALL: names[int(collectives.fastest(names, 8, m, S_PER_B, S_STEP)[3])]  # noqa: E731
    assert choose(16_384) == "one-shot"  # a decode step's 16 KiB: 0.82 us (two-shot 1.08, ring 7.08)
    assert choose(32_768) == "one-shot" and choose(40_960) == "two-shot"
    # 64 MiB: two-shot 327.2 us, ring 333.2, tree 375.8, one-shot 1305; in the switch 251.6 us
    assert choose(64 * M) == "two-shot"
    assert choose(64 * M, (*ALL, "in-switch")) == "in-switch"
    t, _, s, _ = collectives.fastest(ALL, 8, 64 * M, S_PER_B, S_STEP)
    assert float(collectives.time_s(t, s, S_PER_B, S_STEP)) == pytest.approx(1.75 * 64 * M * S_PER_B + 2 * S_STEP)


def test_a_4x4_torus_all_reduce_by_hand() -> None:
    g = topology.torus_graph((4, 4))
    assert g.number_of_nodes() == 16 and topology.links_per_device(g) == 4 and g.number_of_edges() == 32
    group = topology.torus_group((4, 4), 16)
    assert group == topology.TorusGroup((4, 4), (2, 2), 4)
    timed, moved, steps = collectives.torus_ring(group, M)
    # dim 0: reduce-scatter + all-gather of M over 4, 2 x 3/4 M = 1.5 M; dim 1: of M/4, 0.375 M;
    # each on a bidirectional ring, 2 of the device's 4 links: timed at 4/2 = 2x the port's time
    assert (float(moved), float(timed), steps) == (1.875 * M, 3.75 * M, 12)
    # 400 GB/s per device = 100 GB/s per link, 200 GB/s per dimension's ring; 1 us per step:
    # 1.5 MiB / 200 GB/s + 0.375 MiB / 200 GB/s + 12 us = 7.864 + 1.966 + 12 = 21.830 us
    assert float(collectives.time_s(timed, steps, 1 / 400e9, 1e-6)) == pytest.approx(
        1.5 * M / 200e9 + 0.375 * M / 200e9 + 12e-6)
    assert float(collectives.time_s(timed, steps, 1 / 400e9, 1e-6)) == pytest.approx(21.8304e-6, rel=1e-6)
    # TP 8: a 4 x 2 box, the 2-long dimension a line of one link: 1.5 M x 2 + 0.25 M x 4; 6 + 2 steps
    half = topology.torus_group((4, 4), 8)
    assert half == topology.TorusGroup((4, 2), (2, 1), 4)
    t8, m8, s8 = collectives.torus_ring(half, M)
    assert (float(m8), float(t8), s8) == (1.75 * M, 4.0 * M, 8)
    # groups that are no boxes tiling the torus are refused
    assert topology.group_shape((4, 6), 6) is None and topology.torus_reason((4, 6), 6) is not None
    assert topology.group_shape((4, 6), 12) == (4, 3)


BASE = """\
name = "probe"
description = "collectives on a topology"

[system]
devices = {devices}
scale_up_domain = {devices}
{extra}

[hardware]
family = "stacked-3d"

[hardware.decisions]
dram_layers = [4]
tsv_count = [8192]
tsv_pitch_um = [20.0]
compute_area_mm2 = [40.0]
clock_GHz = [1.2]
sram_MiB = [0.5]

[[workloads]]
workload = "llama-3.1-8b"
input_tokens = 128
output_tokens = 32

[workloads.decisions]
tp = [{tp}]
batch = [8]
"""


def write(tmp_path: Path, devices: int, tp: int, extra: str) -> Path:
    path = tmp_path / "probe.toml"
    path.write_text(BASE.format(devices=devices, tp=tp, extra=extra))
    return path


def test_a_torus_instance_prices_its_tp_collectives_per_dimension(tmp_path: Path) -> None:
    inst = load_instance(str(write(tmp_path, 16, 16, 'topology = "torus-2d"\ntorus = [4, 4]')))
    f = schedule_table(inst, inst.workloads[0].name).features
    # decode: 2 x 32 layers of all-reduces of 8 x 4096 x 2 = 65,536 B (timed 3.75 M, moved 1.875 M,
    # 12 steps) and one logits all-gather of 8 x 128,256 x 2 = 2,052,096 B (per dimension: 3/4 and
    # 3/16 of it, timed 2x; 3 + 3 steps)
    ar, lg = 65_536, 2_052_096
    assert f["decode.bytes_scale_up"][0] == 64 * 3.75 * ar + 1.875 * lg == 19_576_320
    assert f["decode.moved_scale_up"][0] == 64 * 1.875 * ar + 0.9375 * lg == 9_788_160
    assert f["decode.steps_scale_up"][0] == f["decode.collective_steps"][0] == 64 * 12 + 6
    assert f["decode.bytes_scale_out"][0] == 0


def test_the_fastest_all_reduce_per_phase(tmp_path: Path) -> None:
    # the 3D family: 500 GB/s at 0.8, 0.5 us per step, no software step. TP 4, n = 4:
    # decode 65,536 B: one-shot 0.99 us (two-shot 1.25, tree 2.33, ring 3.25);
    # prefill 8 x 128 x 4096 x 2 = 8 MiB: two-shot 32.5 us (ring 34.5, tree 43.9, one-shot 63.4)
    inst = load_instance(str(write(tmp_path, 4, 4, 'allreduce = "fastest"')))
    f = schedule_table(inst, inst.workloads[0].name).features
    lg = 2_052_096 * 3 / 4  # the logits all-gather stays a ring: 3/4 of it, 3 steps
    assert f["decode.bytes_scale_up"][0] == 64 * 3 * 65_536 + lg
    assert f["decode.steps_scale_up"][0] == 64 * 1 + 3
    assert f["prefill.bytes_scale_up"][0] == 64 * 1.5 * 8 * 128 * 4096 * 2 + lg
    assert f["prefill.steps_scale_up"][0] == 64 * 2 + 3
    # no engine is the physics: the same choice; NCCL's profile (the TensorRT-LLM engines') keeps
    # the ring: 2(n-1) = 6 steps per all-reduce
    physics = load_instance(str(write(tmp_path, 4, 4, "")))
    assert schedule_table(physics, physics.workloads[0].name).features["decode.steps_scale_up"][0] == 64 * 1 + 3
    nccl = load_instance(str(write(tmp_path, 4, 4, 'allreduce = "nccl"')))
    assert schedule_table(nccl, nccl.workloads[0].name).features["decode.steps_scale_up"][0] == 64 * 6 + 3
    ring, _ = network.ring_allreduce(4, 65_536)
    assert schedule_table(nccl, nccl.workloads[0].name).features["decode.bytes_scale_up"][0] == 64 * ring + lg


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        ('topology = "fully-connected"', "system.topology", "is not modelled"),
        ('topology = "torus-3d"\ntorus = [4, 4]', "system.torus", "3 extents"),
        ('topology = "torus-2d"\ntorus = [2, 4]', "system.torus", "one scale-up fabric"),
        ('topology = "torus-2d"\ntorus = [4, 4]\nallreduce = "one-shot"', "system.allreduce", "torus cannot run"),
        ('allreduce = "nvls"', "system.allreduce", "is not modelled"),
        ('torus = [4, 4]', "system.torus", "no torus"),
    ],
)
def test_a_bad_topology_is_an_input_error_and_exit_2(tmp_path: Path, cli, extra: str, key: str, words: str) -> None:
    path = write(tmp_path, 16, 4, extra)
    with pytest.raises(InputError) as info:
        load_instance(str(path))
    e = info.value
    assert (e.file, e.key) == (str(path), key) and words in str(e) and e.expected and e.suggestion
    r = cli("show", str(path))
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_an_in_switch_all_reduce_needs_switches_that_reduce(tmp_path: Path) -> None:
    path = write(tmp_path, 4, 4, 'allreduce = "in-switch"')  # the 3D family's link does not reduce
    with pytest.raises(InputError, match="switches that reduce") as info:
        load_instance(str(path))
    assert (info.value.file, info.value.key) == (str(path), "system.allreduce")


# --- an engine's all-reduce by message size (vLLM's, instances/catalog/engines/vllm.toml) ---------
def test_vllm_bands_on_b200_at_tp8_by_hand() -> None:
    # custom all-reduce: one stage below 256 KiB, two stages below its 1 MiB max size; PyTorch's
    # symmetric memory (multimem: in the switch) up to 128 MiB inclusive; NCCL beyond
    bands = engines.load_engine("vllm").for_chip("b200", 180).allreduce_bands
    assert dict(bands)[8] == ((262_144, "one-shot"), (1_048_576, "two-shot"), (134_217_729, "in-switch"))
    m = np.array([16_384, 262_144, M, 128 * M, 128 * M + 16])
    timed, moved, steps, nccl = collectives.by_size(bands, 8, m, reduces=True)
    # one-shot: 7 x 16 KiB in 1 step; two-shot at 256 KiB: 2 x 7/8 x 256 KiB in 2 steps; in the
    # switch at 1 MiB and 128 MiB: 0.82/0.61 M timed, 9/8 M moved, 2 steps
    assert list(timed[:4]) == pytest.approx([114_688, 458_752, 0.82 / 0.61 * M, 0.82 / 0.61 * 128 * M], rel=1e-12)
    assert list(moved[:4]) == pytest.approx([114_688, 458_752, 1.125 * M, 1.125 * 128 * M], rel=1e-12)
    assert list(steps) == [1, 2, 2, 2, 0] and list(nccl) == [False, False, False, False, True]
    # at TP 16 (no band) and on switches that do not reduce (no multicast buffer): NCCL
    assert bool(collectives.by_size(bands, 16, 16_384, reduces=True)[3])
    assert list(collectives.by_size(bands, 8, m[:3], reduces=False)[3]) == [False, False, True]


CATALOG = """\
name = "vllm-allreduce"
description = "Llama 3.3 70B at TP 8"

[system]
devices = 8
{extra}

[hardware]
family = "catalog"
chip = "{chip}"

[[workloads]]
workload = "llama-3.3-70b"
precision = "bf16"
input_tokens = 1024
output_tokens = 1024

[workloads.decisions]
tp = [8]
batch = [{batch}]
"""


def _decode(tmp_path: Path, extra: str, chip: str = "b200", batch: int = 1) -> dict:
    path = tmp_path / "v.toml"
    path.write_text(CATALOG.format(extra=extra, chip=chip, batch=batch))
    inst = load_instance(str(path))
    f = schedule_table(inst, inst.workloads[0].name).features
    return {k: float(f[f"decode.{k}"][0]) for k in ("steps_scale_up", "bytes_scale_up", "bytes_scale_up_in_switch")}


def test_vllm_all_reduce_of_llama_70b_on_b200_by_hand(tmp_path: Path) -> None:
    # batch 1: 80 layers x 2 all-reduces of 8,192 x 2 = 16,384 B and one logits all-gather of
    # 128,256 x 2 B (a ring: 7/8 of it, 7 steps). NCCL: 14 ring steps each, 2,247 in all; vLLM:
    # one-shot, 1 step each, 167, and 7 x 16,384 B timed per all-reduce
    lg = 7 / 8 * 128_256 * 2
    nccl = _decode(tmp_path, 'allreduce = "nccl"')
    assert nccl["steps_scale_up"] == 160 * 14 + 7 == 2247
    for extra in ('engine = "vllm"', 'allreduce = "vllm"'):  # the engine's rule, or named by system.allreduce
        got = _decode(tmp_path, extra)
        assert got["steps_scale_up"] == 160 * 1 + 7 == 167
        assert got["bytes_scale_up"] == got["bytes_scale_up_in_switch"] == 160 * 7 * 16_384 + lg
    # batch 32 (512 KiB): two stages on a B200; on an H100 (custom all-reduce below 256 KiB only at
    # TP 8) PyTorch's multimem in the switch: 2 steps each either way, other bytes
    b200, h100 = _decode(tmp_path, 'engine = "vllm"', batch=32), _decode(tmp_path, 'engine = "vllm"', "h100-sxm", 32)
    assert b200["steps_scale_up"] == h100["steps_scale_up"] == 160 * 2 + 7
    assert b200["bytes_scale_up_in_switch"] == pytest.approx(160 * 1.75 * 524_288 + 32 * lg)
    assert h100["bytes_scale_up_in_switch"] == pytest.approx(160 * 0.82 / 0.61 * 524_288 + 32 * lg)


def test_engine_bands_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="malformed engine rule"):  # bounds not ascending
        engines._rules(tmp_path / "e.toml", "", {"allreduce_bands": {"tp8": [[2, "one-shot"], [1, "two-shot"]]}})
    with pytest.raises(InputError, match="malformed engine rule"):  # no such algorithm
        engines._rules(tmp_path / "e.toml", "", {"allreduce_bands": {"tp8": [[2, "nvls"]]}})
    with pytest.raises(InputError, match="fall back to NCCL"):
        engines._rules(tmp_path / "e.toml", "", {"allreduce": "fastest", "allreduce_bands": {"tp8": [[2, "one-shot"]]}})
    path = tmp_path / "v.toml"  # the H100's and B200's bands differ: one instance cannot choose between them
    path.write_text(CATALOG.format(extra='allreduce = "vllm"', chip="b200", batch=1)
                    + '\n[hardware.decisions]\nchip = ["h100-sxm", "b200"]\n')
    with pytest.raises(InputError, match="other size bands"):
        load_instance(str(path))
