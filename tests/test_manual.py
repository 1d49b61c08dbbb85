"""Manual regions: shard_map bodies with explicit collectives, evaluated device by device."""

import numpy as np
import pytest

import simshard as ss
from simshard.manual import all_gather, all_to_all, axis_index, pmax, pmin, ppermute, psum, psum_scatter, shard_map
from simshard.tracing.tracer import TraceError, jit

MESH = ss.Mesh({"x": 2, "y": 4})
A = np.arange(64.0).reshape(8, 8) - 20


def run(body, in_specs, out_specs, *args, check_rep=True):
    return jit(shard_map(body, mesh=MESH, in_specs=in_specs, out_specs=out_specs, check_rep=check_rep))(*args)


def test_psum_of_local_matmuls_is_the_matmul():
    b = np.arange(16.0).reshape(8, 2)
    out = run(lambda a, b: psum(a @ b, "y"), (ss.P("x", "y"), ss.P("y", None)), ss.P("x", None), A, b)
    assert np.array_equal(out, A @ b)


@pytest.mark.parametrize("coll, ref", [(pmax, np.max), (pmin, np.min)])
def test_pmax_pmin_over_both_axes(coll, ref):
    out = run(lambda a: coll(a.max(axis=0, keepdims=True) if False else a, ("x", "y")), ss.P("x", "y"), ss.P(), np.full((2, 4), 0.0) + np.arange(8.0).reshape(2, 4))
    assert out.shape == (1, 1) and out[0, 0] == ref(np.arange(8.0))


def test_all_gather_tiled_and_untiled():
    g = run(lambda a: all_gather(a, "y", axis=1, tiled=True), ss.P("x", "y"), ss.P("x", None), A)
    assert np.array_equal(g, A)
    s = run(lambda a: all_gather(a, "x", axis=0), ss.P("x", None), ss.P(None, None, None), A)
    assert s.shape == (2, 4, 8) and np.array_equal(s.reshape(8, 8), A)


def test_psum_scatter_sums_then_scatters():
    out = run(lambda a: psum_scatter(a, "y", scatter_dimension=1, tiled=True), ss.P(), ss.P(None, "y"), A)
    assert np.array_equal(out, 4 * A)


def test_ppermute_ring_shift_and_missing_sources_get_zeros():
    shift = run(lambda a: ppermute(a, "y", [(i, (i + 1) % 4) for i in range(4)]), ss.P(None, "y"), ss.P(None, "y"), A)
    assert np.array_equal(shift, np.roll(A, 2, axis=1))
    half = run(lambda a: ppermute(a, "y", [(0, 1)]), ss.P(None, "y"), ss.P(None, "y"), A)
    assert np.array_equal(half[:, 2:4], A[:, 0:2]) and not half[:, 0:2].any() and not half[:, 4:].any()


def test_ring_all_reduce_written_with_ppermute_equals_psum():
    def ring(a):
        acc, buf = a, a
        for _ in range(3):
            buf = ppermute(buf, "y", [(i, (i + 1) % 4) for i in range(4)])
            acc = acc + buf
        return acc

    x = np.arange(32.0).reshape(8, 4)
    # a ring of ppermutes replicates its result, which no static rule sees (as in JAX): check_rep=False
    out = run(ring, ss.P(None, "y"), ss.P(), x, check_rep=False)
    assert np.array_equal(out, x.reshape(8, 4, 1).sum(axis=1))


def test_all_to_all_moves_the_sharded_dim():
    out = run(lambda a: all_to_all(a, "y", 1, 0, tiled=True), ss.P("y", None), ss.P(None, "y"), A)
    assert np.array_equal(out, A)
    x = np.arange(32.0).reshape(8, 4)
    once = run(lambda a: all_to_all(a, "y", 1, 0), ss.P("y", None), ss.P("y", None), x)
    assert once.shape == (16, 2)
    # device j receives column j of every source block, stacked by source
    assert np.array_equal(once[:4], x[:, 0].reshape(4, 2))
    back = run(lambda a: all_to_all(all_to_all(a, "y", 1, 0), "y", 0, 1), ss.P("y", None), ss.P("y", None), x)
    assert np.array_equal(back, x)


def test_axis_index_names_each_device():
    out = run(lambda a: a * 0 + axis_index(("x", "y")), ss.P("x", "y"), ss.P("x", "y"), np.zeros((2, 4)))
    assert out.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_region_listing_shows_the_body():
    p = jit(shard_map(lambda a: psum(a, "x"), mesh=MESH, in_specs=ss.P("x"), out_specs=ss.P())).trace(A)
    text = p.pretty()
    assert "shard_map(" in text and "psum(" in text and "f64[4,8]" in text


def test_replication_claim_is_checked():
    with pytest.raises(ss.ShardingError, match="replication-check"):  # at trace time (check_rep)
        run(lambda a: a, ss.P("x"), ss.P(), A)  # the blocks differ but out_specs says replicated
    with pytest.raises(ss.ReplicaMismatchError):  # unchecked, the run's assembly still refuses it
        run(lambda a: a, ss.P("x"), ss.P(), A, check_rep=False)


def test_errors():
    with pytest.raises(ss.ShardingError, match="not divisible"):
        run(lambda a: a, ss.P("y"), ss.P("y"), np.zeros((6, 2)))
    with pytest.raises(ss.ShardingError, match="only works inside shard_map"):
        psum(np.zeros(2), "x")
    with pytest.raises(ss.ShardingError, match='axis "q"'):
        run(lambda a: psum(a, "q"), ss.P(), ss.P(), A)
    with pytest.raises(ss.ShardingError, match="permutation"):
        run(lambda a: ppermute(a, "y", [(0, 1), (2, 1)]), ss.P(), ss.P(), A)
    with pytest.raises(TraceError, match="all_to_all"):
        run(lambda a: all_to_all(a, "y", 1, 0), ss.P(), ss.P(), A)


def test_ss_run_takes_a_shard_map_function_without_input_shardings():
    # regression: propagation found no mesh (only the shard_map op names one), and verification
    # ran the per-device body (functools.wraps' __wrapped__) on the global arrays, where psum fails
    b = np.arange(16.0).reshape(8, 2)
    f = shard_map(lambda a, b: psum(a @ b, "y"), mesh=MESH, in_specs=(ss.P("x", "y"), ss.P("y", None)),
                  out_specs=ss.P("x", None))
    for g in (f, jit(f)):
        res = ss.run(g, A, b, mesh=MESH, backend="local")
        assert res.verify.bitwise and np.array_equal(res.outputs, A @ b)
    assert jit(f).trace(A, b).input_names == ("a", "b")  # names still come from the body's parameters


# -- check_rep: replication checked at trace time (issue 11) --------------------------------------------
def test_out_specs_claiming_a_replication_the_body_lacks_is_named_at_trace_time():
    mesh = ss.Mesh({"x": 2, "y": 2})
    a = np.arange(16, dtype=np.float32).reshape(4, 4)

    def partial_sums(x):
        return x.sum(0, keepdims=True)

    bad = shard_map(partial_sums, mesh=mesh, in_specs=ss.P("x", "y"), out_specs=ss.P(None, "y"))
    with pytest.raises(ss.ShardingError) as err:
        ss.trace(bad, a)
    msg = str(err.value)
    assert err.value.rule == "replication-check" and err.value.axis == "x"
    assert "region 'partial_sums': output 0" in msg and 'a psum (or all_gather) over "x" is likely missing' in msg


def test_collectives_make_values_replicated_or_varying():
    from simshard.manual import all_gather, axis_index, ppermute, psum_scatter

    mesh = ss.Mesh({"x": 2})
    a = np.arange(8, dtype=np.float32)
    ok = [
        (lambda x: psum(x, "x"), ss.P()),
        (lambda x: all_gather(x, "x", tiled=True), ss.P()),
        (lambda x: psum_scatter(psum(x, "x"), "x", tiled=True), ss.P("x")),
        (lambda x: x * 0 + axis_index("x"), ss.P("x")),
    ]
    for body, out in ok:
        assert ss.run(shard_map(body, mesh=mesh, in_specs=ss.P("x"), out_specs=out), a, mesh=mesh,
                      backend="local").verify.bitwise
    lying = [lambda x: ppermute(psum(x, "x"), "x", [(0, 1), (1, 0)]), lambda x: x * 0 + axis_index("x")]
    for body in lying:
        with pytest.raises(ss.ShardingError, match="replication-check"):
            ss.trace(shard_map(body, mesh=mesh, in_specs=ss.P("x"), out_specs=ss.P()), a)
    # the check can be turned off, as in JAX (the run then assembles what the devices hold)
    ss.trace(shard_map(lying[1], mesh=mesh, in_specs=ss.P("x"), out_specs=ss.P(), check_rep=False), a)
