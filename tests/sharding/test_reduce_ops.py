"""User reduce ops: registered by name (directly or through ``Partial(reduce_op=op)``), with
their own combine and identity; layouts combine their contributions in canonical order."""

import numpy as np
import pytest

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
