"""programs/shard_map_ring.py: a ring all-reduce of ppermute steps against psum, in bytes and in
bits. N = one device's [8, 16] float32 block = 512 B on the default ring of g = 8."""

import numpy as np
import pytest

import simshard as ss
from simshard import programs
from simshard.programs import shard_map_ring as ring

G = 8
N = (ring.ROWS // G) * ring.COLS * 4


def permutes_and_bytes(res):
    return len({r.instr for r in res.comm.records if r.kind == "collective_permute"}), res.comm.total_bytes


@pytest.mark.parametrize("strategy", ["ring", "naive_ring", "psum"])
def test_every_strategy_is_the_numpy_block_sum(run_strategy, strategy):
    res = run_strategy("shard_map_ring", strategy)
    (a,) = programs.load("shard_map_ring").inputs()
    assert np.array_equal(res.outputs, ring.block_sum(a, G))


def test_ring_moves_exactly_what_psum_moves_in_2g_minus_2_steps(run_strategy):
    # 2(g-1) steps, each device sending one N/g chunk per step: 2(g-1)/g * N per device
    assert permutes_and_bytes(run_strategy("shard_map_ring", "ring")) == (2 * (G - 1), G * 2 * (G - 1) * N // G)
    psum = run_strategy("shard_map_ring", "psum")
    assert [(r["kind"], r["collectives"]) for r in psum.comm.summary("kind")] == [("all_reduce", 1)]
    assert psum.comm.total_bytes == G * 2 * (G - 1) * N // G == 7168


def test_naive_ring_moves_g_over_2_times_more(run_strategy):
    assert permutes_and_bytes(run_strategy("shard_map_ring", "naive_ring")) == (G - 1, G * (G - 1) * N)  # 28672


def test_the_ring_follows_the_mesh():
    prog = programs.load("shard_map_ring")
    (a,) = prog.inputs()
    for mesh, g in (({"x": 4}, 4), ({"x": 2, "y": 4}, 8)):
        res = prog.run("ring", mesh=mesh, backend="local", check_ops=False)
        n = (ring.ROWS // g) * ring.COLS * 4
        assert np.array_equal(res.outputs, ring.block_sum(a, g))
        assert permutes_and_bytes(res) == (2 * (g - 1), 2 * (g - 1) * n)


def test_with_arbitrary_floats_only_the_naive_ring_disagrees_between_devices():
    prog = programs.load("shard_map_ring")
    mesh = prog.mesh_for("ring")
    a = np.random.default_rng(0).standard_normal((ring.ROWS, ring.COLS)).astype(np.float32)
    for name in ("ring", "psum"):  # each chunk reduced once, then copied: replicas agree
        assert ss.run(prog.strategy(name).build(mesh), a, mesh=mesh, backend="local", check_ops=False).verify.bitwise
    with pytest.raises(ss.ReplicaMismatchError):
        ss.run(prog.strategy("naive_ring").build(mesh), a, mesh=mesh, backend="local", check_ops=False)
