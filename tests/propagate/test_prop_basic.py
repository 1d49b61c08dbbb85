"""Basic factor propagation: longest common prefix per factor, conflict truncation, prefix-only
expansion, directions, conservative mode. Names follow Shardy's lit tests where one exists."""

import pytest

from prop_helpers import S, mesh, projection, run_factors
from simshard.propagate import basic
from simshard.propagate.direction import Direction

EW = "ij,ij->ij"
SH = [(8, 8), (8, 8)]
OUT = [(8, 8)]


def basic_ew(a, b, out=None, **kw):
    return run_factors("basic", EW, SH, OUT, [S(a), S(b) if b else None], [S(out) if out else None], **kw)


def test_basic_simple_elementwise_reaches_operand_and_result():
    assert basic_ew('<@mesh, [{"a"}, {"b"}]>', None) == [
        None,
        '<@mesh, [{"a", ?}, {"b", ?}]>',
        '<@mesh, [{"a", ?}, {"b", ?}]>',
    ]


def test_basic_multi_axes_conflict_keeps_only_common_major_prefix():
    assert basic_ew('<@mesh, [{"b", "a"}, {}]>', '<@mesh, [{"b", "c"}, {}]>')[2] == '<@mesh, [{"b", ?}, {?}]>'


def test_basic_no_majority_vote_disagreeing_axes_cancel():
    assert basic_ew('<@mesh, [{"b", "a"}, {}]>', '<@mesh, [{"a", "b"}, {}]>')[2] is None


def test_basic_closed_dim_blocks_the_axis_for_everyone():
    # arg1 dim 0 is closed and empty: basic propagation gives the factor nothing at all
    assert basic_ew('<@mesh, [{"a", ?}, {?}]>', '<@mesh, [{}, {?}]>') == [None, None, None]


def test_basic_replicated_axis_blocks_the_factor():
    assert basic_ew('<@mesh, [{"a", "b", ?}, {?}]>', '<@mesh, [{?}, {?}], replicated={"b"}>')[1:] == [
        '<@mesh, [{"a", ?}, {?}], replicated={"b"}>',
        '<@mesh, [{"a", ?}, {?}]>',
    ]


def test_basic_unreduced_axis_is_not_used_on_that_tensor():
    out = basic_ew('<@mesh, [{"a", ?}, {?}]>', None, out='<@mesh, [{?}, {?}], unreduced={"a"}>')
    assert out == [None, None, None]


def test_basic_axis_used_by_another_factor_is_truncated():
    # 'b' already shards dim 1 of the result: dim 0 gets only 'a'; dim 1 gets nothing since
    # arg0's dim 1 is closed and empty
    out = basic_ew('<@mesh, [{"a", "b"}, {}]>', None, out='<@mesh, [{?}, {"b", ?}]>')
    assert out[1:] == ['<@mesh, [{"a", ?}, {?}]>', '<@mesh, [{"a", ?}, {"b", ?}]>']


def test_basic_expands_only_strict_prefixes():
    # arg1's ["c"] is not a prefix of ["a"]: it keeps its axis, the others get nothing from it
    out = basic_ew('<@mesh, [{"a", ?}, {?}]>', '<@mesh, [{"c", ?}, {?}]>')
    assert out == [None, None, None]


def test_basic_sub_axis_prefix_extends_to_the_full_axis():
    m = mesh(x=4)
    out = run_factors("basic", EW, SH, OUT, [S('<@mesh, [{"x":(1)2, ?}, {?}]>', m), S('<@mesh, [{"x", ?}, {?}]>', m)], [None], m)
    assert out[0] == '<@mesh, [{"x", ?}, {?}]>'


def test_basic_non_minor_factor_takes_a_divisible_sub_axis():
    # reshape 8 -> 2x4 backward: result dim 0 (factor i=2) sharded on x=4 can only give i x:(1)2
    m = mesh(x=4)
    out = run_factors("basic", "(ij)->ij", [(8,)], [(2, 4)], [None], [S('<@mesh, [{"x", ?}, {?}]>', m)], m, sizes={"i": 2})
    assert out[0] == '<@mesh, [{"x":(1)2, ?}]>'


def test_basic_forward_direction_does_not_grow_from_results():
    fwd = lambda f: Direction.FORWARD  # noqa: E731
    out = run_factors("basic", "ij->ij", [(8, 8)], OUT, [S('<@mesh, [{"a", ?}, {?}]>')], [S('<@mesh, [{"a", "b", ?}, {?}]>')], direction=fwd)
    assert out == [None, None]
    bwd = lambda f: Direction.BACKWARD  # noqa: E731
    out = run_factors("basic", "ij->ij", [(8, 8)], OUT, [S('<@mesh, [{"a", ?}, {?}]>')], [S('<@mesh, [{"a", "b", ?}, {?}]>')], direction=bwd)
    assert out == ['<@mesh, [{"a", "b", ?}, {?}]>', None]


def test_basic_none_direction_propagates_nothing():
    out = run_factors("basic", "ij->ij", [(8, 8)], OUT, [S('<@mesh, [{"a"}, {"b"}]>')], [None], direction=lambda f: Direction.NONE)
    assert out == [None, None]


def test_basic_blocked_factor_carries_nothing():
    out = run_factors("basic", "ij->ij", [(8, 8)], OUT, [S('<@mesh, [{"a"}, {"b"}]>')], [None], blocked="i")
    assert out == [None, '<@mesh, [{?}, {"b", ?}]>']


def test_basic_conservative_stops_at_sub_axes():
    m = mesh(a=2, b=8)
    args = ("basic", "(ij)->ij", [(16,)], [(4, 4)], [S('<@mesh, [{"a", "b"}]>', m)], [None], m)
    assert run_factors(*args, sizes={"i": 4})[1] == '<@mesh, [{"a", "b":(1)2, ?}, {"b":(2)4, ?}]>'
    assert run_factors(*args, conservative=True, sizes={"i": 4})[1] == '<@mesh, [{"a", ?}, {?}]>'


@pytest.mark.parametrize(
    "lists, expected",
    [
        ((["a", "b"], ["a", "c"]), ["a"]),
        ((["a"], [], ["a", "b", "c"], ["a", "b", "d"]), ["a", "b"]),
        ((["x:(1)2"], ["x:(1)4"]), ["x:(1)4"]),
        ((["x:(1)2", "a"], ["x:(1)4"]), ["x:(1)2"]),
    ],
)
def test_basic_compatible_major_axes(lists, expected):
    m = mesh(a=2, b=2, c=2, d=2, x=8)
    n = len(lists)
    shardings = [S("<@mesh, [{" + ", ".join(f'"{a}"' if ":" not in a else f'"{a.split(":")[0]}":{a.split(":")[1]}' for a in l) + (", ?" if l else "?") + "}]>", m) for l in lists]
    r, p = projection(",".join("i" * 1 for _ in range(n)) + "->i", [(16,)] * n, [(16,)], shardings, [None], m)
    got = basic.compatible_major_axes(p, 0, Direction.BOTH, m.shape)
    assert [a.short() for a in got] == expected
