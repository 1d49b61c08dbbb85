"""``vmap`` of control flow: the batching rules of ``scan``, ``switch`` and ``while``.

Each rule records the same control-flow op again, on the whole batch, with its body (or
branches, or condition) mapped by ``vmap`` inside it, as JAX batches them:

* ``scan``: the carries batched (an unbatched one is broadcast: the body may make it depend on
  the batch), the xs scanned along their own dim with the batch beside it, the ys stacked back
  with the batch first;
* ``switch``: with an unbatched index, one switch of the mapped branches; with a batched index
  every mapped branch runs and each example selects its own branch's result (JAX's rule too);
* ``while``: the loop runs while any example's condition holds, and an example whose condition
  no longer holds keeps its carry (a select per step).

Every result comes back batched along dim 0, as ``vmap``'s replay expects.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import trace_stack
from ..ops import define_batch
from ..ops.cotangents import call
from .batching import vmap
from .control import inline, scan, switch, while_loop


def _size(operands, batched) -> int:
    return next(np.shape(x)[0] for x, b in zip(operands, batched) if b)


def _batched(x, b: bool, size: int):
    """``x`` with the batch as its leading dim (broadcast along it when it has none)."""
    if b:
        return x
    return call("broadcast_in_dim", x, shape=(size,) + tuple(np.shape(x)), broadcast_dimensions=tuple(range(1, np.ndim(x) + 1)))


def _local(values):
    """Values of the enclosing trace as values of the trace in progress (a body closes over them)."""
    builder = trace_stack.current()
    return [builder.tracer(builder.capture(v)) for v in values]


def _mapped(program, in_axes, size: int):
    """``program`` run by ``vmap`` over ``in_axes`` (0: batched, None: shared by every example)."""
    return vmap(lambda *a: tuple(inline(program, *a)), in_axes=tuple(in_axes), axis_size=size)


def _scan_batch(operands, batched, *, body, length, reverse, num_carry, num_xs, num_res=0):
    size, nc, nx = _size(operands, batched), num_carry, num_xs
    carry = [_batched(x, b, size) for x, b in zip(operands[:nc], batched[:nc])]
    xs = [np.moveaxis(x, 1, 0) if b else x for x, b in zip(operands[nc:nc + nx], batched[nc:nc + nx])]
    consts, const_axes = operands[nc + nx:], [0 if b else None for b in batched[nc + nx:]]
    user = replace(body, outputs=body.outputs[:len(body.outputs) - num_res])
    step_fn = _mapped(user, [0] * nc + [0 if b else None for b in batched[nc:nc + nx]] + const_axes, size)

    def step(c, x):
        outs = step_fn(*c, *(x or ()), *_local(consts))
        return list(outs[:nc]), list(outs[nc:])

    carry, ys = scan(step, carry, xs or None, length=length, reverse=reverse)
    return tuple(carry) + tuple(np.moveaxis(y, 0, 1) for y in ys)


def _switch_batch(operands, batched, *, branches):
    index, rest = operands[0], operands[1:]
    size = _size(operands, batched)
    fns = [_mapped(p, [0 if b else None for b in batched[1:]], size) for p in branches]
    if not batched[0]:
        return tuple(switch(index, [lambda *a, fn=fn: list(fn(*a)) for fn in fns], *rest))
    results = [fn(*rest) for fn in fns]
    index = np.clip(index, 0, len(branches) - 1)
    out = list(results[-1])
    for k in range(len(branches) - 2, -1, -1):
        out = [np.where(np.reshape(index == k, (size,) + (1,) * (np.ndim(a) - 1)), a, b) for a, b in zip(results[k], out)]
    return tuple(out)


def _while_batch(operands, batched, *, cond, body, num_carry, num_cond_consts):
    size, nc, ncc = _size(operands, batched), num_carry, num_cond_consts
    carry = [_batched(x, b, size) for x, b in zip(operands[:nc], batched[:nc])]
    cc, bc = operands[nc:nc + ncc], operands[nc + ncc:]
    axes = [0 if b else None for b in batched]
    cond_fn = _mapped(cond, [0] * nc + axes[nc:nc + ncc], size)
    body_fn = _mapped(body, [0] * nc + axes[nc + ncc:], size)

    def going(cs):
        return np.any(cond_fn(*cs, *_local(cc))[0])

    def step(cs):
        (keep,) = cond_fn(*cs, *_local(cc))
        new = body_fn(*cs, *_local(bc))
        return [np.where(np.reshape(keep, (size,) + (1,) * (np.ndim(n) - 1)), n, c) for n, c in zip(new, cs)]

    return tuple(while_loop(going, step, carry))


define_batch("scan", _scan_batch)
define_batch("switch", _switch_batch)
define_batch("while", _while_batch)

__all__: list[str] = []
