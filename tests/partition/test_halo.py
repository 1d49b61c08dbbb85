"""Halo exchange: convolutions, pads and slices on a sharded windowed dim run on row blocks.

Every case runs partitioned and is checked bit for bit against the op run whole, op by op
(``run_partitioned``), and its collectives must be collective-permutes receiving exactly the halo:
per device, the input rows its output block reads that its own input block lacks. The halo is
derived here from the block rule (ceil-and-pad blocks of the input and of the output) and the
window arithmetic written out afresh, not from the partitioner's code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import simshard as ss

from .helpers import exact_values
from .run import run_partitioned

P = ss.P
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _trace(fn, *args, in_sh, out_sh, mesh):
    return ss.propagate(ss.trace(fn, *args, in_shardings=in_sh, out_shardings=out_sh, mesh=mesh))


def _blocks(n: int, g: int) -> list[range]:
    """Shardy's blocks of a dim of ``n`` over ``g`` devices: ceil(n/g) each, the last ones short or empty."""
    b = math.ceil(n / g)
    return [range(min(k * b, n), min((k + 1) * b, n)) for k in range(g)]


def _reads(out_rows: range, k: int, s: int, lo: int, n: int) -> set[int]:
    """Input rows (inside 0..n-1) the output rows read: row o reads o*s - lo .. o*s - lo + k - 1."""
    return {i for o in out_rows for i in range(o * s - lo, o * s - lo + k) if 0 <= i < n}


def _halo_rows(n: int, out_n: int, g: int, k: int, s: int, lo: int) -> list[int]:
    """Per device along the split dim, the rows it reads but does not hold."""
    return [len(_reads(o, k, s, lo, n) - set(i)) for i, o in zip(_blocks(n, g), _blocks(out_n, g))]


def _permutes_only(ran) -> int:
    """Total bytes received; every collective a collective-permute."""
    assert set(ran.kinds()) <= {"collective_permute"}, ran.kinds()
    return ran.total_received


# -- conv2d ---------------------------------------------------------------------------------------
@st.composite
def conv_cases(draw):
    k = draw(st.integers(1, 5))
    s = draw(st.integers(1, 3))
    lo, hi = draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1))
    h = draw(st.integers(max(1, k - lo - hi), 14))
    g = draw(st.integers(2, 4))
    return h, k, s, (lo, hi), g


@SETTINGS
@given(case=conv_cases(), data=st.data())
def test_conv_rows_split_exchange_only_their_halo(case, data):
    h, k, s, (lo, hi), g = case
    n, c, o, wd, kw = 2, 3, 2, 5, data.draw(st.integers(1, 3))
    rng = np.random.default_rng(h * 100 + k * 10 + s)
    x, w = exact_values(rng, (n, c, h, wd)), exact_values(rng, (o, c, k, kw))
    mesh = ss.Mesh({"z": g})
    fn = lambda x, w: ss.nn.conv2d(x, w, stride=(s, 1), padding=((lo, hi), (0, 0)))  # noqa: E731
    out_h = (h + lo + hi - k) // s + 1
    prog = _trace(fn, x, w, in_sh=(P(None, None, "z", None), P()), out_sh=P(None, None, "z", None), mesh=mesh)
    ran = run_partitioned(prog, (x, w))
    if out_h == 1 and h == k and lo == 0:  # one window over the whole dim: a plain contraction, reduced
        return
    rows = _halo_rows(h, out_h, g, k, s, lo)
    assert _permutes_only(ran) == sum(rows) * n * c * wd * 4
    for d, r in zip(mesh.device_ids, rows):
        assert ran.received(d) == r * n * c * wd * 4


@SETTINGS
@given(case=conv_cases(), kw=st.integers(1, 4), sw=st.integers(1, 3), gy=st.integers(2, 3))
def test_conv_rows_and_columns_split_exchange_edges_and_corners(case, kw, sw, gy):
    """H over z and W over y: each device receives the rows and columns (corners included) its
    output block reads and its input block lacks."""
    h, k, s, (lo, hi), gz = case
    wd = max(kw, 7)
    n, c, o = 1, 2, 2
    rng = np.random.default_rng(7)
    x, w = exact_values(rng, (n, c, h, wd)), exact_values(rng, (o, c, k, kw))
    mesh = ss.Mesh({"y": gy, "z": gz})
    fn = lambda x, w: ss.nn.conv2d(x, w, stride=(s, sw), padding=((lo, hi), (1, 0)))  # noqa: E731
    out_h, out_w = (h + lo + hi - k) // s + 1, (wd + 1 - kw) // sw + 1
    assume(not (out_h == 1 and h == k and lo == 0))  # a whole-dim window: a plain contraction
    spec = P(None, None, "z", "y")
    ran = run_partitioned(_trace(fn, x, w, in_sh=(spec, P()), out_sh=spec, mesh=mesh), (x, w))
    expect = 0
    for iy, (cols, ocols) in enumerate(zip(_blocks(wd, gy), _blocks(out_w, gy))):
        for iz, (rows, orows) in enumerate(zip(_blocks(h, gz), _blocks(out_h, gz))):
            need_r, need_c = _reads(orows, k, s, lo, h), _reads(ocols, kw, sw, 1, wd)
            held = len(need_r & set(rows)) * len(need_c & set(cols))
            expect += len(need_r) * len(need_c) - held
    assert _permutes_only(ran) == expect * n * c * 4


def test_conv_halo_beside_a_reduce_shard():
    """Input channels a reduce shard over y, rows over z: the halo moves the block's own
    channels only, and the partial sums are reduced as before."""
    mesh = ss.Mesh({"y": 2, "z": 4})
    rng = np.random.default_rng(3)
    x, w = exact_values(rng, (1, 4, 16, 6)), exact_values(rng, (2, 4, 3, 3))
    fn = lambda x, w: ss.nn.conv2d(x, w, stride=(1, 1), padding=((1, 1), (1, 1)))  # noqa: E731
    prog = _trace(fn, x, w, in_sh=(P(None, "y", "z", None), P(None, "y", None, None)), out_sh=P(None, None, "z", None),
                  mesh=mesh)
    ran = run_partitioned(prog, (x, w))
    permuted = sum(r.bytes_received for r in ran.execution.records if r.kind == "collective_permute")
    # each of the 8 devices: 2 channels x 6 columns per halo row; inner devices 2 rows, edge ones 1
    assert permuted == 2 * (1 + 2 + 2 + 1) * 2 * 6 * 4
    assert "all_gather" not in ran.kinds()


def test_conv_halo_moves_less_than_gathering():
    """The 3x3 conv of the CKKS case (z splits the rows): 2 halo rows per inner device instead of
    every row to every device."""
    mesh = ss.Mesh({"z": 4})
    rng = np.random.default_rng(0)
    x, w = exact_values(rng, (1, 8, 16, 16)), exact_values(rng, (8, 8, 3, 3))
    fn = lambda x, w: ss.nn.conv2d(x, w, stride=(1, 1), padding=((1, 1), (1, 1)))  # noqa: E731
    spec = P(None, None, "z", None)
    ran = run_partitioned(_trace(fn, x, w, in_sh=(spec, P()), out_sh=spec, mesh=mesh), (x, w))
    row = 8 * 16 * 4
    assert _permutes_only(ran) == 6 * row  # 1 + 2 + 2 + 1 rows
    assert ran.kinds() == ["collective_permute", "collective_permute"]  # left halos, right halos
    gather = 4 * 12 * row  # what the all-gather received: 12 rows to each of 4 devices
    assert 6 * row < gather


@pytest.mark.parametrize("h, k, s, pad, rows", [
    # stride 3 over blocks of 5 rows: output block j (2 rows) reads rows 6j .. 6j+5, so the right
    # halo grows by a row per device (1, 2, 3) and the last device, with no output rows, reads none
    (20, 3, 3, (0, 0), [1, 2, 3, 0]),
    # one row per device under a 5-row window: a halo spans two neighbours (device 1 reads rows
    # 0..3: row 0 from the device before, rows 2 and 3 from the two after)
    (4, 5, 1, (2, 2), [2, 3, 3, 2]),
])
def test_conv_halo_per_device_from_the_layouts(h, k, s, pad, rows):
    mesh = ss.Mesh({"z": 4})
    rng = np.random.default_rng(1)
    x, w = exact_values(rng, (1, 2, h, 3)), exact_values(rng, (2, 2, k, 1))
    fn = lambda x, w: ss.nn.conv2d(x, w, stride=(s, 1), padding=(pad, (0, 0)))  # noqa: E731
    spec = P(None, None, "z", None)
    ran = run_partitioned(_trace(fn, x, w, in_sh=(spec, P()), out_sh=spec, mesh=mesh), (x, w))
    out_h = (h + sum(pad) - k) // s + 1
    assert _halo_rows(h, out_h, 4, k, s, pad[0]) == rows
    assert _permutes_only(ran) == sum(rows) * 2 * 3 * 4
    assert [ran.received(d) for d in mesh.device_ids] == [r * 2 * 3 * 4 for r in rows]


# -- pad and slice --------------------------------------------------------------------------------
def test_pad_after_slice_is_a_shift():
    """np.pad(a[:3], ((1, 0), (0, 0))) with dim 0 over 4 devices: the slice keeps each device's own
    row, the pad shifts by one: one row per device via a collective-permute, not all-gather."""
    mesh = ss.Mesh({"z": 4})
    a = exact_values(np.random.default_rng(0), (4, 5))
    fn = lambda a: np.pad(a[:3], ((1, 0), (0, 0)))  # noqa: E731
    ran = run_partitioned(_trace(fn, a, in_sh=(P("z", None),), out_sh=P("z", None), mesh=mesh), (a,), fn(a))
    assert ran.kinds() == ["collective_permute"]
    assert ran.total_received == 3 * 5 * 4
    assert [ran.received(d) for d in mesh.device_ids] == [0, 20, 20, 20]


@SETTINGS
@given(n=st.integers(1, 13), g=st.integers(2, 4), lo=st.integers(0, 4), hi=st.integers(0, 4))
def test_pad_on_a_split_dim_moves_its_halo(n, g, lo, hi):
    mesh = ss.Mesh({"z": g})
    a = exact_values(np.random.default_rng(n), (n, 3))
    fn = lambda a: np.pad(a, ((lo, hi), (0, 0)), constant_values=-7.0)  # noqa: E731
    ran = run_partitioned(_trace(fn, a, in_sh=(P("z", None),), out_sh=P("z", None), mesh=mesh), (a,), fn(a))
    assert _permutes_only(ran) == sum(_halo_rows(n, n + lo + hi, g, 1, 1, lo)) * 3 * 4


@SETTINGS
@given(n=st.integers(1, 13), g=st.integers(2, 4), data=st.data())
def test_slice_on_a_split_dim_moves_what_its_blocks_keep(n, g, data):
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    step = data.draw(st.integers(1, 3))
    mesh = ss.Mesh({"z": g})
    a = exact_values(np.random.default_rng(n), (n, 2))
    fn = lambda a: a[start:stop:step]  # noqa: E731
    out_n = len(range(start, stop, step))
    ran = run_partitioned(_trace(fn, a, in_sh=(P("z", None),), out_sh=P("z", None), mesh=mesh), (a,), fn(a))
    assert _permutes_only(ran) == sum(_halo_rows(n, out_n, g, 1, step, -start)) * 2 * 4
