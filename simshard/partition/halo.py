"""Halo exchange: an op with sliding windows run on row blocks instead of on gathered rows.

A convolution, pad or slice declares its windows (``ops.windows``): result row ``o`` of a dim
reads a run of operand rows. The factor rules call those dims permutation factors, so the
ordinary candidates keep them whole (gathering a sharded operand first). A *halo candidate*
splits a window's result dim over mesh axes instead, as a tensor-dim Sharding does (Shardy's
ceil-and-pad blocks), and gives each device the operand rows its result block reads:

* ``halo_layout``: per device, from its result block ``[o0, o1)`` (read off the result's
  layout, so strides and uneven blocks come out per device, never from a formula over the
  operand's blocks), the operand rows ``[r0, r1)`` the block reads, and the padding the local
  kernel adds at the tensor's edges only (``ops.windows.block_window``). The operand is moved
  to that layout (a ``Layout``: neighbouring devices' rows overlap) by the reshard planner,
  whose exchange gives every device exactly the rows it lacks, one collective-permute per round:
  the left halo from the device before, the right halo from the device after, or from further
  away when blocks are narrower than the halo; rows a device holds but does not read are dropped.
* the op then runs locally with ``window_params``: the block's edge padding and its own row
  count, so its result is exactly the result sharding's block.

The candidate is priced like any other, in the bytes its reshards move, so it wins where the
halo moves fewer bytes than gathering.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Mapping, Sequence

import numpy as np

from ..errors import ShardingError
from ..ops.windows import LocalWindow, Window, block_window
from ..sharding.axes import AxisRef, check_coexist
from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from ..sharding.layout_model import Layout
from .plan import layout_of

Axes = tuple[AxisRef, ...]


@dataclass(frozen=True, eq=False)
class Halo:
    """An op run on row blocks: its split windows, the mesh axes of each, and per device the
    local window of each windowed operand dim (``((dim, LocalWindow), ...)``, for ``window_params``)."""

    windows: tuple[Window, ...]
    axes: tuple[Axes, ...]
    local: Mapping[int, tuple[tuple[int, LocalWindow], ...]]


def halo_choices(windows: Sequence[Window], operand_specs, result_specs) -> list[tuple[Axes, ...]]:
    """Per window, the axes to split its result dim with: none, those the result is wanted on
    there, those the operand lies on there; every combination but all-none (the ordinary
    candidates cover that)."""
    per = []
    for w in windows:
        opts: list[Axes] = [()]
        for spec, dim in ((result_specs[0] if result_specs else None, w.result_dim),
                          (operand_specs[w.operand] if w.operand < len(operand_specs) else None, w.dim)):
            if spec is not None and dim < len(spec.dims) and spec.dims[dim].axes:
                axes = tuple(spec.dims[dim].axes)
                if axes not in opts:
                    opts.append(axes)
        per.append(opts)
    return [c for c in product(*per) if any(c)]


def apply_halo(windows: Sequence[Window], choice: Sequence[Axes], in_sh: Sequence, out_sh: Sequence,
               in_shapes, out_shapes, reserved: Sequence[AxisRef] = ()):
    """The operand layouts and result shardings of running on row blocks: result 0 split over
    ``choice[k]`` on window k's result dim, windowed operands laid out as their blocks read
    (``halo_layout``). None when the split is not possible: an axis already used by the
    candidate (or ``reserved``), a windowed dim the candidate already shards, windows over more
    than one operand."""
    picked = [(w, a) for w, a in zip(windows, choice) if a]
    if not picked or len({w.operand for w, _ in picked}) != 1:
        return None
    t = picked[0][0].operand
    base = out_sh[0]
    if not isinstance(base, Sharding) or not isinstance(in_sh[t], Sharding):
        return None
    mesh = base.mesh
    used = list(reserved) + [a for s in list(in_sh) + list(out_sh) if isinstance(s, Sharding)
                             for a in tuple(ax for d in s.dims for ax in d.axes) + tuple(s.unreduced)]
    dims = list(base.dims)
    for w, axes in picked:
        if dims[w.result_dim].axes or in_sh[t].dims[w.dim].axes:
            return None
        for a in axes:
            if any(_clash(a, u, mesh.shape) for u in used):
                return None
            used.append(a)
        dims[w.result_dim] = DimSharding(axes)
    try:
        out0 = Sharding(mesh, tuple(dims), (), base.unreduced, base.reduce_op)
    except ShardingError:
        return None
    lay, local = halo_layout(layout_of(in_sh[t], in_shapes[t]), layout_of(out0, out_shapes[0]), [w for w, _ in picked])
    ins = list(in_sh)
    ins[t] = lay
    return tuple(ins), (out0,) + tuple(out_sh[1:]), Halo(tuple(w for w, _ in picked), tuple(a for _, a in picked), local)


def halo_layout(operand: Layout, result: Layout, windows: Sequence[Window]):
    """The operand laid out as each device's result block reads it: ``operand``'s indices with
    each window's dim replaced by the rows that device's result rows read (``block_window``); and
    per device its local windows ``((dim, LocalWindow), ...)``. Result blocks must be runs."""
    shared: dict[bytes, np.ndarray] = {}  # devices reading the same rows share one index array
    index_map, local = {}, {}
    for d in operand.devices:
        idx = list(operand.index_map[d])
        here = []
        for w in windows:
            out = result.index_map[d][w.result_dim]
            o0, o1 = (int(out[0]), int(out[-1]) + 1) if len(out) else (0, 0)
            if o1 - o0 != len(out):
                raise ShardingError("halo-not-contiguous",
                                    f"result dim {w.result_dim}: device {d}'s block is not one run of rows")
            bw = block_window(w, o0, o1, operand.shape[w.dim])
            rows = shared.setdefault(bw.rows.tobytes(), bw.rows)
            rows.flags.writeable = False
            idx[w.dim] = rows
            here.append((w.dim, bw.local))
        index_map[d] = tuple(idx)
        local[d] = tuple(here)
    return Layout(operand.mesh, operand.shape, index_map, operand.unreduced, operand.reduce_op), local


def _clash(a: AxisRef, b: AxisRef, sizes) -> bool:
    return a.name == b.name and (a == b or check_coexist(a, b, sizes[a.name]) is not None)
