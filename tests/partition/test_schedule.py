"""Schedules are plain data: msgpack round trips are exact, and nothing but data goes in."""

import numpy as np
import pytest

import simshard as ss
from simshard.spmd import (
    AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Literal, Pad, ReduceScatter, Schedule, Slice,
)


def sample() -> Schedule:
    mesh = ss.Mesh({"x": 2, "y": 2})
    s = ss.Sharding.parse('<@mesh, [{"x"}, {}]>', mesh)
    instrs = (
        Literal(0, "x * 2", dst=5, value=np.float32(2.0)),
        Compute(1, "%3 mul", op="mul", inputs=(0, 5), outputs=(6,), params=()),
        Compute(2, "%4 reshape", op="reshape", inputs=(6,), outputs=(7,), params=(("new_shape", (4, 2)),)),
        Compute(3, "%5 constraint", op="sharding_constraint", inputs=(7,), outputs=(8,), params=(("sharding", s),)),
        Compute(4, "%6 convert", op="convert", inputs=(8,), outputs=(9,), params=(("dtype", np.dtype("int32")),)),
        Literal(5, "%7 constant", dst=10, value=np.arange(6, dtype=np.int16).reshape(2, 3)),
        AllGather(6, "reshard x", src=9, dst=11, group=(0, 2), axis=0, axes=("x",)),
        ReduceScatter(7, "%8 dot", src=11, dst=12, group=(0, 1), axis=1, splits=(1, 1), reduce_op="max", axes=("y",)),
        AllReduce(8, "%8 dot", src=12, dst=13, group=(0, 1, 2, 3), axes=("x", "y")),
        AllToAll(9, "reshard", src=13, dst=14, group=(0, 1), split_axis=1, splits=(2, 1), concat_axis=0, axes=("y",)),
        CollectivePermute(10, "mesh change", src=14, dst=15, pairs=((0, 3), (3, 0)), shape=(2, 3), dtype="float32"),
        Slice(11, "reshard", src=15, dst=16, index=((0, 1), (2,))),
        Pad(12, "%9 reduce_max", src=16, dst=17, shape=(2, 2), value=np.float32(-np.inf)),
        Free(13, "", bufs=(5, 6, 7)),
    )
    return Schedule(device=0, inputs=(0,), instrs=instrs, outputs=(17,))


def test_msgpack_round_trip_is_exact():
    s = sample()
    back = Schedule.from_bytes(s.to_bytes())
    assert back.device == s.device and back.inputs == s.inputs and back.outputs == s.outputs
    for a, b in zip(s.instrs, back.instrs):
        assert type(a) is type(b)
        for k, v in vars(a).items():
            w = getattr(b, k)
            if isinstance(v, np.ndarray):
                assert w.dtype == v.dtype and np.array_equal(w, v)
            else:
                assert w == v and type(w) is type(v), (k, v, w)
    assert back.to_bytes() == s.to_bytes()


def test_code_cannot_travel_in_a_schedule():
    bad = Schedule(0, (), (Compute(0, "", op="mul", inputs=(), outputs=(), params=(("fn", lambda x: x),)),), ())
    with pytest.raises(TypeError, match="plain data only"):
        bad.to_bytes()


def test_pretty_lists_every_instruction():
    text = sample().pretty()
    assert "[6] all_gather(src=9, dst=11, group=(0, 2), axis=0, axes=('x',))  # reshard x" in text
    assert text.count("\n") == len(sample().instrs) + 1
