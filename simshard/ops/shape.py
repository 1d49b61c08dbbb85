"""Shape ops: reshape, transpose, broadcast_in_dim, concatenate (shardy.md a.6-a.9).

* ``reshape``: Shardy's gcd walk over both shapes. Factors shared by operand and result are the
  digits both shapes agree on; the rest appear in one tensor only (sharding cannot flow there):

      2x4 -> 8:        ([a, b])->([(ab)]) {a=2, b=4}
      8x4x5 -> 2x16x5: ([(ab), c, d])->([a, (bc), d]) {a=2, b=4, c=4, d=5}
      6x4 -> 4x6:      ([(ab), (ef)])->([(ac), (df)]) {a=2, b=3, c=2, d=3, e=2, f=2}
      3x2 -> 2x3:      ([a, d])->([b, c]) {a=3, b=2, c=3, d=2}

  Size-1 dims get their own size-1 factor; a zero-element reshape gets only those.
* ``transpose``: one factor per result dim, in result order.
* ``broadcast_in_dim``: one factor per result dim; a size-1 operand dim expanded to a bigger
  result dim gets its own size-1 factor.
* ``concatenate``: the concat dim is ONE need-replication factor of the result's size, shared by
  every operand and the result (so propagation still flows through it, as in Shardy). In the
  operands it does not multiply to the dim size, so it is marked ``inexact``; it is never sharded
  when the op runs. The other dims are pass-through factors shared by all tensors.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .builder import RuleBuilder
from .factors import NEED_REPLICATION, PASS_THROUGH
from .cotangents import call
from .registry import define_vjp, local_result_shape, register_op


# -- reshape -----------------------------------------------------------------------------------
def _reshape_eval(*avals, new_shape, **_):
    preconditions.arity("reshape", avals, 1)
    (x,) = avals
    new_shape = preconditions.shape("reshape", new_shape, "new_shape")
    if math.prod(new_shape) != x.size:
        raise ValueError(f"reshape: cannot reshape {x.shape} ({x.size} elements) to {new_shape} ({math.prod(new_shape)} elements)")
    return (Aval(new_shape, x.dtype),)


def reshape_rule(in_avals, out_avals, **_):
    ins, outs = in_avals[0].shape, out_avals[0].shape
    b = RuleBuilder([ins], [outs])
    if math.prod(ins) == 0:
        return b.build()
    i = o = 0
    dims_in = dims_out = 1  # product of the dim sizes entered so far
    f_in = f_out = 1  # product of the factors added so far
    while i < len(ins) or o < len(outs):
        if i < len(ins) and ins[i] == 1:
            b.add([i], [None], 1)
            i += 1
            continue
        if o < len(outs) and outs[o] == 1:
            b.add([None], [o], 1)
            o += 1
            continue
        if i < len(ins) and dims_in == f_in:
            dims_in *= ins[i]
        if o < len(outs) and dims_out == f_out:
            dims_out *= outs[o]
        next_in, next_out = dims_in // f_in, dims_out // f_out
        g = math.gcd(next_in, next_out)

        def diverged(nxt: int, smaller: int, larger: int) -> int:
            if larger % smaller == 0 and nxt % (larger // smaller) == 0:
                return larger // smaller  # converges the two products again
            if nxt > g:
                return nxt // g  # keeps the gcd for the next step
            return nxt

        if f_in == f_out:
            if g > 1:
                b.add([i], [o], g)
                f_in *= g
                f_out *= g
            else:
                b.add([i], [None], next_in)
                f_in *= next_in
                b.add([None], [o], next_out)
                f_out *= next_out
        elif f_in < f_out:
            n = diverged(next_in, f_in, f_out)
            b.add([i], [None], n)
            f_in *= n
        else:
            n = diverged(next_out, f_out, f_in)
            b.add([None], [o], n)
            f_out *= n
        if i < len(ins) and dims_in == f_in:
            i += 1
        if o < len(outs) and dims_out == f_out:
            o += 1
    return b.build()


register_op(
    "reshape",
    _reshape_eval,
    lambda x, *, new_shape, **_: (np.reshape(x, tuple(new_shape)),),
    reshape_rule,
    local_params=local_result_shape("new_shape"),
    doc="row-major reshape to `new_shape` (Shardy's gcd factors; `new_shape` is local on a device)",
)


# -- transpose ---------------------------------------------------------------------------------
def _transpose_eval(*avals, perm, **_):
    preconditions.arity("transpose", avals, 1)
    (x,) = avals
    perm = preconditions.int_tuple("transpose", "perm", perm, x.ndim)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"transpose: perm {perm} is not a permutation of 0..{x.ndim - 1}")
    return (Aval(tuple(x.shape[p] for p in perm), x.dtype),)


def transpose_rule(in_avals, out_avals, *, perm, **_):
    x = in_avals[0]
    b = RuleBuilder([x.shape], [out_avals[0].shape])
    for o, d in enumerate(perm):
        b.add([d], [o], x.shape[d])
    return b.build()


register_op(
    "transpose",
    _transpose_eval,
    lambda x, *, perm, **_: (np.transpose(x, tuple(perm)).copy(),),
    transpose_rule,
    doc="permute dims: result dim i is operand dim `perm[i]`",
)


# -- broadcast_in_dim --------------------------------------------------------------------------
def _broadcast_eval(*avals, shape, broadcast_dimensions, **_):
    preconditions.arity("broadcast_in_dim", avals, 1)
    (x,) = avals
    shape = preconditions.shape("broadcast_in_dim", shape)
    bd = preconditions.int_tuple("broadcast_in_dim", "broadcast_dimensions", broadcast_dimensions, x.ndim)
    for k, d in enumerate(bd):
        if not 0 <= d < len(shape):
            raise ValueError(f"broadcast_in_dim: broadcast_dimensions {bd} name dim {d}, outside the result rank {len(shape)}")
        if x.shape[k] not in (1, shape[d]):
            raise ValueError(
                f"broadcast_in_dim: operand dim {k} has size {x.shape[k]}, result dim {d} has size {shape[d]} "
                "(must be equal or the operand's must be 1)"
            )
    if len(set(bd)) != len(bd):
        raise ValueError(f"broadcast_in_dim: broadcast_dimensions {bd} repeat a dim")
    return (Aval(shape, x.dtype),)


def _broadcast_kernel(x, *, shape, broadcast_dimensions, **_):
    bd = tuple(broadcast_dimensions)
    order = sorted(range(len(bd)), key=lambda k: bd[k])
    xt = np.transpose(np.asarray(x), order)
    expanded = [1] * len(shape)
    for k, d in zip(order, sorted(bd)):
        expanded[d] = np.shape(x)[k]
    return (np.array(np.broadcast_to(xt.reshape(expanded), tuple(shape))),)


def broadcast_rule(in_avals, out_avals, *, broadcast_dimensions, **_):
    x, out = in_avals[0], out_avals[0]
    b = RuleBuilder([x.shape], [out.shape])
    out_to_in = {d: k for k, d in enumerate(broadcast_dimensions)}
    for o, n in enumerate(out.shape):
        k = out_to_in.get(o)
        if k is not None and x.shape[k] == 1 and n != 1:
            b.add([k], [None], 1)  # expanded in place: its own size-1 factor
            k = None
        b.add([k], [o], n)
    return b.build()


register_op(
    "broadcast_in_dim",
    _broadcast_eval,
    _broadcast_kernel,
    broadcast_rule,
    local_params=local_result_shape("shape"),
    doc="operand dim k becomes result dim `broadcast_dimensions[k]`; `shape` is local on a device",
)


# -- concatenate -------------------------------------------------------------------------------
def _concat_eval(*avals, axis, **_):
    if not avals:
        raise ValueError("concatenate: needs at least one operand")
    ranks = {a.ndim for a in avals}
    if len(ranks) != 1:
        raise ValueError(f"concatenate: operands have different ranks {[a.ndim for a in avals]}")
    rank = ranks.pop()
    if rank == 0:
        raise ValueError("concatenate: operands must have rank >= 1, got scalars")
    axis = preconditions.axis("concatenate", axis, rank)
    first = avals[0].shape
    for t, a in enumerate(avals[1:], 1):
        if any(a.shape[d] != first[d] for d in range(rank) if d != axis):
            raise ValueError(f"concatenate: operand {t} has shape {a.shape}, operand 0 {first}; only dim {axis} may differ")
    shape = first[:axis] + (sum(a.shape[axis] for a in avals),) + first[axis + 1 :]
    return (Aval(shape, np.result_type(*[a.dtype for a in avals])),)


def concat_rule(in_avals, out_avals, *, axis, **_):
    out = out_avals[0]
    b = RuleBuilder([a.shape for a in in_avals], [out.shape])
    b.add_pointwise(out.shape, lambda d: NEED_REPLICATION if d == axis else PASS_THROUGH)
    return b.build()


register_op(
    "concatenate",
    _concat_eval,
    lambda *xs, axis, **_: (np.concatenate(xs, axis=axis),),
    concat_rule,
    doc="join operands along `axis`; the concat dim is one need-replication factor of the result size",
)


# -- derivatives: the transposed layout op -------------------------------------------------------
def _broadcast_vjp(ct, x, *, out, shape, broadcast_dimensions, **_):
    """Sum over the result dims the operand does not have, then over the size-1 dims it was
    grown along; the operand's dims may map to the result's in any order (a transpose back)."""
    def make():
        bd = tuple(broadcast_dimensions)
        new = tuple(d for d in range(len(shape)) if d not in bd)
        g = call("reduce_sum", ct, axes=new) if new else ct  # dims: sorted(bd)
        order = sorted(bd)
        perm = tuple(order.index(d) for d in bd)
        if perm != tuple(range(len(bd))):
            g = call("transpose", g, perm=perm)  # dim k is the operand's dim k
        grown = tuple(k for k, d in enumerate(bd) if x.shape[k] == 1 and shape[d] != 1)
        if grown:
            g = call("reduce_sum", g, axes=grown)
        return call("reshape", g, new_shape=tuple(x.shape)) if tuple(g.shape) != tuple(x.shape) else g
    return (make,)


def _concat_vjp(ct, *xs, out, axis, **_):
    def piece(k):
        lo = sum(x.shape[axis] for x in xs[:k])
        start = tuple(lo if d == axis else 0 for d in range(ct.ndim))
        limit = tuple(lo + xs[k].shape[axis] if d == axis else n for d, n in enumerate(ct.shape))
        return lambda: call("slice", ct, start=start, limit=limit)
    return tuple(piece(k) for k in range(len(xs)))


define_vjp("reshape", lambda ct, x, *, out, **_: (lambda: call("reshape", ct, new_shape=tuple(x.shape)),))
define_vjp("transpose", lambda ct, x, *, out, perm, **_: (
    lambda: call("transpose", ct, perm=tuple(int(i) for i in np.argsort(perm))),))
define_vjp("broadcast_in_dim", _broadcast_vjp)
define_vjp("concatenate", _concat_vjp)
