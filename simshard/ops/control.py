"""``scan``: a loop whose body is a Program, run ``length`` times (``ss.lax.scan`` inside a trace).

Operands: the carries' initial values, the stacked inputs ``xs`` (scanned along their leading
dim) and the body's constants (values it closes over); results: the final carries and the
stacked outputs ``ys``. The body program takes ``(carry..., x..., const...)`` and returns
``(carry..., y...)``; the last ``num_res`` ys are residuals (each step's input carries and
intermediates) that reverse mode reads, unused otherwise. Parameters: ``body``, ``length``,
``reverse``, ``num_carry``, ``num_xs``, ``num_res``. Its derivative rule is a scan too
(``simshard.transforms.control``).

Its factor rule ties each carry's dims to the same dims of its final value (a carry keeps its
layout across iterations); the scanned dim of ``xs`` and ``ys`` needs replication (each step
reads one slice on every device); every other dim is a factor of its own tensor. The
partitioner does not run the kernel: it partitions the body once into a loop of the schedule
(``simshard.partition.loops``). The kernel, the whole-array reference, evaluates the body per step.
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from .builder import RuleBuilder
from .evaluate import evaluate
from .factors import NEED_REPLICATION, PASS_THROUGH
from .registry import register_op


def _split(items, num_carry: int, num_xs: int):
    return items[:num_carry], items[num_carry:num_carry + num_xs], items[num_carry + num_xs:]


def _eval(*avals, body, length, num_carry, num_xs, **_):
    carry, xs, consts = _split(avals, num_carry, num_xs)
    want = list(carry) + [Aval(x.shape[1:], x.dtype) for x in xs] + list(consts)
    got = [v.aval for v in body.inputs]
    if want != got:
        raise ValueError(f"scan: the body takes {[str(a) for a in got]}, the operands give {[str(a) for a in want]}")
    if any(x.shape[:1] != (length,) for x in xs):
        raise ValueError(f"scan: every xs needs a leading dim of {length}, got {[str(x) for x in xs]}")
    outs = [v.aval for v in body.outputs]
    if outs[:num_carry] != list(carry):
        raise ValueError(f"scan: the body returns carries {[str(a) for a in outs[:num_carry]]} for "
                         f"{[str(a) for a in carry]}: a carry must keep its shape and dtype")
    return tuple(carry) + tuple(Aval((length,) + a.shape, a.dtype) for a in outs[num_carry:])


def _kernel(*arrays, body, length, reverse, num_carry, num_xs, **_):
    carry, xs, consts = _split(list(arrays), num_carry, num_xs)
    ys = [[None] * length for _ in range(len(body.outputs) - num_carry)]
    for k in range(length):
        step = length - 1 - k if reverse else k
        outs = evaluate(body, *carry, *(x[step] for x in xs), *consts)
        carry = list(outs[:num_carry])
        for j, y in enumerate(outs[num_carry:]):
            ys[j][step] = y
    stacked = [np.stack(y) if length else np.zeros((0,) + v.aval.shape, v.aval.dtype)
               for y, v in zip(ys, body.outputs[num_carry:])]
    return tuple(np.asarray(c) for c in carry) + tuple(stacked)


def _rule(in_avals, out_avals, *, num_carry, num_xs, **_):
    carry, xs, consts = _split(in_avals, num_carry, num_xs)
    b = RuleBuilder([a.shape for a in in_avals], [a.shape for a in out_avals])
    n_in, n_out = len(in_avals), len(out_avals)

    def only(tensor_dims, size, kind=PASS_THROUGH, result=False):
        ops, res = [None] * n_in, [None] * n_out
        (res if result else ops)[tensor_dims[0]] = tensor_dims[1]
        b.add(ops, res, size, kind)

    for k, a in enumerate(carry):
        for d, n in enumerate(a.shape):
            ops, res = [None] * n_in, [None] * n_out
            ops[k], res[k] = d, d
            b.add(ops, res, n)
    for t in range(num_carry, n_in):
        for d, n in enumerate(in_avals[t].shape):
            only((t, d), n, NEED_REPLICATION if num_carry <= t < num_carry + num_xs and d == 0 else PASS_THROUGH)
    for t in range(num_carry, n_out):
        for d, n in enumerate(out_avals[t].shape):
            only((t, d), n, NEED_REPLICATION if d == 0 else PASS_THROUGH, result=True)
    return b.build()


register_op("scan", _eval, _kernel, _rule, shape_dependent_sums=True,
            doc="a loop of `length` steps of the program `body` over carries, scanned inputs and constants")
