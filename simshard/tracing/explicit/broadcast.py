"""Broadcasting with sharding types: ``jnp.broadcast_plain(..., out_sharding=)``, the shared
broadcast that ``jnp.where`` applies to its three operands (matmul broadcasts nothing: its batch
dims become free or batch dims of one ``dot_general``, ``lowering_contractions.matmul_dims``).

* ``broadcast_plain``: numpy's rule as one ``broadcast_in_dim``, nothing said of sharding (what
  ``lowering.broadcast_to`` does in auto mode, and the fallback of the typed forms below);
* ``broadcast_to_sharded``: each operand dim must be unsharded or already sharded as requested
  (``16@Y -> P('X', 'Y')`` is fine, ``16@Y -> P('Y', None)`` is a ValueError, as in JAX);
* ``broadcast_arrays_typed``: when shapes differ, all operands go to one shape *and* one sharding,
  the consensus of theirs (so ``where(c, b, 0.0)`` with c ``P(X,None)`` and b ``P(None,Y)`` is
  ``P(X,Y)``, while ``where(c, b, d)`` with equal shapes keeps select's strict rule);
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import TraceError
from ...sharding.dims import Sharding
from ...sharding.partition_spec import P
from ..state import as_tracer, bind
from . import mode
from .api import check_duplicates, trace_mesh, apply_out, check_even, resolve
from .errors import ShardingTypeError
from .types import Spec, partitions, replicated, spec_of, to_sharding, type_str


def _typed(x) -> tuple[tuple[int, ...], Spec]:
    shape = tuple(np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape)
    spec, _ = mode.type_spec(x, len(shape))
    return shape, spec


def broadcast_shardings(items: Sequence[tuple[tuple[int, ...], Spec]]) -> Spec:
    """JAX's ``lax.broadcast_shardings``: rank promotion if that suffices, else per-dim consensus."""
    ndim = max(len(s) for s, _ in items)
    top = next(spec for s, spec in items if len(s) == ndim)
    if ndim == 0 or all(top[ndim - len(s):] == spec for s, spec in items):
        return top
    shapes = [(1,) * (ndim - len(s)) + s for s, _ in items]
    specs = [replicated(ndim - len(s)) + spec for s, spec in items]
    out = []
    for d in range(ndim):
        entries = [sp[d] for sp in specs]
        if all(e == entries[0] for e in entries):
            out.append(entries[0])
            continue
        chosen: tuple[str, ...] = ()
        for sh, e in zip(shapes, entries):
            if not e:
                continue
            if chosen and e != chosen:
                shown = ", ".join(str(partitions(sp)) for sp, sh2 in zip(specs, shapes) if sh2)
                raise ShardingTypeError(f"broadcast_shardings got incompatible shardings for broadcasting: {shown}.", op="broadcast")
            chosen = e
        out.append(chosen)
    check_duplicates(P(*partitions(tuple(out))))
    return tuple(out)


def broadcast_plain(x, shape: tuple[int, ...]):
    """numpy broadcasting of ``x`` to ``shape`` as one broadcast_in_dim (no-op when equal), no
    sharding asked for (``lowering.broadcast_to`` without ``out_sharding``)."""
    x = as_tracer(x)
    if x.shape == shape:
        return x
    if x.ndim > len(shape):
        raise TraceError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    lead = len(shape) - x.ndim
    for d, n in enumerate(x.shape):
        if n != 1 and n != shape[lead + d]:
            raise TraceError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    return bind("broadcast_in_dim", x, shape=shape, broadcast_dimensions=tuple(range(lead, len(shape))))


def retype(x, shape: tuple[int, ...], spec: Spec):
    """``x`` broadcast to ``shape`` with sharding ``spec`` (a reshard when only the sharding changes)."""
    x = as_tracer(x)
    mesh = mode.current_mesh()
    sharding = to_sharding(trace_mesh(mesh), spec)
    if x.shape == shape:
        return bind("reshard", x, sharding=sharding, shardings=(sharding,))
    lead = len(shape) - x.ndim
    return bind(
        "broadcast_in_dim", x, shape=shape, broadcast_dimensions=tuple(range(lead, len(shape))), shardings=(sharding,)
    )


def _check_compatible(x, shape: tuple[int, ...], spec: Spec, target: Sharding | None = None) -> None:
    xshape, xspec = _typed(x)
    lead = len(shape) - len(xshape)
    ok_shape = lead >= 0 and all(n in (1, m) for n, m in zip(xshape, shape[lead:]))
    ok_spec = lead >= 0 and all(not a or a == b for a, b in zip(xspec, spec[lead:]))
    if not (ok_shape and ok_spec):
        dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
        unreduced = tuple(a.short() for a in target.unreduced) if target is not None else ()
        raise ValueError(
            f"Incompatible types for broadcasting: input type={type_str(xshape, dtype, xspec)} and requested "
            f"type={type_str(shape, dtype, spec, unreduced)}"
        )


def broadcast_to_sharded(x, shape: tuple[int, ...], out_sharding):
    """``jnp.broadcast_plain(x, shape, out_sharding=...)`` (auto mode: broadcast, then a constraint)."""
    if not mode.is_explicit():
        return apply_out(broadcast_plain(x, shape), out_sharding, "broadcast_to")
    target = resolve(out_sharding, len(shape), "jnp.broadcast_to")
    spec = spec_of(target, len(shape), mode.explicit_axes_now())
    xshape, xspec = _typed(x)
    if xshape == shape and xspec == spec:
        return x
    _check_compatible(x, shape, spec, target)
    check_even(target, shape)
    return retype(x, shape, spec)


def broadcast_arrays_typed(args: Sequence) -> list:
    """``jnp``'s ``_broadcast_arrays`` for where: one shape and one sharding for all operands.

    Python scalars stay scalars (numpy's dtype rules; a rank-0 operand has no sharding to give)."""
    typed = [_typed(a) for a in args]
    shapes = [s for s, _ in typed]
    if all(s == shapes[0] for s in shapes):
        return list(args)
    out_shape = tuple(np.broadcast_shapes(*shapes))
    spec = broadcast_shardings(typed)
    out = []
    for a, (s, sp) in zip(args, typed):
        if not hasattr(a, "shape") and np.ndim(a) == 0:
            out.append(a)
        elif s == out_shape and sp == spec:
            out.append(a)
        else:
            _check_compatible(a, out_shape, spec)
            out.append(retype(a, out_shape, spec))
    return out

