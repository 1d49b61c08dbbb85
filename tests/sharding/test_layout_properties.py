"""Property tests of the sharding model over random meshes, shapes, shardings and placement lists.

Every expected value here is computed independently of the code under test (from the sharding's
own axis lists, or by brute force over per-device indices), so each property can fail.
The strategies are also used by ``test_syntax_fuzz.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.sharding.axes import merge_adjacent
from simshard import (
    AxisRef,
    DimSharding,
    DTensorSpec,
    Mesh,
    Partial,
    Replicate,
    Shard,
    Sharding,
    ShardingError,
    StridedShard,
)

OPS = ("sum", "max", "min", "prod")
SIZES = (4, 2, 3, 1)  # sampled_from favours its first entries
SETTINGS = settings(max_examples=200, deadline=None)
# Hypothesis favours small integers; rank 0 would otherwise be nearly half of all cases.
RANKS = st.sampled_from([2, 3, 1, 2, 3, 0, 1, 2, 3])

# Mesh names must be Shardy NAMEs to appear in text; they may collide with the grammar's keywords.
MESH_NAMES = st.one_of(
    st.sampled_from(["mesh", "m", "sharding", "replicated", "unreduced", "device_ids", "p1", "_", "a.b"]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,6}", fullmatch=True),
)
# Axis names are quoted strings: anything but '"' and '\\' (including spaces, newlines, unicode).
AXIS_NAMES = st.one_of(
    st.sampled_from(["x", "y", "z", "data", "model", "p1", "?", "x y"]),
    st.text(
        st.characters(exclude_characters='"\\', exclude_categories=("Cs",)), min_size=1, max_size=4
    ),
)


# -- strategies ------------------------------------------------------------------------------------
@st.composite
def meshes(draw, max_axes: int = 3, sizes=SIZES, total: int | None = None) -> Mesh:
    """1..max_axes axes with sizes from ``sizes``, sometimes a random device order.

    With ``total``, a mesh of exactly that many devices (any factorisation into sizes 1..total)."""
    if total is None:
        k = draw(st.sampled_from(([2, 3][: max_axes - 1] * 2 + [1])))
        dims = draw(st.lists(st.sampled_from(sizes), min_size=k, max_size=k))
    else:
        dims, left = [], total
        while left > 1 and len(dims) < max_axes - 1:
            f = draw(st.sampled_from([d for d in range(1, left + 1) if left % d == 0]))
            dims.append(f)
            left //= f
        dims.append(left)
        dims = draw(st.permutations(dims))
    names = draw(st.lists(AXIS_NAMES, min_size=len(dims), max_size=len(dims), unique=True))
    n = math.prod(dims)
    ids = draw(st.none() | st.permutations(range(n)))
    return Mesh(list(zip(names, dims)), ids, name=draw(MESH_NAMES))


DIM_SIZES = st.sampled_from([7, 5, 8, 6, 3, 9, 2, 4, 1, 0])  # st.integers would favour 0


def shapes(rank: int):
    return st.lists(DIM_SIZES, min_size=rank, max_size=rank).map(tuple)


@st.composite
def shardings(draw, mesh: Mesh, rank: int, full_only: bool = False, pending: bool = False) -> Sharding:
    """Each mesh axis unused, in a random dim at a random position, replicated or unreduced;
    sometimes (unless ``full_only``) split into two sub-axes ``(1)a`` and ``(a)n/a`` that are
    placed independently. ``pending`` makes unreduced axes likely."""
    dims: list[list[AxisRef]] = [[] for _ in range(rank)]
    rep: list[AxisRef] = []
    unr: list[AxisRef] = []
    where = (["dim"] * 4 if rank else []) + ["unused"] * 2 + ["rep", "unr"]
    if pending:
        where = ["unr"] * 3 + where
    for name, n in zip(mesh.axis_names, mesh.axis_sizes):
        splits = [a for a in range(2, n) if n % a == 0]
        if splits and not full_only and draw(st.sampled_from(["split", "whole"])) == "split":
            a = draw(st.sampled_from(splits))
            refs = [AxisRef(name, (1, a)), AxisRef(name, (a, n // a))]
        else:
            refs = [AxisRef(name)]
        for ref in refs:
            w = draw(st.sampled_from(where))
            if w == "rep":
                rep.append(ref)
            elif w == "unr":
                unr.append(ref)
            elif w == "dim":
                k = draw(st.integers(0, rank - 1))
                dims[k].insert(draw(st.integers(0, len(dims[k]))), ref)
    out = []
    for axes in dims:
        is_open = draw(st.booleans())
        prio = draw(st.none() | st.integers(0, 3)) if (axes or is_open) else None
        # the two halves of a split axis side by side are the whole axis (a Sharding refuses them)
        out.append(DimSharding(merge_adjacent(axes, mesh.shape), is_open, prio))
    # The op is drawn even without unreduced axes: it must then be inert (same text, same value).
    op = draw(st.sampled_from(OPS))
    return Sharding(mesh, tuple(out), merge_adjacent(rep, mesh.shape), merge_adjacent(unr, mesh.shape), op)


@st.composite
def placement_lists(
    draw, mesh: Mesh, rank: int, partial: bool = True, strided: bool = True, pending: bool = False
) -> DTensorSpec:
    """One placement per mesh axis; all Partial axes share one reduce op; dims may be negative."""
    op = draw(st.sampled_from(OPS))
    kinds = (["S", "S", "S"] + (["SS", "SS"] if strided else []) if rank else []) + ["R", "R"] + (["P"] if partial else [])
    if pending:
        kinds = ["P", "P"] + kinds
    out = []
    for _ in mesh.axis_names:
        kind = draw(st.sampled_from(kinds))
        if kind == "R":
            out.append(Replicate())
        elif kind == "P":
            out.append(Partial(op))
        elif kind == "S":
            out.append(Shard(draw(st.integers(-rank, rank - 1))))
        else:
            out.append(StridedShard(draw(st.integers(-rank, rank - 1)), draw(st.integers(1, 4))))
    return DTensorSpec(mesh, tuple(out))


@st.composite
def sharding_cases(draw, **kw):
    mesh = draw(meshes())
    rank = draw(RANKS)
    return mesh, draw(shapes(rank)), draw(shardings(mesh, rank, **kw))


@st.composite
def placement_cases(draw, **kw):
    mesh = draw(meshes())
    rank = draw(RANKS)
    return mesh, draw(shapes(rank)), draw(placement_lists(mesh, rank, **kw))


@st.composite
def any_cases(draw, pending: bool = False):
    return draw(sharding_cases(pending=pending) | placement_cases(pending=pending))


# -- independent reference computations ------------------------------------------------------------
def ref_size(mesh: Mesh, ref: AxisRef) -> int:
    return dict(zip(mesh.axis_names, mesh.axis_sizes))[ref.name] if ref.sub is None else ref.sub[1]


def dim_count(s: Sharding, k: int) -> int:
    """Number of blocks dim ``k`` is cut into, from the sharding's own axis list."""
    return math.prod(ref_size(s.mesh, a) for a in s.dims[k].axes)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def brute_groups(lay: ss.Layout) -> set[frozenset[int]]:
    """Reduce groups by brute force: the orbit of each device when its digits along the unreduced
    (sub-)axes take every value."""
    mesh = lay.mesh
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    groups = set()
    for d in mesh.device_ids:
        coords = [list(mesh.coords(d))]
        for r in lay.unreduced:
            i = mesh.axis_names.index(r.name)
            n = sizes[r.name]
            pre, k = (1, n) if r.sub is None else r.sub
            stride = n // (pre * k)
            nxt = []
            for c in coords:
                digit = (c[i] // stride) % k
                for v in range(k):
                    c2 = list(c)
                    c2[i] = c[i] + (v - digit) * stride
                    nxt.append(c2)
            coords = nxt
        groups.add(frozenset(mesh.device(c) for c in coords))
    return groups


def brute_same(la: ss.Layout, lb: ss.Layout) -> bool:
    """Same indices in the same local order on every device, and the same pending reductions."""
    if la.shape != lb.shape or sorted(la.mesh.device_ids) != sorted(lb.mesh.device_ids):
        return False
    for d in la.mesh.device_ids:
        a, b = la.indices(d), lb.indices(d)
        if len(a) != len(b) or any(list(x) != list(y) for x, y in zip(a, b)):
            return False
    if bool(la.unreduced) != bool(lb.unreduced):
        return False
    if la.unreduced:
        return la.reduce_op == lb.reduce_op and brute_groups(la) == brute_groups(lb)
    return True


def is_plainly_expressible(s: Sharding, shape) -> bool:
    """Full axes only (dims, replicated, unreduced) and every dim divisible by its block count:
    nested chunking then equals the flat rule, so a placement list must exist."""
    refs = [a for d in s.dims for a in d.axes] + list(s.replicated) + list(s.unreduced)
    return all(a.sub is None for a in refs) and all(d % dim_count(s, k) == 0 for k, d in enumerate(shape))


# -- properties --------------------------------------------------------------------------------------
@SETTINGS
@given(sharding_cases())
def test_text_round_trip(case):
    mesh, _, s = case
    text = str(s)
    note(text)
    back = Sharding.parse(text, {mesh.name: mesh})
    assert back == s
    assert str(back) == text


@SETTINGS
@given(sharding_cases())
def test_sharding_holder_count(case):
    mesh, shape, s = case
    lay = ss.layout(s, shape)
    sharded = math.prod(dim_count(s, k) for k in range(len(shape)))
    assert mesh.size % sharded == 0
    count = lay.holder_count()
    assert count.shape == shape
    # Contributions to a pending reduction are held like replicas, so the count is the same.
    assert (count == mesh.size // sharded).all()


@SETTINGS
@given(placement_cases())
def test_placement_holder_count(case):
    mesh, shape, d = case
    lay = ss.layout(d, shape)
    expected = math.prod(n for n, p in zip(mesh.axis_sizes, d.placements) if isinstance(p, (Replicate, Partial)))
    if not any(isinstance(p, Partial) for p in d.placements):
        assert not lay.unreduced
    count = lay.holder_count()
    assert count.shape == shape
    assert (count == expected).all()


@SETTINGS
@given(
    any_cases(pending=True) | any_cases(),
    st.sampled_from(["float32", "float64", "int32", "int64", "uint8"]),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_shard_assemble_round_trip(case, dtype, seed, neg_zero):
    _, shape, spec = case
    lay = ss.layout(spec, shape)
    rng = np.random.default_rng(seed)
    lo = 0 if dtype == "uint8" else -9
    a = rng.integers(lo, 10, size=shape).astype(dtype)
    if neg_zero and a.dtype.kind == "f":
        a[rng.random(shape) < 0.5] = -0.0  # integer-valued too; its sign bit must survive
    shards = lay.shard(a)
    assert set(shards) == set(lay.devices)
    for dev, local in shards.items():
        assert local.shape == lay.local_shape(dev)
        assert local.dtype == a.dtype
        # A device holds its indices' values, except that for a pending sum / prod only the
        # device at coordinate 0 along every unreduced axis does; the others hold 0 / 1.
        want = a[np.ix_(*lay.indices(dev))] if shape else a
        if lay.unreduced and lay.reduce_op in ("sum", "prod") and any(digits(lay.mesh, dev, lay.unreduced)):
            want = np.full_like(want, 0 if lay.reduce_op == "sum" else 1)
            assert np.array_equal(local, want)
        else:
            assert local.tobytes() == want.tobytes()
    out = lay.assemble(shards)
    assert out.shape == a.shape and out.dtype == a.dtype
    assert out.tobytes() == a.tobytes()


@SETTINGS
@given(sharding_cases())
def test_sharding_to_dtensor_keeps_layout(case):
    _, shape, s = case
    want = ss.layout(s, shape)
    try:
        d = s.to_dtensor(shape)
    except ShardingError as e:
        event("to_dtensor refused")
        assert not is_plainly_expressible(s, shape), f"{s} over {shape} refused: {e}"
        return
    event("to_dtensor ok")
    note(str(d))
    assert ss.layout(d, shape).same_as(want)
    back = Sharding.from_dtensor(d, shape)  # d came from s, so a tensor-dimension form exists
    note(str(back))
    assert ss.layout(back, shape).same_as(want)


@st.composite
def expressible_cases(draw):
    """Full axes only, every dim a multiple of its block count: conversion must succeed."""
    mesh = draw(meshes())
    rank = draw(RANKS)
    s = draw(shardings(mesh, rank, full_only=True))
    shape = tuple(dim_count(s, k) * draw(st.sampled_from([1, 2, 3, 0])) for k in range(rank))
    return mesh, shape, s


@SETTINGS
@given(expressible_cases())
def test_expressible_shardings_convert(case):
    _, shape, s = case
    d = s.to_dtensor(shape)
    want = ss.layout(s, shape)
    assert ss.layout(d, shape).same_as(want)
    # Each axis becomes Shard / StridedShard of its dim, Partial, or Replicate.
    for name, p in zip(s.mesh.axis_names, d.placements):
        k = [i for i, dim in enumerate(s.dims) if any(a.name == name for a in dim.axes)]
        if any(a.name == name for a in s.unreduced):
            assert p == Partial(s.reduce_op)
        elif k:
            assert isinstance(p, (Shard, StridedShard)) and p.dim == k[0]
        else:
            assert p == Replicate()
    assert ss.layout(Sharding.from_dtensor(d, shape), shape).same_as(want)


def canonical_placements(d: DTensorSpec, rank: int) -> tuple:
    """Placements with dims made positive and StridedShard(k, 1) written as Shard(k)."""
    out = []
    for p in d.normalized(rank).placements:
        if isinstance(p, StridedShard) and p.split_factor == 1:
            p = Shard(p.dim)
        out.append(p)
    return tuple(out)


@SETTINGS
@given(placement_cases())
def test_dtensor_to_sharding_keeps_layout(case):
    _, shape, d = case
    want = ss.layout(d, shape)
    dims = [getattr(p, "dim", None) for p in d.normalized(len(shape)).placements]
    plain = all(not isinstance(p, StridedShard) for p in d.placements) and all(
        n % math.prod(m for m, dim in zip(d.mesh.axis_sizes, dims) if dim == k) == 0 for k, n in enumerate(shape)
    )
    try:
        s = Sharding.from_dtensor(d, shape)
    except ShardingError as e:
        event("from_dtensor refused")
        assert not plain, f"{d} over {shape} refused: {e}"
        return
    event("from_dtensor ok" + (" (sub-axes)" if any(not a.is_full for dim in s.dims for a in dim.axes) else ""))
    note(str(s))
    assert ss.layout(s, shape).same_as(want)
    # Back again: each mesh axis keeps its dim and split factor (taking mesh axes first to last
    # undoes the last-to-first insertion, so a split axis is whole again when its turn comes).
    d2 = s.to_dtensor(shape)
    assert ss.layout(d2, shape).same_as(want)
    assert canonical_placements(d2, len(shape)) == canonical_placements(d, len(shape))


@st.composite
def equivalence_pairs(draw):
    """Two specs over the same devices: variants of one spec that change only what does not move
    data (open flags, priorities, replicated axes, Shard vs StridedShard(sf=1), dim sign) or only
    its pending reductions (which axes, which op); a conversion; or unrelated random specs."""
    mesh, shape, a = draw(any_cases(pending=draw(st.booleans())))
    rank = len(shape)
    how = draw(st.sampled_from(["variant", "convert", "same-mesh", "other-mesh"]))
    if how == "same-mesh":
        b = draw(shardings(mesh, rank) | placement_lists(mesh, rank))
    elif how == "other-mesh":
        other = draw(meshes(total=mesh.size))
        b = draw(shardings(other, rank) | placement_lists(other, rank))
    elif how == "variant" and isinstance(a, Sharding):
        dims = [DimSharding(d.axes, draw(st.booleans()), None) for d in a.dims]
        rep, unr, op = (), a.unreduced, a.reduce_op
        if draw(st.sampled_from(["keep", "move"])) == "move":
            in_dims = {r.name for d in a.dims for r in d.axes}
            free = [n for n in mesh.axis_names if n not in in_dims]
            where = {n: draw(st.sampled_from(["unr", "rep", "unused"])) for n in free}
            rep = tuple(AxisRef(n) for n in free if where[n] == "rep")
            unr = tuple(AxisRef(n) for n in free if where[n] == "unr")
        if draw(st.booleans()):
            op = draw(st.sampled_from(OPS))
        b = Sharding(mesh, tuple(dims), rep, unr, op)
    elif how == "variant":
        op = draw(st.sampled_from(OPS)) if draw(st.booleans()) else None
        pl = []
        for p in a.placements:
            if isinstance(p, Shard) and draw(st.booleans()):
                p = StridedShard(p.dim, 1)
            if getattr(p, "dim", None) is not None and draw(st.booleans()):
                p = p.with_dim(p.dim + rank if p.dim < 0 else p.dim - rank)
            if isinstance(p, (Partial, Replicate)) and draw(st.sampled_from(["keep", "flip"])) == "flip":
                p = Replicate() if isinstance(p, Partial) else Partial()
            pl.append(p)
        if op is None:  # keep one op for all Partial axes
            op = next((p.reduce_op for p in a.placements if isinstance(p, Partial)), "sum")
        b = DTensorSpec(mesh, tuple(Partial(op) if isinstance(p, Partial) else p for p in pl))
    else:
        try:
            b = a.to_dtensor(shape) if isinstance(a, Sharding) else Sharding.from_dtensor(a, shape)
        except ShardingError:
            b = draw(shardings(mesh, rank) | placement_lists(mesh, rank))
    return shape, a, b


@settings(max_examples=300, deadline=None)
@given(equivalence_pairs())
def test_equivalent_matches_brute_force(pair):
    shape, a, b = pair
    note(f"{a}\n{b}")
    want = brute_same(ss.layout(a, shape), ss.layout(b, shape))
    event(f"equivalent={want}")
    assert ss.equivalent(a, b, shape) == want
    assert ss.equivalent(b, a, shape) == want
    assert ss.equivalent(a, a, shape)


@SETTINGS
@given(sharding_cases())
def test_sharding_local_shapes(case):
    mesh, shape, s = case
    lay = ss.layout(s, shape)
    blocks = tuple(ceil_div(d, dim_count(s, k)) for k, d in enumerate(shape))
    for dev in mesh.device_ids:
        local = lay.local_shape(dev)
        assert len(local) == len(shape)
        assert all(n <= b for n, b in zip(local, blocks))
        assert all(p >= 0 for p in lay.padding(dev))
    for k, d in enumerate(shape):
        if d > 0:
            assert lay.block_shape[k] == blocks[k]
        else:
            assert lay.block_shape[k] == 0


@SETTINGS
@given(placement_cases(), st.integers(-6, 6))
def test_out_of_range_dims_are_sharding_errors(case, dim):
    mesh, shape, d = case
    pl = list(d.placements)
    pl[0] = Shard(dim)
    spec = DTensorSpec(mesh, tuple(pl))
    if -len(shape) <= dim < len(shape):
        ss.layout(spec, shape)
        return
    for f in (lambda: ss.layout(spec, shape), lambda: Sharding.from_dtensor(spec, shape)):
        try:
            f()
        except ShardingError as e:
            assert e.rule == "invalid-placement"
        else:
            raise AssertionError(f"{spec} accepted for shape {shape}")


def digits(mesh: Mesh, dev: int, refs) -> tuple[int, ...]:
    """A device's coordinate along each (sub-)axis of ``refs``, from its mesh coordinate."""
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    c = mesh.coords(dev)
    out = []
    for r in refs:
        n = sizes[r.name]
        pre, k = (1, n) if r.sub is None else r.sub
        out.append((c[mesh.axis_names.index(r.name)] // (n // (pre * k))) % k)
    return tuple(out)


@SETTINGS
@given(any_cases(pending=True))
def test_reduce_groups_match_brute_force(case):
    mesh, shape, spec = case
    lay = ss.layout(spec, shape)
    groups = lay.reduce_groups()
    assert sorted(d for g in groups for d in g) == sorted(mesh.device_ids)
    assert {frozenset(g) for g in groups} == brute_groups(lay)
    for g in groups:
        # Canonical order: ascending coordinate along the unreduced axes; one block per group.
        assert list(g) == sorted(g, key=lambda d: digits(mesh, d, lay.unreduced))
        for d in g[1:]:
            assert all(list(x) == list(y) for x, y in zip(lay.indices(d), lay.indices(g[0])))


@SETTINGS
@given(any_cases(pending=True), st.sampled_from(["float64", "int32", "int64"]), st.integers(0, 2**32 - 1))
def test_assemble_combines_every_contribution(case, dtype, seed):
    """Contributions that are not the value itself (a random exact decomposition of it per
    reduce group) must reduce back to the value: every member of a group counts."""
    _, shape, spec = case
    lay = ss.layout(spec, shape)
    rng = np.random.default_rng(seed)
    a = rng.integers(-9, 10, size=shape).astype(dtype)
    shards = {}
    for g in lay.reduce_groups():
        local = a[np.ix_(*lay.indices(g[0]))] if shape else a.copy()
        if len(g) == 1 or not lay.unreduced:
            parts = [local.copy() for _ in g]
        elif lay.reduce_op == "sum":
            parts = [rng.integers(-5, 6, size=local.shape).astype(dtype) for _ in g[1:]]
            parts.insert(0, local - sum(parts, np.zeros_like(local)))
        elif lay.reduce_op == "prod":
            parts = [rng.choice([-1, 1], size=local.shape).astype(dtype) for _ in g[1:]]
            parts.insert(0, local * math.prod(parts, start=np.ones_like(local)))
        else:  # max / min: every other contribution is on the losing side of the value
            sign = -1 if lay.reduce_op == "max" else 1
            parts = [local + sign * rng.integers(0, 4, size=local.shape).astype(dtype) for _ in g]
            parts[rng.integers(len(g))] = local.copy()
        # Put the exact part somewhere other than first, so a reduction that drops members fails.
        j = rng.integers(len(parts))
        parts[0], parts[j] = parts[j], parts[0]
        shards.update(zip(g, parts))
    out = lay.assemble(shards)
    assert out.tobytes() == a.tobytes()


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int64", "uint8", "complex64", "bool"])
def test_reduce_op_identity_is_neutral(op_name, dtype):
    """Padding contributions hold the identity: combining it with any value gives that value's bits."""
    op = ss.REDUCE_OPS[op_name]
    dtype = np.dtype(dtype)
    if dtype.kind == "c" and op_name in ("max", "min"):
        return  # no order on complex numbers
    if dtype.kind == "b":
        x = np.array([False, True])
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = np.array([info.min, info.max, 0, 1, 2], dtype=dtype)
    elif dtype.kind == "c" and op_name == "prod":
        # Complex multiplication by 1+0j loses signed zeros and turns inf into nan (ac - bd):
        # no identity can be bitwise neutral there, so only ordinary values.
        x = np.array([1.5 - 2j, -3 + 0.5j, 1j], dtype=dtype)
    elif dtype.kind == "c":
        x = np.array([complex(-0.0, -0.0), complex(0.0, -0.0), complex(-0.0, 0.0), 1.5 - 2j], dtype=dtype)
    else:
        x = np.array([-0.0, 0.0, 1.5, -2.0, np.inf, -np.inf], dtype=dtype)
    e = np.full_like(x, op.identity(dtype))
    assert op.reduce([x, e]).tobytes() == x.tobytes()
    assert op.reduce([e, x]).tobytes() == x.tobytes()


@st.composite
def strided_family(draw):
    """Placement lists read as DTensor builds them: for each dim, insert the mesh axes that shard
    it from the last to the first, each at a random cut of the block order built so far (a cut may
    fall inside an axis, at a divisor of its size). The split factor is the size above the cut.
    With every dim a multiple of its axes' product, an exact Sharding must exist."""
    mesh = draw(meshes())
    rank = draw(st.sampled_from([1, 2, 3]))
    order: list[list[int]] = [[] for _ in range(rank)]  # per dim, block sizes major to minor
    placements: list = [None] * mesh.ndim
    for i in reversed(range(mesh.ndim)):
        n = mesh.axis_sizes[i]
        kind = draw(st.sampled_from(["S", "S", "R"]))
        if kind == "R":
            placements[i] = Replicate()
            continue
        k = draw(st.integers(0, rank - 1))
        cuts, bounds, prod = set(), {1}, 1
        for size in order[k]:
            cuts |= {prod * f for f in range(1, size + 1) if size % f == 0}
            prod *= size
            bounds.add(prod)
        # Cuts inside an axis first: sampled_from favours early entries, and those are the rare
        # case that needs sub-axes.
        sf = draw(st.sampled_from(sorted(cuts - bounds) + sorted(bounds)))
        # Record the new order: blocks above the cut, this axis, blocks below.
        above, rest, prod = [], list(order[k]), 1
        while rest and prod * rest[0] <= sf:
            prod *= rest[0]
            above.append(rest.pop(0))
        if prod < sf:
            q = sf // prod
            above.append(q)
            rest[0] //= q
        order[k] = above + [n] + rest
        placements[i] = StridedShard(k, sf) if sf > 1 or draw(st.booleans()) else Shard(k)
    shape = tuple(math.prod(o) * draw(st.sampled_from([1, 2, 0])) for o in order)
    return mesh, shape, DTensorSpec(mesh, tuple(placements))


@SETTINGS
@given(strided_family())
def test_strided_placements_convert(case):
    _, shape, d = case
    note(str(d))
    s = Sharding.from_dtensor(d, shape)
    note(str(s))
    assert ss.layout(s, shape).same_as(ss.layout(d, shape))
    event("sub-axes" if any(not a.is_full for dim in s.dims for a in dim.axes) else "full axes")
    assert canonical_placements(s.to_dtensor(shape), len(shape)) == canonical_placements(d, len(shape))


@SETTINGS
@given(placement_cases(), st.sampled_from(OPS), st.sampled_from(OPS))
def test_mixed_partial_ops_are_refused(case, op1, op2):
    """Two Partial axes with different ops have no defined order of reduction."""
    mesh, shape, d = case
    if mesh.ndim < 2:
        return
    pl = list(d.placements)
    pl[0], pl[-1] = Partial(op1), Partial(op2)
    spec = DTensorSpec(mesh, tuple(pl))
    ops = {p.reduce_op for p in pl if isinstance(p, Partial)}
    for f in (lambda: ss.layout(spec, shape), lambda: Sharding.from_dtensor(spec, shape)):
        try:
            f()
        except ShardingError as e:  # from_dtensor may also find no tensor-dimension form
            assert (e.rule == "mixed-reduce-ops") == (len(ops) > 1), str(e)
        else:
            assert len(ops) == 1
