"""Plans between shardings on different meshes over the same devices.

One mesh's axes are re-expressed in the other's (``translate``: a mesh ``{x: 8}`` is
``{a: 2, b: 4}`` read major to minor); when the device orders differ, one collective-permute
relabels devices at whichever end of the plan the shard is smaller.
"""

from __future__ import annotations

from ...errors import ShardingError
from ...sharding.axes import canonical_ref
from ...sharding.dims import DimSharding, Sharding
from ...sharding.mesh import Mesh
from .exchange import plan_exchange
from .generic import generic_plan
from .plan import Planned, Step, layout_of
from .same_mesh import same_mesh_plan


def same_mesh_shape(a: Mesh, b: Mesh) -> bool:
    """Whether two meshes have the same axes, sizes and device order (a sharding means the same on both)."""
    return a.axis_names == b.axis_names and a.axis_sizes == b.axis_sizes and a.device_ids == b.device_ids


def rebind(s: Sharding, mesh: Mesh) -> Sharding:
    """``s`` on ``mesh`` (same axes): the same dims, pending reductions and replicated axes."""
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
    if same_mesh_shape(fr, to):
        return rebind(s, to)
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

    def conv_all(refs) -> tuple | None:
        """Every axis ref of ``refs`` on ``to``, in order, or None where one does not convert."""
        parts = [conv(r) for r in refs]
        return None if any(c is None for c in parts) else tuple(a for c in parts for a in c)

    try:
        dims = [conv_all(d.axes) for d in s.dims]
        unreduced = conv_all(s.unreduced)
        if unreduced is None or any(axes is None for axes in dims):
            return None
        return Sharding(to, tuple(DimSharding(axes) for axes in dims), (), unreduced, s.reduce_op)
    except ShardingError:
        return None


def cross_mesh_plan(source: Sharding, target: Sharding, shape, item) -> Planned:
    """The steps from ``source`` to ``target`` on another mesh over the same devices, the target, and ``alts``."""
    T1 = translate(target, source.mesh)
    if T1 is not None and layout_of(T1, shape).same_as(layout_of(target, shape)):
        steps, alts = same_mesh_plan(source, T1, shape, item)
        return Planned(steps, target, alts)
    S2 = translate(source, target.mesh)
    if S2 is not None and layout_of(S2, shape).same_as(layout_of(source, shape)):
        steps, alts = same_mesh_plan(S2, target, shape, item)
        return Planned(steps, target, alts)
    # Different device orders: a mesh with the target's axes in the source's device order.
    M2 = target.mesh
    Mx = Mesh(list(zip(M2.axis_names, M2.axis_sizes)), source.mesh.device_ids, name=M2.name + "_in_" + source.mesh.name)
    Sx = translate(source, Mx)
    if Sx is None or not layout_of(Sx, shape).same_as(layout_of(source, shape)):
        return Planned(generic_plan(source, target, shape, item), target, {"generic": None})
    Tx = rebind(target, Mx)
    # A: plan on Mx, relabel at the end
    a_steps, _ = same_mesh_plan(Sx, Tx, shape, item)
    a_steps = list(a_steps) + _relabel(Tx, target, shape, item)
    # B: relabel first, plan on the target's mesh
    S2 = rebind(Sx, M2)
    b_steps, _ = same_mesh_plan(S2, target, shape, item)
    b_steps = _relabel(Sx, S2, shape, item) + list(b_steps)
    a, b = sum(s.bytes for s in a_steps), sum(s.bytes for s in b_steps)
    return Planned(a_steps if a <= b else b_steps, target, {"relabel_last": a, "relabel_first": b})


def _relabel(A, B, shape, item) -> list[Step]:
    if layout_of(A, shape).same_as(layout_of(B, shape)):
        return []
    ex = plan_exchange(A, B, shape, item)
    if ex is None:  # pragma: no cover
        raise ShardingError("no-plan", f"cannot relabel {A} as {B}")
    return [ex]
