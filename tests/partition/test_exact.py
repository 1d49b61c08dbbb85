"""Values laid out as only placement lists state (simshard/partition/exact.py): ops run where the
data lies when they are functorial over what each device holds, and reshard through the planner
otherwise; always bitwise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simshard as ss
from simshard.ops.factors import factor_rule
from simshard.partition.exact import functorial_layouts
from user_placements import Cyclic


class Reversed(ss.Placement):
    """A user placement: coordinate i holds the i-th block counted from the end."""

    def __init__(self, dim):
        self.dim = dim

    def split(self, indices, num):
        return list(reversed(np.array_split(indices, num)))

    def __str__(self):
        return f"Reversed({self.dim})"


MESH = ss.Mesh({"dp": 2, "tp": 4})


def exact_ints(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-5, 6, size=shape).astype(np.float32)


def run(f, *args, in_sh, out_sh=None, mesh=MESH):
    res = ss.run(f, *args, in_shardings=in_sh, out_shardings=out_sh, mesh=mesh, backend="local")
    assert res.verify.bitwise, res.verify
    np.testing.assert_array_equal(res.outputs, f(*args))
    return res


@pytest.mark.parametrize("placements", [
    [ss.Shard(0), ss.Shard(0)],                       # nested uneven chunks: rows 2,2,1,0 | 2,2,1,0
    [ss.RaggedShard(0, (1, 3)), ss.Replicate()],       # a user placement of the library
    [ss.Replicate(), Reversed(0)],                      # reversed blocks
    [Cyclic(0), ss.Shard(1)],                           # interleaved rows, blocked columns
], ids=["nested-uneven", "ragged", "reversed", "cyclic"])
def test_elementwise_chain_runs_where_the_data_lies(placements):
    spec = ss.DTensorSpec(MESH, placements)
    x, y = exact_ints((12, 8)), exact_ints((12, 8), 1)
    res = run(lambda a, b: np.maximum(a * b + a, -b), x, y, in_sh=(spec, spec), out_sh=spec)
    assert res.comm.total_bytes == 0
    lay = ss.layout(spec, (12, 8))
    for d in MESH.device_ids:  # each device holds exactly its placement block of the result
        np.testing.assert_array_equal(res.shards(d)[0], res.outputs[np.ix_(*lay.indices(d))])


def test_batch_dim_of_a_matmul_and_a_row_reduction_stay_local():
    spec = ss.DTensorSpec(MESH, [ss.Shard(0), ss.Shard(0)])  # 10 rows: not a Shardy layout
    x, w = exact_ints((10, 6)), exact_ints((6, 3), 2)
    res = run(lambda a, w: (a @ w).sum(1), x, w, in_sh=(spec, None),
              out_sh=ss.DTensorSpec(MESH, [ss.Shard(0), ss.Shard(0)]))
    assert res.comm.total_bytes == 0


def test_a_sum_over_the_nested_dim_reshards_exactly():
    spec = ss.DTensorSpec(MESH, [ss.Shard(0), ss.Shard(0)])
    x = exact_ints((10, 3))
    res = run(lambda a: a.sum(0), x, in_sh=spec)
    assert res.comm.total_bytes > 0  # the rows are gathered or reduced: the sum needs all of them


def test_a_transpose_then_reshape_gives_the_strided_layout():
    mesh = ss.Mesh({"x": 4})
    x = exact_ints((4, 6))
    out = ss.DTensorSpec(mesh, [ss.StridedShard(0, 6)])
    res = run(lambda a: a.T.reshape(24), x, in_sh=ss.DTensorSpec(mesh, [ss.Shard(0)]), out_sh=out, mesh=mesh)
    assert res.comm.total_bytes == 0
    for d in range(4):
        np.testing.assert_array_equal(res.shards(d)[0], x.T.reshape(24)[d::4])


def test_an_exact_layout_that_an_op_cannot_keep_is_resharded_for_the_next_one():
    spec = ss.DTensorSpec(MESH, [Cyclic(0), ss.Replicate()])
    x = exact_ints((8, 4))
    res = run(lambda a: np.cumsum(a * 2, axis=0), x, in_sh=spec)  # cumsum needs dim 0 whole
    assert res.comm.total_bytes > 0


# -- the rule itself ----------------------------------------------------------------------------------
def test_functorial_layouts_refuses_a_sharded_reduction_factor_and_mismatched_operands():
    rule = factor_rule("ij,jk->ik", [(8, 4), (4, 2)], [(8, 2)], reduction="j")
    rows = ss.layout(ss.DTensorSpec(ss.Mesh({"x": 2}), [Cyclic(0)]), (8, 4))
    whole = ss.layout(ss.DTensorSpec(ss.Mesh({"x": 2}), [ss.Replicate()]), (4, 2))
    (out,) = functorial_layouts(rule, [rows, whole], [(8, 4), (4, 2)], [(8, 2)])
    assert out.indices(1)[0].tolist() == [1, 3, 5, 7] and out.indices(1)[1].tolist() == [0, 1]
    cols = ss.layout(ss.DTensorSpec(ss.Mesh({"x": 2}), [ss.Shard(1)]), (8, 4))
    assert functorial_layouts(rule, [cols, whole], [(8, 4), (4, 2)], [(8, 2)]) is None  # j is cut
    add = factor_rule("ij,ij->ij", [(8, 4), (8, 4)], [(8, 4)])
    blocked = ss.layout(ss.DTensorSpec(ss.Mesh({"x": 2}), [ss.Shard(0)]), (8, 4))
    assert functorial_layouts(add, [rows, blocked], [(8, 4), (8, 4)], [(8, 4)]) is None  # rows differ


def test_a_merged_dim_must_be_a_product_of_its_factors():
    rule = factor_rule("(ij)->ij", [(8,)], [(2, 4)])
    mesh = ss.Mesh({"x": 2})
    halves = ss.layout(ss.DTensorSpec(mesh, [ss.Shard(0)]), (8,))  # {0..3}, {4..7}: i cut, j whole
    (out,) = functorial_layouts(rule, [halves], [(8,)], [(2, 4)])
    assert out.indices(1)[0].tolist() == [1] and out.indices(1)[1].tolist() == [0, 1, 2, 3]
    odd = ss.layout(ss.DTensorSpec(mesh, [ss.RaggedShard(0, (1, 3))]), (8,))  # {0,1}: no product
    assert functorial_layouts(rule, [odd], [(8,)], [(2, 4)]) is None


# -- property: any placement list, a family of ops, bitwise ---------------------------------------------
PLACEMENTS = st.sampled_from(["S0", "S1", "R", "Cyc0", "Cyc1", "Str0", "Rev1"])


def _placement(name):
    return {"S0": ss.Shard(0), "S1": ss.Shard(1), "R": ss.Replicate(), "Cyc0": Cyclic(0), "Cyc1": Cyclic(1),
            "Str0": ss.StridedShard(0, 2), "Rev1": Reversed(1)}[name]


OPS = {
    "mul-add": (lambda a: a * 3.0 + a, True),
    "transpose": (lambda a: a.T * 1.0, True),
    "reshape-merge": (lambda a: a.reshape(-1), False),  # functorial when the layout is a product
    "sum-cols": (lambda a: a.sum(1), False),
    "sum-rows": (lambda a: a.sum(0), False),
    "matmul": (lambda a: a @ np.ones((a.shape[1], 3), dtype=np.float32), False),
}


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 9), cols=st.sampled_from([2, 4, 6]), p0=PLACEMENTS, p1=PLACEMENTS,
       op=st.sampled_from(sorted(OPS)))
def test_any_placement_list_runs_bitwise(rows, cols, p0, p1, op):
    mesh = ss.Mesh({"a": 2, "b": 2})
    spec = ss.DTensorSpec(mesh, [_placement(p0), _placement(p1)])
    x = exact_ints((rows * 2, cols))
    try:
        ss.layout(spec, x.shape)
    except ss.ShardingError:  # e.g. a stripe that does not divide the dim: refused as invalid
        return
    f, local = OPS[op]
    res = run(f, x, in_sh=spec, out_sh=spec if op == "mul-add" else None, mesh=mesh)
    if local:  # the op ran where the data lies: only the output's reshard (if any) moved bytes
        assert all("for output 0" in r.source for r in res.comm.records), [r.source for r in res.comm.records]
    if op == "mul-add":
        assert res.comm.total_bytes == 0
