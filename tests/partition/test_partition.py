"""ss.partition on traced programs, run on the local executor and checked bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard.errors import ShardingError
from simshard.spmd import Free

from .helpers import exact_values
from .run import run_partitioned

MESH = ss.Mesh({"x": 2, "y": 4})
P = ss.P


def _trace(fn, *args, in_sh=None, out_sh=None, mesh=MESH):
    return ss.propagate(ss.trace(fn, *args, in_shardings=in_sh, out_shardings=out_sh, mesh=mesh))


def _args(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [exact_values(rng, s) for s in shapes]


def test_megatron_mlp_reduce_scatters_into_the_sharded_output():
    args = _args((64, 128), (128, 512), (512, 128))
    prog = _trace(lambda x, w1, w2: np.maximum(x @ w1, 0) @ w2, *args,
                  in_sh=(P("x", None), P(None, "y"), P("y", None)), out_sh=P("x", "y"))
    ran = run_partitioned(prog, args)
    assert ran.kinds() == ["reduce_scatter"]
    assert ran.max_received == 3 * 32 * 32 * 4  # (g-1) chunks of the 32x32 output block


def test_reduction_is_delayed_past_a_linear_op_when_that_moves_less():
    """(x @ w).sum(0) with the contraction sharded: reducing the [8]-vector, not the [64, 8] matrix."""
    args = _args((64, 32), (32, 8))
    prog = _trace(lambda x, w: (x @ w).sum(axis=0), *args, in_sh=(P(None, "y"), P("y", None)), out_sh=P(None))
    ran = run_partitioned(prog, args)
    assert ran.kinds() == ["all_reduce"]
    assert ran.max_received == 2 * 3 * 8 * 4 // 4  # 2(g-1)/g of an [8] float32 vector


def test_reduction_is_delayed_along_a_chain_of_linear_ops():
    """((x @ w) * 0.5 + b).sum(1): the partial sums stay pending through the scaling, the add (b
    made pending locally) and the sum; one all-reduce of the [8] result."""
    args = _args((8, 16), (16, 8), (8, 8))
    fn = lambda x, w, b: ((x @ w) * 0.5 + b).sum(axis=1)  # noqa: E731
    prog = _trace(fn, *args, in_sh=(P(None, "y"), P("y", None), P(None, None)), out_sh=P(None))
    ran = run_partitioned(prog, args, fn(*args))
    assert ran.kinds() == ["all_reduce"]
    assert ran.max_received == 2 * 3 * 8 * 4 // 4
    # a literal added to the partial sums is not linear: the [8, 8] product is reduced first
    fn = lambda x, w, b: ((x @ w) + 1.0).sum(axis=1)  # noqa: E731
    ran = run_partitioned(_trace(fn, *args, in_sh=(P(None, "y"), P("y", None), P(None, None)), out_sh=P(None)), args, fn(*args))
    assert ran.max_received == 2 * 3 * 64 * 4 // 4


def test_pending_value_stays_pending_through_an_add_into_an_unreduced_output():
    m = ss.Mesh({"x": 8})
    args = _args((8, 8), (8, 8), (8, 8))
    out = ss.NamedSharding(m, P(None, None, unreduced=("x",)))
    prog = _trace(lambda a, b, c: a @ b + c, *args, in_sh=(P(None, "x"), P("x", None), P(None, None)), out_sh=out, mesh=m)
    ran = run_partitioned(prog, args)
    assert ran.kinds() == []


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w, b: (x @ w) + 1.0,  # a literal is not a contribution: reduce first
        lambda x, w, b: ((x @ w) + 1.0).sum(axis=1),  # even when delaying would move less
        lambda x, w, b: np.where(b > 0, x @ w, 0.0),  # the identity literal: may stay pending
        lambda x, w, b: np.where(x @ w > 0, b, -b),  # a pending predicate: reduce first
        lambda x, w, b: ((x @ w) * 0.5 + b).sum(axis=1),  # scaled and shifted by a value, then summed
        lambda x, w, b: np.concatenate([x @ w, b], axis=0).sum(axis=0),
    ],
)
def test_ops_on_pending_values_are_exact(fn):
    args = _args((8, 16), (16, 8), (8, 8))
    prog = _trace(fn, *args, in_sh=(P(None, "y"), P("y", None), P(None, None)), out_sh=None)
    run_partitioned(prog, args, fn(*args))


def test_pending_rules():
    from simshard.partition.linear import pending_ok

    assert pending_ok("add", {"__literal1": 1.0}, ["pending", "literal"], "sum") is None
    assert pending_ok("add", {"__literal1": 0.0}, ["pending", "literal"], "sum") == (True, False)
    assert pending_ok("add", {"__literal1": 1.0}, ["pending", "literal"], "max") is None
    assert pending_ok("max", {"__literal1": 1.0}, ["pending", "literal"], "max") == (True, False)
    assert pending_ok("add", {}, ["pending", "value"], "sum") == (True, True)
    assert pending_ok("mul", {}, ["pending", "pending"], "sum") is None
    assert pending_ok("mul", {"__literal1": 3.0}, ["pending", "literal"], "sum") == (True, False)
    assert pending_ok("div", {"__literal1": 4.0}, ["pending", "literal"], "sum") == (True, False)
    assert pending_ok("div", {"__literal1": 10.0}, ["pending", "literal"], "sum") is None
    assert pending_ok("select", {}, ["pending", "value", "value"], "sum") is None
    assert pending_ok("select", {}, ["value", "pending", "value"], "sum") == (False, True, True)
    assert pending_ok("exp", {}, ["pending"], "sum") is None
    assert pending_ok("reduce_max", {}, ["pending"], "max") == (True,)
    assert pending_ok("reduce_max", {}, ["pending"], "sum") is None


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("n", [3, 5, 10])
def test_uneven_reductions_pad_with_the_identity(kind, n):
    """n rows over 4 devices: short and empty blocks; every reduction kind is exact."""
    m = ss.Mesh({"x": 4})
    rng = np.random.default_rng(n)
    x = (rng.choice([1.0, 2.0], size=(n, 6)) * rng.choice([-1, 1], size=(n, 6))).astype(np.float32)
    fn = {"sum": lambda a: a.sum(0), "max": lambda a: a.max(0), "min": lambda a: a.min(0), "prod": lambda a: a.prod(0)}[kind]
    prog = _trace(fn, x, in_sh=P("x", None), out_sh=P(None), mesh=m)
    run_partitioned(prog, [x], fn(x))
    # and reduced over a dim sharded the other way, with the result sharded
    prog = _trace(lambda a: fn(a.T), x, in_sh=P("x", None), out_sh=P(None), mesh=m)
    run_partitioned(prog, [x], fn(x.T))


def test_uneven_elementwise_and_matmul_keep_padding_out_of_results():
    m = ss.Mesh({"x": 4})
    args = _args((10, 6), (6, 7))
    prog = _trace(lambda a, b: np.tanh(a) @ b + 1.0, *args, in_sh=(P("x", None), P(None, "x")), out_sh=P(None, "x"), mesh=m)
    run_partitioned(prog, args)


def test_shard_map_collectives_match_the_reference_region():
    m = ss.Mesh({"x": 2, "y": 4})
    lax = ss.lax

    def body(b):
        s = lax.psum(b, "y")
        g = lax.all_gather(b, "x", axis=1, tiled=True)
        u = lax.all_gather(b, "y", axis=0)  # untiled: a new dim
        r = lax.psum_scatter(b, "y", scatter_dimension=1, tiled=True)
        r2 = lax.psum_scatter(b[:, :4], "y", scatter_dimension=1)  # untiled
        p = lax.ppermute(b, "y", perm=[(0, 1), (1, 2), (2, 3)])  # device 0 of each group receives zeros
        t = lax.all_to_all(b, "y", split_axis=1, concat_axis=0, tiled=True)
        t2 = lax.all_to_all(b[:, :4], "y", split_axis=1, concat_axis=0)  # untiled
        i = lax.axis_index(("x", "y"))
        mx = lax.pmax(b, ("x", "y"))
        return s + mx, g, u, r, r2, t, t2, np.ones(1, np.float32) * i, p

    def f(a):
        return ss.shard_map(body, mesh=m, in_specs=P("x", "y"),
                            out_specs=(P("x", None), P(None, "y"), P(None, "x", "y"), P("x", "y"), P(("x", "y")),
                                       P("x", "y"), P(("x", "y"), None), P(("x", "y")), P("x", "y")))(a)

    args = _args((8, 32))
    prog = _trace(f, *args, in_sh=P("x", "y"), mesh=m)
    run_partitioned(prog, args)


def test_nullary_ops_build_only_their_block():
    m = ss.Mesh({"x": 4})
    c = np.arange(12, dtype=np.float32).reshape(6, 2)

    def f(a):
        return a + np.arange(6, dtype=np.float32)[:, None] + c + np.ones((6, 2), np.float32)

    args = _args((6, 2))
    prog = _trace(f, *args, in_sh=P("x", None), out_sh=P("x", None), mesh=m)
    ran = run_partitioned(prog, args)
    assert ran.kinds() == []


def test_two_meshes_over_the_same_devices():
    a = ss.Mesh({"x": 2, "y": 4}, name="a")
    b = ss.Mesh({"y": 4, "x": 2}, [0, 4, 1, 5, 2, 6, 3, 7], name="b")

    def f(u, v):
        w = ss.with_sharding_constraint(u * 2.0, ss.NamedSharding(b, P("y", "x")))
        return w + v

    args = _args((8, 8), (8, 8))
    prog = ss.propagate(ss.trace(f, *args, in_shardings=(ss.NamedSharding(a, P("x", "y")), ss.NamedSharding(b, P("y", "x"))),
                                 out_shardings=ss.NamedSharding(a, P(None, "y"))))
    run_partitioned(prog, args)


def test_a_traced_program_is_propagated_first_and_a_half_sharded_one_refused():
    args = _args((8, 8))
    prog = ss.trace(lambda x: x * 2.0, *args, in_shardings=P("x", None), mesh=MESH)
    spmd = ss.partition(prog)  # no shardings at all: propagated with ss.propagate
    assert spmd.in_shardings[0].dims[0].axes
    full = ss.propagate(prog)
    partial = full.with_shardings({full.inputs[0]: full.shardings[full.inputs[0]]})
    with pytest.raises(ShardingError, match="ss.propagate"):
        ss.partition(partial)


def test_every_device_runs_the_same_instruction_ids_and_frees_dead_buffers():
    args = _args((64, 128), (128, 512), (512, 128))
    prog = _trace(lambda x, w1, w2: np.maximum(x @ w1, 0) @ w2, *args,
                  in_sh=(P("x", None), P(None, "y"), P("y", None)), out_sh=P(None, None))
    spmd = ss.partition(prog)
    ids = {tuple(i.id for i in s.instrs) for s in spmd.schedules}
    assert len(ids) == 1
    s0 = spmd.schedule(0)
    freed = {b for i in s0.instrs if isinstance(i, Free) for b in i.bufs}
    written = {b for i in s0.instrs for b in i.writes()} | set(s0.inputs)
    assert written - freed == set(s0.outputs)
    back = type(s0).from_bytes(s0.to_bytes())
    assert back.to_bytes() == s0.to_bytes()


def test_explicit_mode_program():
    m = ss.Mesh({"x": 2, "y": 4}, axis_types=ss.AxisType.Explicit)
    args = _args((8, 16), (16, 8))

    def f(x, w):
        y = ss.numpy.matmul(x, w, out_sharding=P("x", None))
        return ss.reshard(y * 2.0, P(None, "y"))

    with ss.use_mesh(m):
        prog = ss.trace(f, *args, in_shardings=(P("x", "y"), P("y", None)))
    run_partitioned(prog, args)
