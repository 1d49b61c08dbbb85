"""numpy's contractions lowered to ``dot_general``: matmul (batched, broadcast), dot,
tensordot, einsum (one or two operands)."""

from __future__ import annotations

import numpy as np

from ..errors import TraceError
from .explicit import api as explicit_api
from .explicit import broadcast
from .lowering_common import apply_out, as_tracer, bind_out, broadcast_to, explicit_mode, norm_axis
from .lowering_reductions import reduce_axes
from .lowering_shapes import expand_dims, transpose


def dot_general(lhs, rhs, contracting, batch=((), ()), preferred_dtype=None, algorithm="matmul", out_sharding=None):
    params = dict(contracting=tuple(map(tuple, contracting)), batch=tuple(map(tuple, batch)))
    if algorithm != "matmul":
        params["algorithm"] = algorithm
    if preferred_dtype is not None:
        params["preferred_dtype"] = np.dtype(preferred_dtype)
    return bind_out("dot_general", as_tracer(lhs), as_tracer(rhs), out_sharding=out_sharding, **params)


def matmul(a, b, out_sharding=None):
    a, b = as_tracer(a), as_tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        raise TraceError("np.matmul: operands must not be scalars")
    if a.ndim == 1 and b.ndim == 1:
        return dot_general(a, b, ((0,), (0,)), out_sharding=out_sharding)
    if a.ndim == 1:
        if b.ndim == 2:
            return dot_general(a, b, ((0,), (b.ndim - 2,)), out_sharding=out_sharding)
        return apply_out(matmul(expand_dims(a, 0), b)[..., 0, :], out_sharding, "matmul")
    if b.ndim == 1:
        return dot_general(a, b, ((a.ndim - 1,), (0,)), out_sharding=out_sharding)
    if a.ndim == 2 and b.ndim == 2:
        return dot_general(a, b, ((1,), (0,)), out_sharding=out_sharding)
    # Batched: broadcast the batch dims, then one dot_general with batch dims.
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if explicit_mode():
        a, b = broadcast.matmul_batch_operands(a, b, batch)
    else:
        a = broadcast_to(a, batch + a.shape[-2:])
        b = broadcast_to(b, batch + b.shape[-2:])
    nb = len(batch)
    return dot_general(a, b, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))), out_sharding=out_sharding)


def dot(a, b, out=None, out_sharding=None):
    a, b = as_tracer(a), as_tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        return apply_out(a * b, out_sharding, "dot")
    if b.ndim == 1 or a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b, out_sharding=out_sharding)
    return dot_general(a, b, ((a.ndim - 1,), (b.ndim - 2,)), out_sharding=out_sharding)


def tensordot(a, b, axes=2):
    a, b = as_tracer(a), as_tracer(b)
    if isinstance(axes, int):
        la = tuple(range(a.ndim - axes, a.ndim))
        lb = tuple(range(axes))
    else:
        la, lb = axes
        la = (la,) if isinstance(la, int) else tuple(la)
        lb = (lb,) if isinstance(lb, int) else tuple(lb)
    la = tuple(norm_axis(x, a.ndim, "np.tensordot") for x in la)
    lb = tuple(norm_axis(x, b.ndim, "np.tensordot") for x in lb)
    return dot_general(a, b, (la, lb))


def einsum(subscripts: str, *operands, out_sharding=None, **kwargs):
    """Two-operand (or one-operand) einsum lowered to dot_general / transpose / reductions."""
    if kwargs.get("out") is not None:
        raise TraceError("np.einsum(..., out=...) cannot be traced")
    spec = subscripts.replace(" ", "")
    if "..." in spec:
        raise TraceError("np.einsum with '...' is not supported; write the dims out")
    if "->" in spec:
        ins, out = spec.split("->")
    else:
        ins = spec
        counts = {c: ins.count(c) for c in ins if c.isalpha()}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    terms = ins.split(",")
    if len(terms) != len(operands):
        raise TraceError(f"np.einsum: {len(terms)} subscripts for {len(operands)} operands")
    ops = [as_tracer(o) for o in operands]
    for t, o in zip(terms, ops):
        if len(t) != o.ndim or len(set(t)) != len(t):
            raise TraceError(f"np.einsum: subscript {t!r} does not fit an operand of shape {o.shape} (repeated letters unsupported)")
    if len(ops) == 1:
        x, t = ops[0], terms[0]
        summed = [i for i, c in enumerate(t) if c not in out]
        if summed:
            x = reduce_axes("sum", x, tuple(summed), False, "np.einsum")
            t = "".join(c for c in t if c in out)
        return apply_out(transpose(x, [t.index(c) for c in out]) if t != out else x, out_sharding, "einsum")
    if len(ops) != 2:
        raise TraceError("np.einsum: at most two operands are supported; chain einsums")
    (ta, tb), (a, b) = terms, ops
    # Letters only in one operand and not in the output are summed there first.
    for side in (0, 1):
        t, x, other = (ta, a, tb) if side == 0 else (tb, b, ta)
        lonely = [i for i, c in enumerate(t) if c not in out and c not in other]
        if lonely:
            x = reduce_axes("sum", x, tuple(lonely), False, "np.einsum")
            t = "".join(c for i, c in enumerate(t) if i not in lonely)
        if side == 0:
            ta, a = t, x
        else:
            tb, b = t, x
    if explicit_mode():
        # jnp.einsum contracts (second, first) and keeps that order when it gives the output's
        # order directly; the operand order decides the result's type in explicit mode.
        if "".join(c for c in out if c in ta and c in tb) + "".join(c for c in ta if c not in tb) + "".join(
            c for c in tb if c not in ta
        ) != out:
            (ta, a), (tb, b) = (tb, b), (ta, a)
    batch = [c for c in out if c in ta and c in tb]
    contract = [c for c in ta if c in tb and c not in out]
    got = "".join(batch) + "".join(c for c in ta if c not in tb) + "".join(c for c in tb if c not in ta)
    dot_out = None
    if out_sharding is not None:
        # out_sharding names the einsum's output dims: give the contraction the same spec, in its order.
        sh = explicit_api.resolve(out_sharding, len(out), "einsum")
        dot_out = type(sh)(sh.mesh, tuple(sh.dims[out.index(c)] for c in got), sh.replicated, sh.unreduced, sh.reduce_op)
    res = dot_general(a, b, ([ta.index(c) for c in contract], [tb.index(c) for c in contract]),
                      ([ta.index(c) for c in batch], [tb.index(c) for c in batch]), algorithm="einsum",
                      out_sharding=dot_out)
    return transpose(res, [got.index(c) for c in out]) if got != out else res
