"""JAX's ``gather`` and the reversals and index-ordered takes other primitives need, as ``take``.

``gather`` is imported where it is a ``take`` along one operand dim (``x[ids]``, ``jnp.take``,
an embedding lookup): one index per result position, whole slices of the other dims. Gathers
with batching dims (``take_along_axis``) or partial slices are refused, naming the line.
"""

from __future__ import annotations

import numpy as np

from ..tracing.state import as_tracer, bind
from .common import unsupported


def take_reversed(x, dims) -> object:
    """``x`` reversed along each of ``dims`` (a take of the indices n-1, ..., 0)."""
    out = as_tracer(x)
    for d in dims:
        n = out.shape[d]
        out = bind("take", out, np.arange(n - 1, -1, -1, dtype=np.int32), axis=int(d))
    return out


def take_along(x, indices, axis: int):
    """``np.take_along_axis(x, indices, axis)`` (torch's ``gather``): ``indices`` of ``x``'s rank,
    no larger than ``x`` in the other dims. A take on the flattened array at each element's flat
    position (the index along ``axis``, its own coordinates along the others): exact, it moves
    elements and computes nothing."""
    x, idx = as_tracer(x), as_tracer(indices)
    shape = tuple(idx.shape)
    if shape[axis] == 1 and all(shape[d] == x.shape[d] for d in range(x.ndim) if d != axis):
        return _pick_one(x, idx, axis)
    strides = [int(np.prod(x.shape[d + 1:], dtype=np.int64)) for d in range(x.ndim)]
    flat = bind("mul", idx, np.asarray(strides[axis], idx.dtype))
    for d in range(x.ndim):
        if d != axis and shape[d] > 1:
            coord = bind("iota", shape=shape, dimension=d, dtype=np.dtype(idx.dtype))
            flat = bind("add", flat, bind("mul", coord, np.asarray(strides[d], idx.dtype)))
    size = int(np.prod(shape, dtype=np.int64))
    picked = bind("take", bind("reshape", x, new_shape=(x.size,)), bind("reshape", flat, new_shape=(size,)), axis=0)
    return bind("reshape", picked, new_shape=shape)


def _pick_one(x, idx, axis: int):
    """One element per row along ``axis`` (cross-entropy's label lookup) as a masked sum: the
    rows stay whole arrays of ``x``'s shape, so ``axis`` may stay sharded (each device sums its
    part, one of which holds the element; the rest add zeros, so the sum is exact)."""
    shape = tuple(x.shape)
    positions = bind("iota", shape=shape, dimension=axis, dtype=np.dtype(idx.dtype))
    wanted = bind("broadcast_in_dim", bind("reshape", idx, new_shape=shape[:axis] + shape[axis + 1:]), shape=shape,
                  broadcast_dimensions=tuple(d for d in range(x.ndim) if d != axis))
    picked = bind("select", bind("eq", positions, wanted), x, np.zeros((), x.dtype))
    return bind("reshape", bind("reduce_sum", picked, axes=(axis,)), new_shape=tuple(idx.shape))


def gather(eqn, x, indices):
    """``gather`` that is a take along one dim (module docstring); else refused."""
    dn, sizes = eqn.params["dimension_numbers"], tuple(int(s) for s in eqn.params["slice_sizes"])
    if getattr(dn, "operand_batching_dims", ()) or len(dn.start_index_map) != 1 or tuple(dn.collapsed_slice_dims) != tuple(dn.start_index_map):
        raise unsupported("JAX", "gather", f"only a take along one dim is imported, not {dn}", eqn.where)
    (axis,) = dn.start_index_map
    x = as_tracer(x)
    full = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    if sizes != full or indices.shape[-1:] != (1,):
        raise unsupported("JAX", "gather", f"slices {sizes} of an operand {tuple(x.shape)}: only whole slices "
                          "along the other dims are imported", eqn.where)
    idx = bind("reshape", as_tracer(indices), new_shape=tuple(indices.shape[:-1]))
    taken = bind("take", x, idx, axis=int(axis))
    # take's dims: operand dims before axis, index dims, operand dims after; JAX puts the operand's
    # dims at offset_dims and the index dims, in order, at the others
    labels = [("o", d) for d in range(axis)] + [("b", k) for k in range(idx.ndim)] + [("o", d) for d in range(axis + 1, x.ndim)]
    operand_dims = iter(d for d in range(x.ndim) if d != axis)
    batch_dims = iter(range(idx.ndim))
    order = [("o", next(operand_dims)) if pos in tuple(dn.offset_dims) else ("b", next(batch_dims))
             for pos in range(len(labels))]
    perm = tuple(labels.index(lab) for lab in order)
    return taken if perm == tuple(range(len(perm))) else bind("transpose", taken, perm=perm)


def scatter_add(eqn, x, indices, updates):
    """``scatter-add`` that is the transpose of a take along one dim (an embedding's gradient):
    ``x`` plus, for each index, its update row, as a contraction of a one-hot matrix of the
    indices with the updates (each row of the result sums the updates of its index; indices out
    of range match no row, so they are dropped, as JAX's default mode does)."""
    dn = eqn.params["dimension_numbers"]
    ok = (not getattr(dn, "operand_batching_dims", ()) and len(dn.scatter_dims_to_operand_dims) == 1
          and tuple(dn.inserted_window_dims) == tuple(dn.scatter_dims_to_operand_dims) and indices.shape[-1:] == (1,))
    x, upd = as_tracer(x), as_tracer(updates)
    window = tuple(int(d) for d in dn.update_window_dims)
    if not ok or len(window) != x.ndim - 1:
        raise unsupported("JAX", "scatter-add", f"only the transpose of a take along one dim is imported, not {dn}",
                          eqn.where)
    (axis,) = dn.scatter_dims_to_operand_dims
    batch = tuple(d for d in range(upd.ndim) if d not in window)
    n = int(np.prod([upd.shape[d] for d in batch], dtype=np.int64))
    rows = bind("reshape", bind("transpose", upd, perm=batch + window), new_shape=(n,) + tuple(upd.shape[d] for d in window))
    idx = bind("reshape", as_tracer(indices), new_shape=(n,))
    size = x.shape[axis]
    positions = bind("iota", shape=(n, size), dimension=1, dtype=np.dtype(idx.dtype))
    hot = bind("eq", positions, bind("broadcast_in_dim", idx, shape=(n, size), broadcast_dimensions=(0,)))
    summed = bind("dot_general", bind("convert", hot, dtype=np.dtype(upd.dtype)), rows,
                  contracting=((0,), (0,)), batch=((), ()))  # [size, other dims of x in order]
    perm = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, x.ndim))
    return bind("add", x, bind("transpose", summed, perm=perm) if perm != tuple(range(x.ndim)) else summed)
