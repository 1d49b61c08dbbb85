"""Aggressive factor propagation: per-tensor resolution, cross-factor ordering (source tensor
size, sharding size for elementwise ops, tensor index, factor index), results before operands,
and the elementwise cap on sideways propagation."""

from prop_helpers import MESH, S, projection, run_factors
from simshard.propagate import aggressive
from simshard.propagate.basic import compatible_major_axes
from simshard.propagate.direction import Direction

EW = "ij,ij->ij"
SH = [(8, 8), (8, 8)]
MATMUL = "ik,kj->ij"


def test_aggr_fake_conflict_closed_dims():
    out = run_factors("aggressive", EW, SH, [(8, 8)], [S('<@mesh, [{"a", ?}, {"b"}]>'), S('<@mesh, [{}, {"b", "c", ?}]>')], [None])
    assert out == [None, None, '<@mesh, [{"a", ?}, {"b", "c", ?}]>']


def test_aggr_vs_basic_on_closed_dims():
    args = (EW, SH, [(8, 8)], [S('<@mesh, [{"a", ?}, {?}]>'), S('<@mesh, [{}, {?}]>')], [None])
    assert run_factors("basic", *args)[2] is None
    assert run_factors("aggressive", *args)[2] == '<@mesh, [{"a", ?}, {?}]>'


def test_aggr_real_conflict_within_factor_still_cancels():
    out = run_factors("aggressive", EW, SH, [(8, 8)], [S('<@mesh, [{"a", ?}, {}]>'), S('<@mesh, [{"b", ?}, {}]>')], [None])
    assert out == [None, None, None]


def test_aggr_fake_conflict_two_non_contracting():
    # 'a' is on lhs's non-contracting dim and on the result's rhs-non-contracting dim: the result
    # can't take both, but the rhs can still take 'a' on its own non-contracting dim
    out = run_factors(
        "aggressive", "ik,jk->ij", [(256, 512), (128, 512)], [(256, 128)],
        [S('<@mesh, [{"a", ?}, {?}]>'), None], [S('<@mesh, [{?}, {"a", ?}]>')],
    )
    assert out == [None, '<@mesh, [{"a", ?}, {?}]>', None]


def test_aggr_prefer_larger_source_tensor():
    # lhs (8x4) and rhs (8x32 transposed) both want 'a' for the result: the rhs is bigger
    out = run_factors("aggressive", "ik,jk->ij", [(8, 4), (32, 4)], [(8, 32)], [S('<@mesh, [{"a"}, {}]>'), S('<@mesh, [{"a"}, {}]>')], [None])
    assert out[2] == '<@mesh, [{?}, {"a", ?}]>'


def test_aggr_prefer_lhs_factor_non_elementwise():
    out = run_factors("aggressive", MATMUL, SH, [(8, 8)], [S('<@mesh, [{"a"}, {}]>'), S('<@mesh, [{}, {"b", "a"}]>')], [None])
    assert out[2] == '<@mesh, [{"a", ?}, {"b", ?}]>'


def test_aggr_elementwise_prefers_the_more_sharded_factor():
    # equal sources; for an elementwise op the factor with the larger candidate wins the axis
    r, p = projection(EW, SH, [(8, 8)], [S('<@mesh, [{"a", ?}, {?}]>'), S('<@mesh, [{?}, {"b", "a", ?}]>')], [None])
    cands = [compatible_major_axes(p, f, Direction.BOTH, MESH.shape) for f in range(2)]
    assert aggressive.factor_order(p, [8, 8], cands, MESH.shape, elementwise=True) == [1, 0]
    assert aggressive.factor_order(p, [8, 8], cands, MESH.shape, elementwise=False) == [0, 1]
    out = run_factors("aggressive", EW, SH, [(8, 8)], [S('<@mesh, [{"a", ?}, {?}]>'), S('<@mesh, [{?}, {"b", "a", ?}]>')], [None], elementwise=True)
    assert out[2] == '<@mesh, [{?}, {"b", "a", ?}]>'


def test_aggr_sideways_blocked_by_closed_empty_result():
    args = (EW, SH, [(8, 8)], [S('<@mesh, [{"a", ?}, {?}]>'), S('<@mesh, [{?}, {?}]>')], [S('<@mesh, [{}, {?}]>')])
    assert run_factors("aggressive", *args, elementwise=True) == [None, None, None]
    # a non-elementwise op with the same rule does propagate sideways
    assert run_factors("aggressive", *args)[1] == '<@mesh, [{"a", ?}, {?}]>'


def test_aggr_partial_conflict_across_factors_batch_from_larger_result():
    out = run_factors(
        "aggressive", "bik,bkj->bij", [(2, 8, 4), (2, 4, 16)], [(2, 8, 16)],
        [S('<@mesh, [{"a"}, {"b"}, {}]>'), None], [S('<@mesh, [{"a", "b"}, {}, {}]>')],
    )
    assert out == [None, '<@mesh, [{"a", "b", ?}, {?}, {?}]>', None]


def test_aggr_source_tensor_is_the_largest_holding_the_whole_candidate():
    r, p = projection(MATMUL, [(8, 4), (4, 64)], [(8, 64)], [S('<@mesh, [{"a"}, {}]>'), None], [S('<@mesh, [{?}, {"a", ?}]>')])
    cands = [compatible_major_axes(p, f, Direction.BOTH, MESH.shape) for f in range(3)]
    src = aggressive.source_tensors(p, [8, 64, 4], cands, MESH.shape)
    assert src[0] == (32, 0)  # lhs 8x4 holds 'a' for factor i
    assert src[1] == (512, 2)  # result 8x64 holds 'a' for factor j
    assert aggressive.factor_order(p, [8, 64, 4], cands, MESH.shape, False)[0] == 1
