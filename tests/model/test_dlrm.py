"""codesign.model.dlrm: bytes per shard, the all-to-all streams, capacity and energy, against
numbers derived by hand from tests/data/tiny-dlrm.toml (batch 4,096, dimension 128 FP32: 512 B
per row, int64 indices; two H100s)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codesign.kinds.registry import load
from codesign.model.dlrm import (
    GATHERED,
    INDEX,
    OUTPUT,
    STORED,
    aggregate,
    costs,
    evaluate,
    parse_design,
)

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny-dlrm.toml"


@pytest.fixture(scope="module")
def pb():
    return load(TINY).model


def design(pb, **tables):
    base = {"C1": ["hbm:0"], "C11": ["hbm:1"], "C21": ["hbm:1"], "C23": ["hbm:0"]}
    return parse_design(pb, {"tables": {**base, **tables}})


def test_bytes_of_one_shard(pb):
    t = pb.table_names.index("C21")  # 40,000,000 rows, 100 lookups per sample
    assert pb.row_B == 512 and pb.batch == 4096
    per = pb.shard(t, 1)
    hbm0, pool0 = 0, pb.labels.index("pool:0:hbm")
    assert per[hbm0, STORED] == 40_000_000 * 512  # 20.48 GB
    assert per[hbm0, GATHERED] == 4096 * 100 * 512  # 51,200 B per sample gathered
    assert per[hbm0, INDEX] == 4096 * 100 * 8
    assert per[hbm0, OUTPUT] == 4096 * 512  # one pooled vector per sample
    assert per[pool0, OUTPUT] == 4096 * 100 * 512  # the appliance does not pool: every row is sent
    half = pb.shard(t, 2)  # a column shard holds half of every row, sees every index
    assert half[hbm0, STORED] == 40_000_000 * 256 and half[hbm0, INDEX] == 4096 * 100 * 8


def test_the_all_to_all_streams(pb):
    """C21 alone on GPU 0 (the others on GPU 1 removed by looking at the difference): GPU 0
    receives the indices of GPU 1's 2,048 samples, 2,048 x 100 x 8 B; it sends the pooled vectors
    of GPU 1's samples, 2,048 x 512 B."""
    t = pb.table_names.index("C21")
    A = np.zeros((len(pb.locations), 4))
    A[0] = pb.shard(t, 1)[0]
    c = costs(pb, A)
    assert c.parts["in.nvlink_s"][0] == pytest.approx(2048 * 100 * 8 * pb.nv_s_per_B, rel=1e-12)
    assert c.parts["out.nvlink_s"][0] == pytest.approx(2048 * 512 * pb.nv_s_per_B, rel=1e-12)
    assert c.parts["lookup.hbm_s"][0] == pytest.approx(4096 * 100 * 512 * pb.locations[0].s_per_B, rel=1e-12)
    # NVLink energy: the bytes that cross, (D-1)/D of the indices and of the pooled vectors
    assert c.energy_J["nvlink_J"][0] == pytest.approx((2048 * 100 * 8 + 2048 * 512) * pb.J_per_B_nv, rel=1e-12)


def test_a_table_spread_over_the_gpus(pb):
    """hbm:* (row-wise over both GPUs): each holds half the rows and gathers half the lookups, and
    sends the partial sums of all 4,096 samples (reduce-scattered)."""
    t = pb.table_names.index("C21")
    j = [lab for lab, _ in pb.spreads].index("hbm:*")
    sp = pb.spread(t, j)
    for d in (0, 1):
        assert sp[d, STORED] == 40_000_000 * 512 / 2
        assert sp[d, GATHERED] == 4096 * 100 * 512 / 2
        assert sp[d, OUTPUT] == 4096 * 512
    assert sp[2:, :].sum() == 0


def test_capacity(pb):
    """C1 and C21 (20.48 GB each) fit one GPU's 40 GiB of HBM alone but not together."""
    cap = pb.locations[0].capacity_B
    assert 20.48e9 < cap < 2 * 20.48e9
    ok = evaluate(pb, design(pb))
    assert ok.feasible
    full = evaluate(pb, design(pb, C21=["hbm:0"]))
    assert not full.feasible and full.violations[0].startswith("capacity of hbm:0")
    A = aggregate(pb, design(pb, C21=["hbm:0"]))
    assert A[0, STORED] == 2 * 40_000_000 * 512 + 590_152 * 512


def test_time_is_the_sum_of_the_three_phases(pb):
    ev = evaluate(pb, design(pb, C1=["pool:0:hbm", "pool:1:hbm"]))
    assert ev.iteration_s == pytest.approx(sum(ev.phases_s.values()), rel=1e-12)
    assert ev.samples_per_s == pytest.approx(4096 / ev.iteration_s, rel=1e-12)
    assert ev.energy_J["appliance_path_J"] > 0
