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


register_op("scan", _eval, _kernel, _rule, shape_dependent_sums=True, structured=True,
            doc="a loop of `length` steps of the program `body` over carries, scanned inputs and constants")


# -- while -----------------------------------------------------------------------------------------
# ``while``: ``body`` while ``cond`` (``lax.while_loop`` on a condition computed from traced
# values). Operands: the carries' initial values, then ``cond``'s constants, then ``body``'s;
# ``cond`` takes ``(carry..., const...)`` and returns a bool scalar, ``body`` takes
# ``(carry..., const...)`` and returns the carries. The partitioner makes it a ``While`` of the
# schedule: both programs partitioned once, run as many times as the data say.
def _split_while(items, num_carry: int, num_cond_consts: int):
    return items[:num_carry], items[num_carry:num_carry + num_cond_consts], items[num_carry + num_cond_consts:]


def _while_eval(*avals, cond, body, num_carry, num_cond_consts, **_):
    carry, _, _ = _split_while(avals, num_carry, num_cond_consts)
    if [v.aval for v in body.outputs] != list(carry):
        raise ValueError(f"while: the body returns {[str(v.aval) for v in body.outputs]} for carries "
                         f"{[str(a) for a in carry]}: a carry must keep its shape and dtype")
    (pred,) = [v.aval for v in cond.outputs]
    if pred.shape != () or pred.dtype != np.bool_:
        raise ValueError(f"while: the condition must return a bool scalar, got {pred}")
    return tuple(carry)


def _while_kernel(*arrays, cond, body, num_carry, num_cond_consts, **_):
    carry, cconsts, bconsts = _split_while(list(arrays), num_carry, num_cond_consts)
    while bool(evaluate(cond, *carry, *cconsts)[0]):
        carry = list(evaluate(body, *carry, *bconsts))
    return tuple(np.asarray(c) for c in carry)


def _while_rule(in_avals, out_avals, *, num_carry, **_):
    b = RuleBuilder([a.shape for a in in_avals], [a.shape for a in out_avals])
    n_in, n_out = len(in_avals), len(out_avals)
    for k in range(num_carry):
        for d, n in enumerate(in_avals[k].shape):
            ops, res = [None] * n_in, [None] * n_out
            ops[k], res[k] = d, d
            b.add(ops, res, n)
    for t in range(num_carry, n_in):
        for d, n in enumerate(in_avals[t].shape):
            ops = [None] * n_in
            ops[t] = d
            b.add(ops, [None] * n_out, n)
    return b.build()


register_op("while", _while_eval, _while_kernel, _while_rule, shape_dependent_sums=True, structured=True,
            doc="`body` over the carries while `cond` holds (a trip count the data decide)")


# -- switch ----------------------------------------------------------------------------------------
# ``switch``: run ``branches[index]`` only (``lax.switch`` / ``lax.cond`` on a traced index).
# Operands: the index (an int32 scalar, clamped into range), then every branch's inputs (the
# operands the user passed, then each branch's constants); each branch program takes them all
# and returns results of the same avals.
def _switch_eval(index, *avals, branches, **_):
    if index.shape != () or index.dtype.kind not in "iu":
        raise ValueError(f"switch: the index must be an integer scalar, got {index}")
    outs = [tuple(v.aval for v in b.outputs) for b in branches]
    if any(o != outs[0] for o in outs[1:]):
        raise ValueError(f"switch: the branches return {[[str(a) for a in o] for o in outs]}: they must agree")
    return outs[0]


def _switch_kernel(index, *arrays, branches, **_):
    k = int(np.clip(int(index), 0, len(branches) - 1))
    return tuple(np.asarray(o) for o in evaluate(branches[k], *arrays))


def _switch_rule(in_avals, out_avals, **_):
    b = RuleBuilder([a.shape for a in in_avals], [a.shape for a in out_avals])
    n_in, n_out = len(in_avals), len(out_avals)
    for t, a in enumerate(in_avals):
        for d, n in enumerate(a.shape):
            ops = [None] * n_in
            ops[t] = d
            b.add(ops, [None] * n_out, n)
    for t, a in enumerate(out_avals):
        for d, n in enumerate(a.shape):
            res = [None] * n_out
            res[t] = d
            b.add([None] * n_in, res, n)
    return b.build()


register_op("switch", _switch_eval, _switch_kernel, _switch_rule, shape_dependent_sums=True, structured=True,
            doc="only the branch `branches[index]` runs (lax.switch / lax.cond on a traced predicate)")
