"""User reduce ops: registered by name (directly or through ``Partial(reduce_op=op)``), with
their own combine and identity; layouts combine their contributions in canonical order."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simshard as ss
from simshard import Partial, ReduceOp, ShardingError, register_reduce_op
from simshard.sharding.reduce_ops import REDUCE_OPS


def hyp(a, b):
    return np.sqrt(a * a + b * b)


NORM = ReduceOp("test_norm2", hyp, idempotent=False, identity_value=0)


def test_partial_takes_a_user_op_and_names_it():
    p = Partial(NORM)
    assert p.reduce_op == "test_norm2" and str(p) == "P(test_norm2)" and REDUCE_OPS["test_norm2"] is NORM
    assert p == Partial("test_norm2") == ss.parse_placement("Partial(test_norm2)")
    assert register_reduce_op(NORM) is NORM  # again: a no-op


def test_identity_and_reduce_in_order():
    assert NORM.identity(np.float32) == np.float32(0) and NORM.identity(np.float32).dtype == np.float32
    lazy = ReduceOp("test_lazy_id", hyp, idempotent=False, identity_value=lambda dt: np.finfo(dt).tiny)
    assert lazy.identity(np.float64) == np.finfo(np.float64).tiny
    parts = [np.array([3.0, 5.0], np.float32), np.array([4.0, 12.0], np.float32), np.array([0.0, 0.0], np.float32)]
    got = NORM.reduce(parts)
    assert got.dtype == np.float32 and np.array_equal(got, [5.0, 13.0])


def test_layout_assembles_a_user_partial():
    mesh = ss.Mesh({"x": 2})
    spec = ss.DTensorSpec(mesh, [Partial(NORM)])
    L = ss.layout(spec, (2,))
    x = np.array([3.0, 6.0], np.float32)
    shards = L.shard(x)  # the value on the first device, the identity on the other
    assert np.array_equal(shards[1], [0.0, 0.0]) and np.array_equal(L.assemble(shards), x)
    assert np.array_equal(L.assemble({0: np.float32([3, 6]), 1: np.float32([4, 8])}), [5.0, 10.0])


def test_registration_errors():
    with pytest.raises(ShardingError, match="already registered \\(built in\\)"):
        register_reduce_op(ReduceOp("sum", np.add, idempotent=False, identity_value=0))
    with pytest.raises(ShardingError, match="needs an identity_value"):
        register_reduce_op(ReduceOp("test_no_identity", hyp, idempotent=False))
    with pytest.raises(ShardingError, match="already registered;"):
        Partial(ReduceOp("test_norm2", np.add, idempotent=False, identity_value=0))
    with pytest.raises(ShardingError, match="use a Python identifier"):
        register_reduce_op(ReduceOp("a b", hyp, idempotent=False, identity_value=0))
    with pytest.raises(ShardingError, match="unknown-reduce-op"):
        Partial("test_never_registered")


def left_fold(op: ReduceOp, parts):
    """The canonical order written plainly: a copy of the first part, each next combined into it."""
    acc = np.array(parts[0], copy=True)
    for p in parts[1:]:
        op.combine(acc, p, out=acc)
    if op.name == "avg":
        acc = (acc / len(parts)).astype(np.result_type(parts[0]), copy=False)
    return np.asarray(acc, dtype=np.result_type(parts[0]))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["sum", "avg", "prod", "max", "min"]), st.integers(1, 6),
       st.lists(st.integers(0, 5), max_size=3).map(tuple), st.sampled_from(["float32", "float64", "int32"]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_built_in_ops_reduce_bit_for_bit_as_the_left_fold(name, n, shape, dtype, mixed, seed):
    """The first combine writes the accumulator (no copy of the first part): the same bits as the
    fold, for every op, shape (0-d too), dtype, and a later part of a wider dtype."""
    rng = np.random.default_rng(seed)
    parts = [(rng.standard_normal(shape) * 1e3).astype(dtype) for _ in range(n)]
    if mixed and n > 1 and dtype == "float32":
        parts[1] = parts[1].astype(np.float64) / 3  # cast into the first part's dtype, as before
    op = REDUCE_OPS[name]
    got, want = op.reduce(parts), left_fold(op, parts)
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
