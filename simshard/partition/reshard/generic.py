"""Plans on layouts no sharding expresses, and onto a mesh over fewer devices.

DTensor's nested uneven layouts are planned on the layouts themselves: reduce-scatter or
all-reduce over the reduce groups, then the exchange. A target on a mesh over some of the
source's devices (fewer ciphertexts) is laid out on the source's devices with empty blocks on
the others and reached the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ShardingError
from ...sharding.layout import Layout
from ..builder import PerDevice
from .exchange import plan_exchange
from .plan import Planned, Step, layout_of
from .reductions import all_reduce_step, scatter_step


def generic_plan(source, target, shape, item) -> list[Step]:
    """Reduce over the reduce groups (a reduce-scatter when one dim of the target cuts each group's
    block into consecutive pieces in group order, else an all-reduce), then the exchange."""
    L, L2 = layout_of(source, shape), layout_of(target, shape)
    steps: list[Step] = []
    cur: Any = source
    keep_pending = (
        bool(L.unreduced) and bool(L2.unreduced) and L.mesh == L2.mesh and L.unreduced == L2.unreduced
        and L.reduce_op == L2.reduce_op
    )
    if L.unreduced and not keep_pending:
        st = _layout_reduce_scatter(source, L, L2, shape, item) or _layout_all_reduce(source, L, shape, item)
        steps.append(st)
        cur = st.after
    target_plain: Any = target
    if L2.unreduced and not keep_pending:
        target_plain = L2.without_pending()
    if not layout_of(cur, shape).same_as(layout_of(target_plain, shape)):
        ex = plan_exchange(cur, target_plain, shape, item)
        if ex is None:  # pragma: no cover
            raise ShardingError("no-plan", f"no exchange from {cur} to {target_plain}")
        steps.append(ex)
    if target_plain is not target:
        devices = sorted(L2.devices)
        table = [[L2.contributes_value(d), *L2.local_shape(d)] for d in devices]
        data = PerDevice.of_table(np.asarray(devices), np.asarray(table), lambda row: (bool(row[0]), row[1:]))
        z = dict.fromkeys(L2.devices, 0)
        steps.append(Step("unreduce", target_plain, target, shape, item, reduce_op=L2.reduce_op, sent=z, received=z, minimum=z,
                          data=data))
    return steps


def _layout_reduce_scatter(source, L: Layout, L2: Layout, shape, item) -> Step | None:
    """A reduce-scatter over the reduce groups onto the first dim where ``L2`` splits their
    block (groups combine in their canonical order), or None."""
    if L.mesh != L2.mesh or L2.unreduced:
        return None
    after = L2.without_pending()
    labels = tuple(r.short() for r in L.unreduced)
    for k in range(len(shape)):
        st = scatter_step(source, after, L, L2, k, tuple(L.reduce_groups()), labels, item, lambda G: G)
        if st is not None:
            return st
    return None


def _layout_all_reduce(source, L: Layout, shape, item) -> Step:
    """An all-reduce over the reduce groups."""
    after = L.without_pending()
    return all_reduce_step(source, after, L, after, tuple(L.reduce_groups()), tuple(r.short() for r in L.unreduced), item)


def onto_fewer_plan(source, target, shape, item) -> Planned:
    """Onto a mesh over some of the source's devices (fewer ciphertexts, the FHE seed's [64][112x112]
    on 64 -> [32][2x112x112] on 32): the target laid out on the source's devices, the devices
    outside the target's mesh holding empty blocks (a scalar stays where it is), reached by
    reducing pending sums and then the exchange, each target device receiving exactly the
    elements of its new block it lacks."""
    LS, LT = layout_of(source, shape), layout_of(target, shape)
    if LT.unreduced:
        raise ShardingError(
            "wrong-mesh",
            f"cannot reshard onto @{target.mesh.name}, a mesh over fewer devices than @{source.mesh.name}, as a pending "
            f"reduction (unreduced over {', '.join(r.short() for r in LT.unreduced)}): reduce it on the source's "
            "mesh first",
        )
    empty = tuple(np.arange(0) for _ in shape)
    index_map = {d: LT.index_map[d] if d in LT.index_map else (empty if shape else LS.index_map[d]) for d in LS.devices}
    steps = generic_plan(source, Layout(LS.mesh, shape, index_map), shape, item)
    return Planned(steps, target, {"exchange": sum(s.bytes for s in steps)})
