"""``grad``, ``value_and_grad``, ``vjp``, ``jvp`` and ``checkpoint``, with JAX's signatures.

Inside a trace each records the function's equations, then (reverse mode) their cotangents as
new equations of the same trace (``reverse.backward``). Forward mode is the transpose of reverse
mode: the vjp is linear in its cotangent, so differentiating it once more, in that cotangent,
applies the Jacobian to a tangent. Called on concrete arrays outside any trace, each traces the
call and evaluates it with numpy (as ``ss.jit`` does).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

import numpy as np
import optree

from ..errors import TraceError
from ..ir import trace_stack
from ..ops.cotangents import call, differentiable, zeros
from ..tracing.state import Builder, Tracer, as_tracer
from .reverse import Remat, backward


def trace_builder(what: str) -> Builder | None:
    """The trace in progress (None outside one); ``what`` names the transform that refuses any
    other kind of trace."""
    trace = trace_stack.current()
    if trace is None:
        return None
    if not isinstance(trace, Builder):
        raise TraceError(f"{what} inside this kind of trace ({type(trace).__name__}) is not supported")
    return trace


def outside_trace(fn: Callable, *args):
    """Run ``fn(*args)`` by tracing it and evaluating the program with numpy (a transform called
    outside any trace)."""
    from ..tracing.tracer import jit

    return jit(fn)(*args)


def _leaves(tree):
    """The leaves of ``tree`` as Tracers of the current trace (a value of an enclosing trace that a
    nested one closes over, as that trace's input for it)."""
    leaves, treedef = optree.tree_flatten(tree, none_is_leaf=False)
    builder = trace_stack.current()
    out = []
    for x in leaves:
        x = as_tracer(x) if not isinstance(x, Tracer) else x
        if x.builder is not builder and getattr(builder, "capture", None) is not None:
            x = builder.tracer(builder.capture(x))
        out.append(x)
    return out, treedef


def _distinct(tracers: list[Tracer]) -> list[Tracer]:
    """One program value per differentiated leaf: a value passed twice gets a copy, so that each
    position has its own derivative (``f(x, x)`` differentiated in both)."""
    seen, out = set(), []
    for t in tracers:
        if t.value in seen:
            t = call("convert", t, dtype=t.dtype)
        seen.add(t.value)
        out.append(t)
    return out


def vjp(f: Callable, *primals, has_aux: bool = False):
    """``(out, f_vjp)`` (or ``(out, f_vjp, aux)``): ``f_vjp(ct)`` gives the cotangent of each primal."""
    builder = trace_builder("ss.vjp")
    if builder is None:
        raise TraceError("ss.vjp returns a function of the trace it runs in: call it inside ss.jit / ss.run "
                         "(ss.grad and ss.value_and_grad also work on concrete arrays)")
    leaves, in_tree = _leaves(primals)
    leaves = _distinct(leaves)
    xs = [t.value for t in leaves]
    start = len(builder.eqns)
    result = f(*optree.tree_unflatten(in_tree, leaves))
    out, aux = result if has_aux else (result, None)
    out_leaves, out_tree = _leaves(out)
    stop = len(builder.eqns)
    outs = [t.value for t in out_leaves]

    def f_vjp(ct):
        ct_leaves, ct_tree = optree.tree_flatten(ct, none_is_leaf=False)
        if ct_tree != out_tree:
            raise TraceError(f"the cotangent's structure {ct_tree} differs from the output's {out_tree}")
        cts = []
        for c, o in zip(ct_leaves, out_leaves):
            c = as_tracer(c) if not isinstance(c, Tracer) else c
            if c.shape != o.shape:
                raise TraceError(f"a cotangent of shape {c.shape} for an output of shape {o.shape}")
            cts.append(c)
        got = backward(builder, start, stop, xs, outs, cts)
        grads = [g if g is not None else zeros(t.shape, t.dtype) for g, t in zip(got, leaves)]
        return optree.tree_unflatten(in_tree, grads)

    out = optree.tree_unflatten(out_tree, out_leaves)
    return (out, f_vjp, aux) if has_aux else (out, f_vjp)


def _argnums(argnums, n: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -n <= a < n:
            raise TraceError(f"argnums {argnums!r}: the function was called with {n} positional arguments")
    return tuple(a % n for a in nums)


def _check_inexact(what: str, f: Callable, args: Sequence, nums: Sequence[int]) -> None:
    """JAX differentiates only in real or complex arguments: an integer or bool one is a TypeError
    naming it (``allow_int=True`` lifts this; ``ss.vjp`` takes any)."""
    try:
        names = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        names = []
    for k in nums:
        for leaf in optree.tree_leaves(args[k], none_is_leaf=False):
            dt = leaf.dtype if hasattr(leaf, "dtype") else np.result_type(leaf)
            if not differentiable(dt):
                name = f" ({names[k]})" if k < len(names) else ""
                raise TypeError(
                    f"{what}: argument {k}{name} is {np.dtype(dt).name}, but derivatives are taken only in real "
                    "or complex (inexact) inputs. Differentiate in a float argument, use vjp for integer or bool "
                    "inputs, or pass allow_int=True")


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, allow_int: bool = False,
                   *, _what: str = "value_and_grad"):
    """``f``'s value and its gradient in the arguments ``argnums`` (``f`` returns a float scalar;
    with ``has_aux``, a pair ``(scalar, aux)``: gives ``((value, aux), grad)``). An integer or bool
    argument in ``argnums`` is a TypeError unless ``allow_int``, as in JAX."""

    @functools.wraps(f)
    def run(*args, **kwargs):
        nums = _argnums(argnums, len(args))
        if not allow_int:
            _check_inexact(_what, f, args, nums)
        if trace_builder("ss.value_and_grad") is None:
            return outside_trace(lambda *a: run(*a, **kwargs), *args)

        def partial(*diff):
            full = list(args)
            for k, a in zip(nums, diff):
                full[k] = a
            return f(*full, **kwargs)

        out, f_vjp, *aux = vjp(partial, *(args[k] for k in nums), has_aux=has_aux)
        if not isinstance(out, Tracer) or out.shape != () or not differentiable(out.dtype):
            what = f"{out.dtype}{list(out.shape)}" if isinstance(out, Tracer) else type(out).__name__
            raise TraceError(f"grad needs a function with a float scalar output, got {what} "
                             "(use ss.vjp for other outputs)")
        grads = f_vjp(call("full", shape=(), fill_value=1, dtype=out.dtype))
        grads = grads[0] if isinstance(argnums, int) else tuple(grads)
        return ((out, aux[0]) if has_aux else out), grads

    return run


def grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, allow_int: bool = False):
    """The gradient of a float-scalar ``f`` in the arguments ``argnums`` (with ``has_aux``: ``(grad, aux)``)."""
    vg = value_and_grad(f, argnums, has_aux, allow_int, _what="grad")

    @functools.wraps(f)
    def run(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return run


def jvp(f: Callable, primals: Sequence, tangents: Sequence):
    """``(f(*primals), J @ tangents)``: forward mode, as the transpose of reverse mode."""
    builder = trace_builder("ss.jvp")
    if builder is None:
        return outside_trace(lambda p, t: jvp(f, p, t), tuple(primals), tuple(tangents))
    primals, tangents = tuple(primals), tuple(tangents)
    if optree.tree_structure(primals) != optree.tree_structure(tangents):
        raise TraceError("ss.jvp: primals and tangents differ in structure")
    out, f_vjp = vjp(f, *primals)
    out_leaves, out_tree = optree.tree_flatten(out, none_is_leaf=False)
    # the vjp is linear in its cotangent u: its own vjp in u, at the tangent, is the jvp
    us = [zeros(o.shape, o.dtype) for o in out_leaves]
    start = len(builder.eqns)
    g = f_vjp(optree.tree_unflatten(out_tree, us))
    g_leaves = optree.tree_leaves(g, none_is_leaf=False)
    stop = len(builder.eqns)
    t_leaves = [as_tracer(t) if not isinstance(t, Tracer) else t for t in optree.tree_leaves(tangents, none_is_leaf=False)]
    got = backward(builder, start, stop, [u.value for u in us], [v.value for v in g_leaves], t_leaves)
    tangent_out = [t if t is not None else zeros(o.shape, o.dtype) for t, o in zip(got, out_leaves)]
    return out, optree.tree_unflatten(out_tree, tangent_out)


def checkpoint(f: Callable | None = None, *, prevent_cse: bool = True, policy: Any = None):
    """``f`` whose intermediates reverse mode recomputes in the backward pass instead of keeping
    them (JAX's ``checkpoint`` / ``remat``; ``policy`` is not supported: nothing is saved)."""
    if f is None:
        return lambda g: checkpoint(g, prevent_cse=prevent_cse, policy=policy)
    if policy is not None:
        raise TraceError("ss.checkpoint: save policies are not supported (everything is recomputed)")

    @functools.wraps(f)
    def run(*args, **kwargs):
        builder = trace_builder("ss.checkpoint")
        if builder is None:
            return f(*args, **kwargs)
        start = len(builder.eqns)
        out = f(*args, **kwargs)
        if not hasattr(builder, "remat"):
            builder.remat = []
        builder.remat.append(Remat(start, len(builder.eqns)))
        return out

    return run


remat = checkpoint
