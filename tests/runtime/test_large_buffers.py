"""The pool of large collective outputs (runtime/core/large_buffers.py): a buffer goes back only
once no view of it is left, however derived, and is lent again for the next output of its size."""

import gc

import numpy as np
from hypothesis import given, settings, strategies as st

from simshard.runtime.core.large_buffers import LargeBuffers


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_a_buffer_is_lent_again_once_its_last_view_is_gone():
    pool = LargeBuffers(limit=1 << 20, large=1024)
    out = pool.empty((64, 32), np.float32)
    assert out.shape == (64, 32) and out.dtype == np.float32 and out.flags.c_contiguous and out.flags.writeable
    where = address(out)
    views = [out[3:9, ::2], out.T, out.reshape(-1)[5:], np.asarray(out[7]), out.view(np.int32)]
    del out
    gc.collect()
    assert pool.idle_bytes == 0  # views live: not back
    other = pool.empty((64, 32), np.float32)
    assert address(other) != where  # so the next output gets other memory
    for v in views:
        v[...] = 1  # still its own memory, written freely
    del views, v  # (the loop's name held the last)
    gc.collect()
    assert pool.idle_bytes == 64 * 32 * 4
    again = pool.empty((32, 64), np.float32)  # the same bytes, another shape
    assert address(again) == where and pool.idle_bytes == 0


def test_small_outputs_are_plain_arrays_and_the_pool_keeps_at_most_its_limit():
    pool = LargeBuffers(limit=3000, large=1024)
    small = pool.empty((10,), np.float64)
    assert small.base is None  # its own memory, nothing kept
    outs = [pool.empty((256,), np.float64) for _ in range(3)]  # 2,048 bytes each
    del outs
    gc.collect()
    assert pool.idle_bytes == 2048  # one kept: two would pass the limit
    pool.clear()
    assert pool.idle_bytes == 0 and not pool.idle


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([(16, 16), (8, 32), (4, 4), (256,)]), min_size=1, max_size=12), st.randoms())
def test_no_two_live_outputs_ever_share_memory(shapes, rnd):
    pool = LargeBuffers(limit=1 << 20, large=64)
    live = []
    for i, shape in enumerate(shapes):
        a = pool.empty(shape, np.float32)
        a[...] = i
        live.append((i, a[1:] if a.ndim == 1 else a[:, 1:]))  # only a view kept
        if live and rnd.random() < 0.5:
            live.pop(rnd.randrange(len(live)))
            gc.collect()
    for i, v in live:
        assert (v == i).all()  # nothing lent twice overwrote it
