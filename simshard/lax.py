"""``ss.lax``: the ``jax.lax`` functions simshard traces, with JAX's signatures and ``out_sharding``.

``dot_general``, ``broadcast_in_dim``, ``broadcasted_iota`` / ``iota``, ``reshape``, ``slice``,
``dynamic_slice``, ``dynamic_update_slice``, ``transpose``. They work inside ``ss.jit`` /
``ss.trace``; unlike ``simshard.numpy`` they do no numpy-style broadcasting or promotion.
The collectives of manual regions (``psum``, ``pmax``, ``pmin``, ``all_gather``,
``psum_scatter``, ``ppermute``, ``all_to_all``, ``axis_index``) live here too, as in jax.lax, and
so does control flow (``scan``, ``fori_loop``, ``while_loop``, ``cond``, ``switch``:
``simshard.transforms.control``) and ``stop_gradient``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .tracing import committed as _committed, lowering as _lo
from .manual import all_gather, all_to_all, axis_index, pmax, pmin, ppermute, psum, psum_scatter  # noqa: F401
from .tracing.tracer import TraceError, Tracer, bind
from .transforms.control import cond, fori_loop, scan, switch, while_loop  # noqa: F401


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
    """``lax.dot_general``: ``dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``.

    The result is ``[batch..., lhs free..., rhs free...]``."""
    (lc, rc), (lb, rb) = dimension_numbers
    return _lo.dot_general(lhs, rhs, (tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)), preferred_element_type,
                           out_sharding=out_sharding)


def broadcast_in_dim(operand, shape, broadcast_dimensions, *, out_sharding=None):
    """Operand dim k becomes result dim ``broadcast_dimensions[k]``; other result dims are new.
    ``out_sharding`` may shard any result dim (as in JAX, no compatibility check here)."""
    x = _lo.as_tracer(operand)
    shape = tuple(int(s) for s in shape)
    bd = tuple(int(d) for d in broadcast_dimensions)
    if x.shape == shape and bd == tuple(range(x.ndim)):
        return _lo.apply_out(x, out_sharding, "broadcast_in_dim")
    return _lo.bind_out("broadcast_in_dim", x, shape=shape, broadcast_dimensions=bd, out_sharding=out_sharding)


def broadcasted_iota(dtype, shape, dimension, *, out_sharding=None):
    """0, 1, 2, ... along ``dimension``, broadcast to ``shape``."""
    shape = tuple(int(s) for s in shape)
    return _lo.bind_out("iota", shape=shape, dimension=int(dimension), dtype=np.dtype(dtype), out_sharding=out_sharding,
                         api_name="broadcasted_iota")


def iota(dtype, size, *, out_sharding=None):
    return broadcasted_iota(dtype, (size,), 0, out_sharding=out_sharding)


def reshape(operand, new_sizes, dimensions=None, *, out_sharding=None):
    if dimensions is not None and tuple(dimensions) != tuple(range(np.ndim(operand))):
        operand = transpose(operand, dimensions)
    return _lo.reshape(operand, tuple(int(n) for n in new_sizes), out_sharding=out_sharding)


def transpose(operand, permutation):
    return _lo.transpose(operand, tuple(permutation))


def slice(operand, start_indices, limit_indices, strides=None):  # noqa: A001  (jax.lax's name)
    x = _lo.as_tracer(operand)
    start = tuple(int(s) for s in start_indices)
    limit = tuple(int(s) for s in limit_indices)
    strides = (1,) * x.ndim if strides is None else tuple(int(s) for s in strides)
    if (start, limit, strides) == ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        return x
    return bind("slice", x, start=start, limit=limit, strides=strides)


def _starts(x, start_indices: Sequence) -> list:
    if len(start_indices) != x.ndim:
        raise TraceError(f"dynamic slicing: {len(start_indices)} start indices for an operand of rank {x.ndim}")
    return [s if hasattr(s, "aval") else np.asarray(s, dtype=np.int32)[()] for s in start_indices]


def dynamic_slice(operand, start_indices, slice_sizes):
    """``operand[start:start+size]`` per dim, starts known at run time (clamped to fit, like XLA)."""
    x = _lo.as_tracer(operand)
    return bind("dynamic_slice", x, *_starts(x, start_indices), slice_sizes=tuple(int(s) for s in slice_sizes))


def dynamic_update_slice(operand, update, start_indices):
    """``operand`` with ``update`` written at run-time ``start_indices`` (clamped to fit)."""
    x = _lo.as_tracer(operand)
    u = _lo.astype(_lo.as_tracer(update), x.dtype)
    return bind("dynamic_update_slice", x, u, *_starts(x, start_indices))


def stop_gradient(x):
    """``x`` (a pytree), as a constant of the derivative: reverse mode passes no cotangent through it."""
    import optree

    return optree.tree_map(lambda leaf: bind("stop_gradient", leaf) if isinstance(leaf, Tracer) else leaf, x)


# -- arrays committed to devices (``ss.device_put``'s): each function is one eager op on them ------------
for _name in ("dot_general", "broadcast_in_dim", "broadcasted_iota", "iota", "reshape", "transpose", "slice",
              "dynamic_slice", "dynamic_update_slice", "stop_gradient", "cond", "fori_loop", "scan", "switch",
              "while_loop"):
    globals()[_name] = _committed.on_devices(globals()[_name])
