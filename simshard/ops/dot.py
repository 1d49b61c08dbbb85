"""``dot_general``: contraction with batch dims; matmul, dot, tensordot and einsum lower to it.

Factors follow Shardy's order: batch, lhs free, rhs free, contracting. The result is
``[batch..., lhs free..., rhs free...]``; contracting factors are reductions (sum).
"""

from __future__ import annotations

import functools
import math

import string

import numpy as np

from ..ir.program import Aval
from .factors import factor_rule
from ..sharding.dims import Sharding
from .cotangents import call, fit
from .registry import define_vjp, register_op


def _dims(lhs_rank, rhs_rank, contracting, batch):
    (lc, rc), (lb, rb) = contracting, batch
    lfree = [d for d in range(lhs_rank) if d not in lc and d not in lb]
    rfree = [d for d in range(rhs_rank) if d not in rc and d not in rb]
    return lfree, rfree


def _check(lhs: Aval, rhs: Aval, contracting, batch):
    (lc, rc), (lb, rb) = contracting, batch
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ValueError(f"dot_general: contracting {contracting} / batch {batch} dims differ in number")
    for a, b, what in [(lc, rc, "contracting"), (lb, rb, "batch")]:
        for i, j in zip(a, b):
            if lhs.shape[i] != rhs.shape[j]:
                raise ValueError(f"dot_general: {what} dims lhs[{i}]={lhs.shape[i]} and rhs[{j}]={rhs.shape[j]} differ")


@functools.lru_cache(maxsize=None)
def result_dtype(lhs: np.dtype, rhs: np.dtype, algorithm: str = "matmul") -> np.dtype:
    """The dtype numpy's product gives: ``np.result_type`` of the operands, except where numpy's
    matmul widens (ml_dtypes' bfloat16 and float8 multiply into float32)."""
    if algorithm != "matmul":
        return np.result_type(lhs, rhs)
    try:
        return np.matmul(np.zeros((1, 1), lhs), np.zeros((1, 1), rhs)).dtype
    except TypeError:
        return np.result_type(lhs, rhs)


def _eval(lhs: Aval, rhs: Aval, *, contracting, batch, preferred_dtype=None, algorithm="matmul", **_):
    _check(lhs, rhs, contracting, batch)
    lfree, rfree = _dims(lhs.ndim, rhs.ndim, contracting, batch)
    shape = [lhs.shape[d] for d in batch[0]] + [lhs.shape[d] for d in lfree] + [rhs.shape[d] for d in rfree]
    dtype = preferred_dtype or result_dtype(np.dtype(lhs.dtype), np.dtype(rhs.dtype), algorithm)
    return (Aval(tuple(shape), dtype),)


def _einsum_kernel(lhs, rhs, contracting, batch):
    (lc, rc), (lb, rb) = contracting, batch
    letters = iter(string.ascii_letters)
    lsub, rsub = [""] * lhs.ndim, [""] * rhs.ndim
    out = []
    for i, j in zip(lb, rb):
        lsub[i] = rsub[j] = c = next(letters)
        out.append(c)
    for i, j in zip(lc, rc):
        lsub[i] = rsub[j] = next(letters)
    for sub in (lsub, rsub):
        for k, s in enumerate(sub):
            if not s:
                sub[k] = c = next(letters)
                out.append(c)
    return np.einsum(f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}", lhs, rhs)


def _kernel(lhs, rhs, *, contracting, batch, preferred_dtype=None, algorithm="matmul", loops=False, **_):
    """As numpy computes it, so the reference run is bit-identical to the user's numpy: by default
    operands arranged as [batch, free, contract] @ [batch, contract, free] (a plain 2-D product is
    literally ``lhs @ rhs``; np.tensordot's one 2-D product); ``loops`` for a product lowered from
    np.matmul (``_looped_matmul``); ``algorithm="einsum"`` for products the user wrote with np.einsum."""
    dtype = preferred_dtype or result_dtype(lhs.dtype, rhs.dtype, algorithm)
    if algorithm == "einsum":
        return (np.asarray(_einsum_kernel(lhs, rhs, contracting, batch), dtype=dtype),)
    if loops:
        return (np.asarray(_looped_matmul(lhs, rhs, contracting, batch), dtype=dtype),)
    (lc, rc), (lb, rb) = contracting, batch
    lfree, rfree = _dims(lhs.ndim, rhs.ndim, contracting, batch)
    a = np.transpose(lhs, list(lb) + lfree + list(lc))
    b = np.transpose(rhs, list(rb) + list(rc) + rfree)
    bshape = a.shape[: len(lb)]
    # (math.prod: numpy's prod on a shape tuple costs microseconds per call, on every product a
    # device runs)
    m = math.prod(a.shape[len(lb) : len(lb) + len(lfree)])
    k = math.prod(a.shape[len(lb) + len(lfree) :])
    n = math.prod(b.shape[len(rb) + len(rc) :])
    a2 = a.reshape(bshape + (m, k))
    b2 = b.reshape(bshape + (k, n))
    res = np.matmul(a2, b2)
    out_shape = bshape + tuple(a.shape[len(lb) : len(lb) + len(lfree)]) + tuple(b.shape[len(rb) + len(rc) :])
    return (np.asarray(res.reshape(out_shape), dtype=dtype),)


def _looped_matmul(lhs, rhs, contracting, batch):
    """np.matmul's own computation of a product lowered from it: each operand's last free dim is
    its matrix's (m of lhs, n of rhs; 1 where it has none, a vector), its other free dims loop as
    numpy's broadcast batch dims do, so every output matrix is the one 2-D product numpy makes
    (a weight shared by a batch is not copied, nor are the sequences merged into one product)."""
    (lc, rc), (lb, rb) = contracting, batch
    lfree, rfree = _dims(lhs.ndim, rhs.ndim, contracting, batch)
    nb = len(lb)
    a = np.transpose(lhs, list(lb) + lfree + list(lc))
    b = np.transpose(rhs, list(rb) + rfree[:-1] + list(rc) + rfree[-1:])
    bshape = a.shape[:nb]
    lshape, rshape = tuple(lhs.shape[d] for d in lfree), tuple(rhs.shape[d] for d in rfree)
    k = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
    lloop, m = lshape[:-1], lshape[-1:] or (1,)
    rloop, n = rshape[:-1], rshape[-1:] or (1,)
    a = a.reshape(bshape + lloop + (1,) * len(rloop) + m + (k,))
    b = b.reshape(bshape + (1,) * len(lloop) + rloop + (k,) + n)
    res = np.matmul(a, b)  # [batch, lhs loops, rhs loops, m, n]
    i = nb + len(lloop)
    j = i + len(rloop)
    res = np.transpose(res, list(range(i)) + [j] + list(range(i, j)) + [j + 1])  # dot_general's order
    return res.reshape(bshape + lshape + rshape)


def _rule(in_avals, out_avals, *, contracting, batch, **_):
    lhs, rhs = in_avals
    (lc, rc), (lb, rb) = contracting, batch
    lfree, rfree = _dims(lhs.ndim, rhs.ndim, contracting, batch)
    names = iter(string.ascii_lowercase)
    bf = [next(names) for _ in lb]
    lff = [next(names) for _ in lfree]
    rff = [next(names) for _ in rfree]
    cf = [next(names) for _ in lc]
    lspec, rspec = [""] * lhs.ndim, [""] * rhs.ndim
    for f, i, j in zip(bf, lb, rb):
        lspec[i] = rspec[j] = f
    for f, i, j in zip(cf, lc, rc):
        lspec[i] = rspec[j] = f
    for f, i in zip(lff, lfree):
        lspec[i] = f
    for f, j in zip(rff, rfree):
        rspec[j] = f
    spec = f"{''.join(lspec)},{''.join(rspec)}->{''.join(bf + lff + rff)}"
    return factor_rule(spec, [lhs.shape, rhs.shape], [out_avals[0].shape], reduction="".join(cf))


register_op("dot_general", _eval, _kernel, _rule, doc="contraction with batch dims (lax.dot_general)",
            shape_dependent_sums=True)  # numpy's matmul / einsum call a BLAS


# -- derivative: each operand's cotangent is a contraction of the result's with the other operand
def _vjp(ct, lhs, rhs, *, out, contracting, batch, **_):
    (lc, rc), (lb, rb) = contracting, batch
    lfree, rfree = _dims(np.ndim(lhs), np.ndim(rhs), contracting, batch)
    nb = len(lb)
    ct_batch = tuple(range(nb))
    ct_lfree = tuple(range(nb, nb + len(lfree)))
    ct_rfree = tuple(range(nb + len(lfree), nb + len(lfree) + len(rfree)))

    def grad(other, other_free, other_batch, other_contracting, ct_other_free, own_batch, own_free, own_contracting, own_rank, own):
        # ct . other over the other's free dims gives [batch, own free, the other's contracting
        # dims in its own dim order], each the partner of one of own's contracting dims:
        # transposed back into own's dim order
        partner = dict(zip(other_contracting, own_contracting))
        order = list(own_batch) + list(own_free) + [partner[d] for d in sorted(other_contracting)]
        g = call("dot_general", ct, other, contracting=(ct_other_free, tuple(other_free)),
                 batch=(ct_batch, tuple(other_batch)), shardings=_typed_like(own, order))
        perm = tuple(order.index(d) for d in range(own_rank))
        if perm != tuple(range(own_rank)):
            g = call("transpose", g, perm=perm)
        return fit(g, own)

    return (
        lambda: grad(rhs, rfree, rb, rc, ct_rfree, lb, lfree, lc, np.ndim(lhs), lhs),
        lambda: grad(lhs, lfree, lb, lc, ct_lfree, rb, rfree, rc, np.ndim(rhs), rhs),
    )


def _typed_like(own, order):
    """In explicit mode, the cotangent's type: its primal's (JAX types a cotangent like its
    primal, sharding included), dims in ``order`` (the
    contraction over a sharded batch dim is otherwise ambiguous there). None in auto mode, where
    propagation places the cotangent."""
    s = getattr(own, "sharding", None)
    if s is None or not s.mesh.explicit_axes or len(s.dims) != len(order):
        return None
    return (Sharding(s.mesh, tuple(s.dims[d] for d in order), s.replicated),)


define_vjp("dot_general", _vjp)
