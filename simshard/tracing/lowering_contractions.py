"""numpy's contractions lowered to ``dot_general``: matmul (batched, broadcast batch dims as
free dims, never a broadcast copy), dot, tensordot, einsum (one or two operands)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import TraceError
from .explicit import api as explicit_api
from .explicit import mode
from .lowering_common import apply_out, as_tracer, bind_out, explicit_mode, norm_axis
from .lowering_reductions import reduce_axes
from .lowering_shapes import expand_dims, squeeze, transpose


def dot_general(lhs, rhs, contracting, batch=((), ()), preferred_dtype=None, algorithm="matmul", out_sharding=None,
                loops=False):
    """``lax.dot_general``; ``loops``: computed as np.matmul does (ops/dot.py, ``_looped_matmul``)."""
    params = dict(contracting=tuple(map(tuple, contracting)), batch=tuple(map(tuple, batch)))
    if algorithm != "matmul":
        params["algorithm"] = algorithm
    if loops:
        params["loops"] = True
    if preferred_dtype is not None:
        params["preferred_dtype"] = np.dtype(preferred_dtype)
    return bind_out("dot_general", as_tracer(lhs), as_tracer(rhs), out_sharding=out_sharding, **params)


class MatmulDims(NamedTuple):
    """How ``np.matmul``'s operands go into one ``dot_general`` without broadcasting either.

    A batch dim only one operand has, or one of extent 1 (unsharded) on the other side, is a free
    dim of the operand that has it (the extent-1 dim is squeezed away); only batch dims both have,
    of one extent (and, in explicit mode, one sharding), are ``dot_general`` batch dims. ``perm``
    puts the ``dot_general`` result (batch dims, then ``a``'s free dims, then ``b``'s) in numpy's
    order; ``expand`` puts back the result dims both operands had as extent 1."""

    a_squeeze: tuple[int, ...]
    b_squeeze: tuple[int, ...]
    a_batch: tuple[int, ...]
    b_batch: tuple[int, ...]
    perm: tuple[int, ...]
    expand: tuple[int, ...]


def matmul_dims(a, b) -> MatmulDims:
    """The ``dot_general`` form of ``a @ b`` (both of rank >= 1), as ``jnp.matmul`` lowers it;
    batch dims that do not broadcast are an error naming both operands (JAX's ``ValueError`` in
    explicit mode, where a batch dim sharded differently on the two sides is one too)."""
    a_mat, b_mat = a.ndim > 1, b.ndim > 1
    a_dims, b_dims = (a.shape[:-2] if a_mat else ()), (b.shape[:-2] if b_mat else ())
    a_specs = mode.type_spec(a, a.ndim)[0][: len(a_dims)]
    b_specs = mode.type_spec(b, b.ndim)[0][: len(b_dims)]
    nb = max(len(a_dims), len(b_dims))
    a_dims, a_specs = (None,) * (nb - len(a_dims)) + a_dims, ((),) * (nb - len(a_specs)) + a_specs
    b_dims, b_specs = (None,) * (nb - len(b_dims)) + b_dims, ((),) * (nb - len(b_specs)) + b_specs
    a_squeeze, b_squeeze, a_batch, b_batch, expand = [], [], [], [], []
    batch, a_free, b_free = [], [], []  # result dims, in the order dot_general gives them
    for i, (da, db, sa, sb) in enumerate(zip(a_dims, b_dims, a_specs, b_specs)):
        if da is None:
            b_free.append(i)
        elif db is None:
            a_free.append(i)
        elif da == 1 and db == 1 and not sa and not sb:
            a_squeeze.append(len(batch) + len(a_free) + len(a_squeeze))
            b_squeeze.append(len(batch) + len(b_free) + len(b_squeeze))
            expand.append(i)
        elif da == 1 and not sa:
            a_squeeze.append(len(batch) + len(a_free) + len(a_squeeze))
            b_free.append(i)
        elif db == 1 and not sb:
            b_squeeze.append(len(batch) + len(b_free) + len(b_squeeze))
            a_free.append(i)
        elif da == db and sa == sb:
            a_batch.append(len(batch) + len(a_free))
            b_batch.append(len(batch) + len(b_free))
            batch.append(i)
        elif explicit_mode():
            raise ValueError(f"Incompatible types for matmul arguments: {explicit_api.typeof(a)} and {explicit_api.typeof(b)}")
        else:
            raise TraceError(f"np.matmul: operands of shapes {a.shape} and {b.shape} have batch dims that do not "
                             f"broadcast ({da} against {db} at result dim {i})")
    a_free += [nb] if a_mat else []
    b_free += [nb + a_mat] if b_mat else []
    perm = tuple(int(p) for p in np.argsort(batch + a_free + b_free, kind="stable"))
    return MatmulDims(tuple(a_squeeze), tuple(b_squeeze), tuple(a_batch), tuple(b_batch), perm, tuple(expand))


def matmul(a, b, out_sharding=None):
    """``np.matmul`` (and ``@``) as one ``dot_general`` on the operands as they are, never a
    broadcast copy of one (a weight shared by a batch stays one ``[d, e]`` array): see
    ``MatmulDims``. ``out_sharding`` types the ``dot_general``'s result, before the transpose to
    numpy's order, as ``jnp.matmul`` applies it. A batched product is computed as numpy computes
    it (``loops``: one 2-D product per output matrix), so the reference stays bit-identical to the
    user's numpy."""
    a, b = as_tracer(a), as_tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        raise TraceError(f"np.matmul: operands must not be scalars (shapes {a.shape} and {b.shape})")
    dims, b_mat, batched = matmul_dims(a, b), b.ndim > 1, a.ndim > 2 or b.ndim > 2
    a = squeeze(a, dims.a_squeeze) if dims.a_squeeze else a
    b = squeeze(b, dims.b_squeeze) if dims.b_squeeze else b
    contracting = ((a.ndim - 1,), (b.ndim - 1 - b_mat,))
    out = dot_general(a, b, contracting, (dims.a_batch, dims.b_batch), out_sharding=out_sharding, loops=batched)
    out = transpose(out, dims.perm)
    return expand_dims(out, dims.expand) if dims.expand else out


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
