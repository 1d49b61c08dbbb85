"""``plan_reshard(src, dst, shape)``: move a tensor from any layout to any other, in the fewest bytes.

The plan has up to three parts.

1. **Reductions.** Pending reductions the target does not keep are done first, on the smallest
   data: free axes the target shards with are sliced in beforehand, axes the target shards a dim
   with are reduce-scattered onto that dim, the rest all-reduced together in one collective.
2. **Moving data.** Two candidates, the cheaper in total bytes wins (ties go to the first):
   * the *structured* path (``greedy``): local slices first, all-to-alls to move axes between
     dims, collective-permutes to relabel devices while shards are small, all-gathers last, so a
     live shard never exceeds max(input, output); each step checked on the layouts;
   * the *exchange* (``exchange``): point-to-point rounds in which every device receives exactly
     the elements it lacks, the lower bound of any plan. It wins where axes move between several
     dims at once (``[{y},{x},{}] -> [{},{},{x,y}]``: 3/4 of a shard instead of one) and where
     uneven dims do not nest, which no single collective can fix.
3. **New pending reductions** (the target holds a partial value): local; a sharded dim becomes
   pending by embedding each block in an identity-filled block, a replicated one by keeping the
   value on the first device of each group and the identity elsewhere.

A target on a mesh over fewer of the source's devices (fewer ciphertexts) is laid out on the
source's devices with empty blocks on the others and reached by the exchange (``_onto_fewer``); a
target on devices the source does not have is refused. Shardings on different meshes over the
same devices are handled by re-expressing one mesh's axes in the other's (a mesh ``{x: 8}`` is ``{a: 2, b: 4}`` read major to minor), and when the
device orders differ, by one collective-permute at whichever end of the plan the shard is
smaller. Placement lists (``DTensorSpec``) convert to shardings where that is exact; DTensor's
nested uneven layouts, which no tensor-dimension sharding expresses, are planned on the layouts
themselves (reduce-scatter or all-reduce over the reduce groups, then the exchange).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from ..sharding.axes import canonical_ref
from ..errors import ShardingError
from ..sharding.layout_model import Layout
from ..sharding.mesh import Mesh
from ..sharding.placements import DTensorSpec
from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from .atoms import State, refine
from .builder import PerDevice
from .exchange import plan_exchange
from .greedy import Move, next_move, pending_plan
from .plan import ReshardPlan, Step, common_count, layout_of
from .realize import all_reduce_step, realize, scatter_step

MAX_STEPS = 64


def plan_reshard(src, dst, shape, dtype=np.float32) -> ReshardPlan:
    """Plan moving a ``shape`` tensor laid out as ``src`` to ``dst`` (Shardings, NamedShardings,
    DTensorSpecs or Layouts over the same devices; pending reductions included)."""
    shape = tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    S, T = _spec(src, shape, "source"), _spec(dst, shape, "target")
    if isinstance(S, Sharding) and isinstance(T, Sharding):
        steps, final, alts = _cached(S, T, shape, dtype.itemsize)
    else:
        steps, final, alts = _plan(S, T, shape, dtype.itemsize)
    return ReshardPlan(src, dst, shape, dtype, tuple(steps), final, alts)


@lru_cache(maxsize=4096)
def _cached(S: Sharding, T: Sharding, shape, item):
    return _plan(S, T, shape, item)


def _spec(x, shape, what: str):
    from ..sharding.dims import NamedSharding

    if isinstance(x, Layout):
        if x.shape != shape:
            raise ShardingError("shape-mismatch", f"{what} layout has shape {x.shape}, the tensor {shape}")
        return x
    if isinstance(x, NamedSharding):
        x = x.to_sharding(len(shape))
    if isinstance(x, DTensorSpec):
        try:
            x = Sharding.from_dtensor(x, shape)
        except ShardingError:
            return layout_of(x, shape)
    if isinstance(x, Sharding):
        x.check_rank(shape)
        return _plain(x)
    raise ShardingError("invalid-spec", f"plan_reshard: the {what} must be a Sharding, NamedSharding, DTensorSpec or Layout, got {type(x).__name__}")


@lru_cache(maxsize=16384)
def _plain(s: Sharding) -> Sharding:
    """Only what decides the layout: axes per dim and pending reductions (no open dims, priorities
    or replicated markers)."""
    if not s.replicated and all(not d.is_open and d.priority is None for d in s.dims):
        return s
    return Sharding(s.mesh, tuple(DimSharding(d.axes) for d in s.dims), (), s.unreduced, s.reduce_op)


def _devices(spec) -> frozenset[int]:
    return frozenset(spec.mesh.device_ids)


def _plan(S, T, shape, item) -> tuple[list[Step], Any, dict]:
    if _devices(S) != _devices(T):
        if _devices(T) < _devices(S):
            return _onto_fewer(S, T, shape, item)
        stray = sorted(_devices(T) - _devices(S))
        raise ShardingError(
            "wrong-mesh",
            f"cannot reshard from @{S.mesh.name} (devices {_ids(_devices(S))}) to @{T.mesh.name} (devices "
            f"{_ids(_devices(T))}): the target's devices {_ids(stray)} are not among the source's; a reshard "
            "may move a tensor onto the same devices or onto fewer of them (the rest left empty), not onto others",
        )
    LS, LT = layout_of(S, shape), layout_of(T, shape)
    if LS.same_as(LT):
        return [], T, {}
    if isinstance(S, Sharding) and isinstance(T, Sharding):
        if _same_mesh_shape(S.mesh, T.mesh):
            steps, alts = _same_mesh(S, _rebind(T, S.mesh), shape, item)
            return steps, T, alts
        return _cross_mesh(S, T, shape, item)
    return _generic(S, T, shape, item), T, {}


# -- one mesh ---------------------------------------------------------------------------------------
def _same_mesh(S: Sharding, T: Sharding, shape, item) -> tuple[list[Step], dict]:
    mesh = S.mesh
    table = refine(mesh, [S, T])
    if table is None:
        return _generic(S, T, shape, item), {"generic": None}
    C, target = State.of(S, table), State.of(T, table)
    steps: list[Step] = []
    g = 1
    for a in C.unreduced:
        g *= mesh.axis_size(a)
    if C.unreduced and C.unreduced == target.unreduced and {C.reduce_op, target.reduce_op} == {"sum", "avg"} and g & (g - 1) == 0:
        # a pending sum is a pending average of g-times-larger contributions: rescale locally
        # (only for g a power of two, where scaling by g or 1/g is exact)
        nxt = State(C.dims, C.unreduced, target.reduce_op)
        steps.append(_rescale(C.sharding(mesh), nxt.sharding(mesh), shape, item, mesh, C))
        C = nxt
    banned: set = set()
    split = None  # (index into steps, state) once no reduction is left
    failed = False
    while C != target:
        if split is None and not pending_plan(C, target)[0]:
            split = (len(steps), C)
        m = next_move(C, target, mesh, frozenset(banned))
        if m is None or len(steps) >= MAX_STEPS:
            failed = True
            break
        st = realize(m, C.sharding(mesh), m.after.sharding(mesh), shape, item, mesh)
        if st is None:
            banned.add(m.signature)
            continue
        steps.append(st)
        C = m.after
        banned = set()
    if split is None:
        split = (len(steps), C)
    k, Cr = split
    if failed and pending_plan(Cr, target)[0]:  # pragma: no cover - an all-reduce always applies
        raise ShardingError("no-plan", f"no way to reduce {S} towards {T}")
    greedy_bytes = None if failed else sum(s.bytes for s in steps[k:])
    alts = {"structured": greedy_bytes}
    # the exchange from the reduced state, then new pending reductions locally
    create = pending_plan(Cr, target)[1]
    Tx = State(target.dims, frozenset(set(target.unreduced) - create), target.reduce_op)
    lb = _lower_bound(Cr.sharding(mesh), Tx.sharding(mesh), shape, item)
    if greedy_bytes is not None and greedy_bytes <= lb:
        return steps, alts
    tail = []
    src_spec = Cr.sharding(mesh)
    if Cr != Tx:
        ex = plan_exchange(src_spec, Tx.sharding(mesh), shape, item)
        if ex is None:  # pragma: no cover - every element has a holder
            raise ShardingError("no-plan", f"no exchange from {src_spec} to {Tx.sharding(mesh)}")
        tail.append(ex)
    if Tx != target:
        atoms = tuple(a for a in target.unreduced if a not in Tx.unreduced)
        st = realize(Move("unreduce", target, atoms), Tx.sharding(mesh), target.sharding(mesh), shape, item, mesh)
        tail.append(st)
    alts["exchange"] = sum(s.bytes for s in tail)
    if greedy_bytes is not None and greedy_bytes <= alts["exchange"]:
        return steps, alts
    return steps[:k] + tail, alts


def _rescale(before, after, shape, item, mesh, C) -> Step:
    g = 1
    for a in C.unreduced:
        g *= mesh.axis_size(a)
    factor = float(g) if C.reduce_op == "sum" else 1.0 / g
    z = {d: 0 for d in mesh.device_ids}
    return Step("rescale", before, after, shape, item, reduce_op=after.reduce_op, sent=z, received=z, minimum=z, data=factor)


def _lower_bound(A, B, shape, item) -> int:
    """Bytes every device must receive at least: the elements of its new block it does not hold."""
    LA, LB = layout_of(A, shape), layout_of(B, shape)
    if LA.boxes is not None and LB.boxes is not None and np.array_equal(LA.boxes.ids, LB.boxes.ids):
        a, b = LA.boxes, LB.boxes  # the overlap of two ranges per dim, all devices at once
        have = np.clip(np.minimum(a.hi, b.hi) - np.maximum(a.lo, b.lo), 0, None).prod(axis=1)
        return int((b.sizes.prod(axis=1) - have).sum()) * item
    total = 0
    lacking: dict[tuple[int, int], int] = {}  # by block: devices holding one block share its tuple
    common: dict[tuple[int, int], int] = {}  # by index arrays, which blocks share too
    for d in LB.devices:
        mine, held = LB.index_map[d], LA.index_map[d]
        key = (id(mine), id(held))
        if key not in lacking:
            have = 1
            for a, b in zip(mine, held):
                pair = (id(a), id(b))
                if pair not in common:
                    common[pair] = common_count(a, b)
                have *= common[pair]
            lacking[key] = math.prod(len(ix) for ix in mine) - have
        total += lacking[key] * item
    return total


# -- onto fewer devices -----------------------------------------------------------------------------
def _onto_fewer(S, T, shape, item) -> tuple[list[Step], Any, dict]:
    """Onto a mesh over some of the source's devices (fewer ciphertexts, the FHE seed's [64][112x112]
    on 64 -> [32][2x112x112] on 32): the target laid out on the source's devices, the devices
    outside the target's mesh holding empty blocks (a scalar stays where it is), reached by
    reducing pending sums and then the exchange, each target device receiving exactly the
    elements of its new block it lacks."""
    LS, LT = layout_of(S, shape), layout_of(T, shape)
    if LT.unreduced:
        raise ShardingError(
            "wrong-mesh",
            f"cannot reshard onto @{T.mesh.name}, a mesh over fewer devices than @{S.mesh.name}, as a pending "
            f"reduction (unreduced over {', '.join(r.short() for r in LT.unreduced)}): reduce it on the source's "
            "mesh first",
        )
    empty = tuple(np.arange(0) for _ in shape)
    index_map = {d: LT.index_map[d] if d in LT.index_map else (empty if shape else LS.index_map[d]) for d in LS.devices}
    steps = _generic(S, Layout(LS.mesh, shape, index_map), shape, item)
    return steps, T, {"exchange": sum(s.bytes for s in steps)}


def _ids(devices) -> str:
    """Device ids, runs shortened: [0..31, 40]."""
    out, run = [], []
    for d in sorted(devices):
        if run and d == run[-1] + 1:
            run.append(d)
            continue
        if run:
            out.append(f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [d]
    if run:
        out.append(f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
    return "[" + ", ".join(out) + "]"


# -- several meshes ---------------------------------------------------------------------------------
def _same_mesh_shape(a: Mesh, b: Mesh) -> bool:
    return a.axis_names == b.axis_names and a.axis_sizes == b.axis_sizes and a.device_ids == b.device_ids


def _rebind(s: Sharding, mesh: Mesh) -> Sharding:
    return Sharding(mesh, s.dims, s.replicated, s.unreduced, s.reduce_op)


def _strides(mesh: Mesh) -> dict[str, int]:
    out, stride = {}, 1
    for name, n in reversed(list(zip(mesh.axis_names, mesh.axis_sizes))):
        out[name] = stride
        stride *= n
    return out


def translate(s: Sharding, to: Mesh) -> Sharding | None:
    """The same layout written with the axes of ``to`` (same device order), or None when some axis
    of ``s`` does not fall on whole (sub-)axes of ``to``."""
    fr = s.mesh
    if fr.device_ids != to.device_ids:
        return None
    if _same_mesh_shape(fr, to):
        return _rebind(s, to)
    sf, st = _strides(fr), _strides(to)

    def conv(ref):
        n = fr.shape[ref.name]
        pre, hi_pre = ref.interval(n)
        k = hi_pre // pre
        lo = sf[ref.name] * (n // (pre * k))
        hi = lo * k
        out, cur = [], hi
        while cur > lo:
            y = next((a for a in to.axis_names if st[a] < cur <= st[a] * to.shape[a]), None)
            if y is None:
                return None
            low = max(lo, st[y])
            top = st[y] * to.shape[y]
            if cur % low or low % st[y] or top % cur:
                return None
            out.append(canonical_ref(y, top // cur, cur // low, to.shape[y]))
            cur = low
        return out

    try:
        dims = []
        for d in s.dims:
            axes = []
            for r in d.axes:
                c = conv(r)
                if c is None:
                    return None
                axes += c
            dims.append(DimSharding(tuple(axes)))
        unr = []
        for r in s.unreduced:
            c = conv(r)
            if c is None:
                return None
            unr += c
        out = Sharding(to, tuple(dims), (), tuple(unr), s.reduce_op)
    except ShardingError:
        return None
    return out


def _cross_mesh(S: Sharding, T: Sharding, shape, item):
    T1 = translate(T, S.mesh)
    if T1 is not None and layout_of(T1, shape).same_as(layout_of(T, shape)):
        steps, alts = _same_mesh(S, T1, shape, item)
        return steps, T, alts
    S2 = translate(S, T.mesh)
    if S2 is not None and layout_of(S2, shape).same_as(layout_of(S, shape)):
        steps, alts = _same_mesh(S2, T, shape, item)
        return steps, T, alts
    # Different device orders: a mesh with T's axes in S's device order.
    M2 = T.mesh
    Mx = Mesh(list(zip(M2.axis_names, M2.axis_sizes)), S.mesh.device_ids, name=M2.name + "_in_" + S.mesh.name)
    Sx = translate(S, Mx)
    if Sx is None or not layout_of(Sx, shape).same_as(layout_of(S, shape)):
        return _generic(S, T, shape, item), T, {"generic": None}
    Tx = _rebind(T, Mx)
    # A: plan on Mx, relabel at the end
    a_steps, _ = _same_mesh(Sx, Tx, shape, item)
    a_steps = list(a_steps) + _relabel(Tx, T, shape, item)
    # B: relabel first, plan on T's mesh
    S2 = _rebind(Sx, M2)
    b_steps, _ = _same_mesh(S2, T, shape, item)
    b_steps = _relabel(Sx, S2, shape, item) + list(b_steps)
    a, b = sum(s.bytes for s in a_steps), sum(s.bytes for s in b_steps)
    return (a_steps if a <= b else b_steps), T, {"relabel_last": a, "relabel_first": b}


def _relabel(A, B, shape, item) -> list[Step]:
    if layout_of(A, shape).same_as(layout_of(B, shape)):
        return []
    ex = plan_exchange(A, B, shape, item)
    if ex is None:  # pragma: no cover
        raise ShardingError("no-plan", f"cannot relabel {A} as {B}")
    return [ex]


# -- layouts no sharding expresses ------------------------------------------------------------------
def _generic(S, T, shape, item) -> list[Step]:
    """Reduce over the reduce groups (a reduce-scatter when one dim of the target cuts each group's
    block into consecutive pieces in group order, else an all-reduce), then the exchange."""
    L, L2 = layout_of(S, shape), layout_of(T, shape)
    steps: list[Step] = []
    cur: Any = S
    keep_pending = (
        bool(L.unreduced) and bool(L2.unreduced) and L.mesh == L2.mesh and L.unreduced == L2.unreduced
        and L.reduce_op == L2.reduce_op
    )
    if L.unreduced and not keep_pending:
        st = _layout_reduce_scatter(S, L, L2, shape, item) or _layout_all_reduce(S, L, shape, item)
        steps.append(st)
        cur = st.after
    target_plain: Any = T
    if L2.unreduced and not keep_pending:
        target_plain = L2.without_pending()
    if not layout_of(cur, shape).same_as(layout_of(target_plain, shape)):
        ex = plan_exchange(cur, target_plain, shape, item)
        if ex is None:  # pragma: no cover
            raise ShardingError("no-plan", f"no exchange from {cur} to {target_plain}")
        steps.append(ex)
    if target_plain is not T:
        devices = sorted(L2.devices)
        table = [[L2._contributes_value(d), *L2.local_shape(d)] for d in devices]
        data = PerDevice.of_table(np.asarray(devices), np.asarray(table), lambda row: (bool(row[0]), row[1:]))
        z = dict.fromkeys(L2.devices, 0)
        steps.append(Step("unreduce", target_plain, T, shape, item, reduce_op=L2.reduce_op, sent=z, received=z, minimum=z,
                          data=data))
    return steps


def _layout_reduce_scatter(S, L: Layout, L2: Layout, shape, item) -> Step | None:
    """A reduce-scatter over the reduce groups onto the first dim where ``L2`` splits their
    block (groups combine in their canonical order), or None."""
    if L.mesh != L2.mesh or L2.unreduced:
        return None
    after = L2.without_pending()
    labels = tuple(r.short() for r in L.unreduced)
    for k in range(len(shape)):
        st = scatter_step(S, after, L, L2, k, tuple(L.reduce_groups()), labels, item, lambda G: G)
        if st is not None:
            return st
    return None


def _layout_all_reduce(S, L: Layout, shape, item) -> Step:
    """An all-reduce over the reduce groups."""
    after = L.without_pending()
    return all_reduce_step(S, after, L, after, tuple(L.reduce_groups()), tuple(r.short() for r in L.unreduced), item)
