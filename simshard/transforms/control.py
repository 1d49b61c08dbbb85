"""Control flow with ``jax.lax``'s signatures: ``scan``, ``fori_loop``, ``while_loop``, ``cond``,
``switch``.

Today each is traced by running the loop in Python: a scan of N steps records its body N times
(the program is its unrolled form, so it moves exactly the bytes of the unrolled loop, and reverse
mode differentiates it like any other equations). A trip count or a branch that depends on
traced values is handled where that stays exact: ``cond`` / ``switch`` on a traced predicate
compute every branch and select (both run); a ``while_loop`` whose condition is traced is refused
with a TraceError. On concrete values (outside a trace) they run as plain Python loops.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import optree

from ..errors import TraceError
from ..tracing.state import Tracer


def _leading(xs) -> int | None:
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in optree.tree_leaves(xs, none_is_leaf=False)}
    if None in sizes:
        raise TraceError("lax.scan: every leaf of xs needs a leading (scanned) dimension; a 0-d leaf has none")
    if len(sizes) > 1:
        raise TraceError(f"lax.scan: the leaves of xs have different leading sizes {sorted(sizes)}")
    return sizes.pop() if sizes else None


def _signature(tree) -> list[tuple]:
    return [(tuple(np.shape(x)), np.result_type(x).str if not isinstance(x, Tracer) else x.dtype.str)
            for x in optree.tree_leaves(tree, none_is_leaf=False)]


def _check_carry(init, carry, step: int, what: str) -> None:
    if optree.tree_structure(init, none_is_leaf=False) != optree.tree_structure(carry, none_is_leaf=False):
        raise TraceError(f"{what}: the body returned a carry of another structure at step {step} "
                         f"({optree.tree_structure(carry, none_is_leaf=False)}, the initial one is "
                         f"{optree.tree_structure(init, none_is_leaf=False)})")
    shapes = [s for s, _ in _signature(carry)], [s for s, _ in _signature(init)]
    if shapes[0] != shapes[1]:
        raise TraceError(f"{what}: the body changed the carry's shapes at step {step}: {shapes[0]} (initial {shapes[1]})")


def scan(f: Callable, init, xs=None, length: int | None = None, reverse: bool = False, unroll: int | bool = 1):
    """``(final carry, stacked ys)``: ``carry, y = f(carry, x)`` for each ``x`` along the leading
    dim of ``xs`` (or ``length`` times with ``x = None``); ys stacked along a new leading dim."""
    n = _leading(xs) if xs is not None else None
    if n is None:
        if length is None:
            raise TraceError("lax.scan: give xs or length")
        n = int(length)
    elif length is not None and int(length) != n:
        raise TraceError(f"lax.scan: length={length} but xs have leading size {n}")
    carry, ys = init, [None] * n
    for step in (range(n - 1, -1, -1) if reverse else range(n)):
        x = optree.tree_map(lambda a: a[step], xs, none_is_leaf=False) if xs is not None else None
        carry_next, y = f(carry, x)
        _check_carry(init, carry_next, step, "lax.scan")
        carry, ys[step] = carry_next, y
    if n == 0 or ys[0] is None:
        return carry, None
    return carry, optree.tree_map(lambda *leaves: np.stack(leaves), *ys, none_is_leaf=False)


def fori_loop(lower, upper, body_fun: Callable, init_val):
    """``body_fun(i, val)`` for ``i`` in ``range(lower, upper)`` (bounds known while tracing)."""
    if isinstance(lower, Tracer) or isinstance(upper, Tracer):
        raise TraceError("lax.fori_loop: bounds computed from traced values are not supported; give Python ints")
    val = init_val
    for i in range(int(lower), int(upper)):
        nxt = body_fun(np.int32(i), val)
        _check_carry(init_val, nxt, i, "lax.fori_loop")
        val = nxt
    return val


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """``body_fun`` while ``cond_fun(val)``; the condition must be known while tracing."""
    val, step = init_val, 0
    while True:
        keep_going = cond_fun(val)
        if isinstance(keep_going, Tracer):
            raise TraceError(
                "lax.while_loop: the condition depends on traced values, so the trip count is known only at run "
                "time; simshard does not run data-dependent loops yet. Bound it (lax.fori_loop, or a scan with a "
                "masked step) or run the function on concrete arrays")
        if not bool(keep_going):
            return val
        nxt = body_fun(val)
        _check_carry(init_val, nxt, step, "lax.while_loop")
        val, step = nxt, step + 1


def switch(index, branches: Sequence[Callable], *operands):
    """``branches[index](*operands)``, ``index`` clamped into range as in JAX. A traced index runs
    every branch and selects each output element by element."""
    if not branches:
        raise TraceError("lax.switch: no branches")
    if not isinstance(index, Tracer):
        k = int(np.clip(int(np.asarray(index)), 0, len(branches) - 1))
        return branches[k](*operands)
    outs = [b(*operands) for b in branches]
    first = optree.tree_structure(outs[0], none_is_leaf=False)
    for k, o in enumerate(outs[1:], 1):
        if optree.tree_structure(o, none_is_leaf=False) != first or _signature(o) != _signature(outs[0]):
            raise TraceError(f"lax.switch / cond: branch {k} returns {_signature(o)}, branch 0 {_signature(outs[0])}: "
                             "every branch must return the same structure, shapes and dtypes")
    idx = np.clip(index, 0, len(branches) - 1)
    result = outs[-1]
    for k in range(len(branches) - 2, -1, -1):
        result = optree.tree_map(lambda a, b, k=k: np.where(idx == k, a, b), outs[k], result, none_is_leaf=False)
    return result


def cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``."""
    if isinstance(pred, Tracer):
        if pred.shape != ():
            raise TraceError(f"lax.cond: the predicate must be a scalar, got shape {pred.shape}")
        return switch(pred.astype(np.int32), [false_fun, true_fun], *operands)
    return true_fun(*operands) if bool(np.asarray(pred)) else false_fun(*operands)
