"""Control flow with ``jax.lax``'s signatures: ``scan``, ``fori_loop``, ``while_loop``, ``cond``,
``switch``.

``scan`` inside a trace records one ``scan`` op whose body is the step traced once (values it
closes over become the op's constants): the partitioner turns it into one loop of the schedule,
partitioned once and run ``length`` times (``simshard.partition.loops``), and reverse mode
differentiates it by a scan of the body's vjp (``_scan_vjp``). ``fori_loop`` with known bounds
is a scan over the step numbers; ``while_loop`` records a ``while`` op (its trip count may depend
on traced values) and ``cond`` / ``switch`` a ``switch`` op that runs only the taken branch.
Control flow nests: a scan, while or cond inside a scan's body is an op of that body,
partitioned once with it. Inside explicit mode loops are unrolled and a traced branch computes
every branch and selects. On concrete values (outside a trace) they run as plain Python loops.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from dataclasses import replace

import numpy as np
import optree

from ..errors import TraceError
from ..ir import trace_stack
from ..ir.program import Aval, Value
from ..ops import define_vjp
from ..ops.cotangents import zeros
from ..tracing.explicit.mode import is_explicit
from ..tracing.state import Builder, Tracer, as_tracer, bind
from .control_types import check_branch_types, check_carry_types, unshard_scanned
from .nested import trace_nested


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
    check_carry_types(what, init, carry, step)


def scan(f: Callable, init, xs=None, length: int | None = None, reverse: bool = False, unroll: int | bool = 1):
    """``(final carry, stacked ys)``: ``carry, y = f(carry, x)`` for each ``x`` along the leading
    dim of ``xs`` (or ``length`` times with ``x = None``); ys stacked along a new leading dim."""
    return _scan(f, init, xs, length, reverse, "lax.scan")


def _scan(f: Callable, init, xs, length, reverse, what: str):
    n = _leading(xs) if xs is not None else None
    if n is None:
        if length is None:
            raise TraceError("lax.scan: give xs or length")
        n = int(length)
    elif length is not None and int(length) != n:
        raise TraceError(f"lax.scan: length={length} but xs have leading size {n}")
    outer = trace_stack.current()
    if isinstance(outer, Builder) and not is_explicit(outer.mesh) and n > 0:
        return _scan_op(outer, f, init, xs, n, reverse, what)
    carry, ys, xs = init, [None] * n, unshard_scanned(xs)
    for step in (range(n - 1, -1, -1) if reverse else range(n)):
        x = optree.tree_map(lambda a: a[step], xs, none_is_leaf=False) if xs is not None else None
        carry_next, y = f(carry, x)
        _check_carry(init, carry_next, step, what)
        carry, ys[step] = carry_next, y
    if n == 0 or ys[0] is None:
        return carry, None
    return carry, optree.tree_map(lambda *leaves: np.stack(leaves), *ys, none_is_leaf=False)


def _scan_op(outer: Builder, f: Callable, init, xs, n: int, reverse: bool, what: str = "lax.scan"):
    """Record ``scan`` as one op: the step traced once on one slice of ``xs``. The op takes only
    the xs its body reads (``_drop_unread_xs``). Besides the carries and ys, the op's results
    hold each step's residuals (its input carries and every intermediate, stacked): reverse mode
    reads what the body's derivative rules need of them (the derivative is a scan too, which
    takes only those), and the partitioner skips the results nobody uses, so a residual no rule
    reads, or a program that does not differentiate, never materialises them. The steps' xs are
    not residuals: the derivative's scan reads them from the op's own xs operands."""
    carry, carry_tree = optree.tree_flatten(init, none_is_leaf=False)
    carry = [as_tracer(c) for c in carry]
    x_leaves, x_tree = optree.tree_flatten(xs, none_is_leaf=False) if xs is not None else ([], None)
    x_leaves = [as_tracer(x) for x in x_leaves]
    nc, nx = len(carry), len(x_leaves)

    def step(*flat):
        c = optree.tree_unflatten(carry_tree, list(flat[:nc]))
        x = optree.tree_unflatten(x_tree, list(flat[nc:])) if x_tree is not None else None
        c_next, y = f(c, x)
        _check_carry(init, c_next, 0, what)
        return c_next, y

    avals = [c.aval for c in carry] + [Aval(x.shape[1:], x.dtype) for x in x_leaves]
    nested = trace_nested(outer, step, optree.tree_structure(tuple(range(nc + nx))), avals)
    for k, (a, b) in enumerate(zip(nested.outputs[:nc], carry)):
        if a.dtype != b.dtype:
            raise TraceError(f"lax.scan: carry {k} enters the body as {b.dtype} and leaves it as {a.dtype}: a carry "
                             "must keep its dtype (cast the initial value)")
    body, x_leaves = _drop_unread_xs(nested.program(), nc, x_leaves)
    residuals = tuple(body.inputs[:nc]) + tuple(o for e in body.eqns for o in e.outputs)
    body = replace(body, outputs=body.outputs + residuals)
    remat = _checkpointed(nested.builder)
    outs = bind("scan", *carry, *x_leaves, *nested.captured.values(), body=body, length=n,
                reverse=bool(reverse), num_carry=nc, num_xs=len(x_leaves), num_res=len(residuals),
                **({"remat": remat} if remat else {}))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return optree.tree_unflatten(nested.out_tree, list(outs[:len(outs) - len(residuals)]))


def _checkpointed(builder) -> tuple[Value, ...]:
    """The results of the body's equations inside ``ss.checkpoint`` regions: the derivative's
    scan recomputes them from the step's other values instead of reading them as residuals (a
    weight gathered for a layer is gathered again in the backward pass, as ZeRO-3 does)."""
    regions = getattr(builder, "remat", ())
    return tuple(o for r in regions for e in builder.eqns[r.start:r.stop] for o in e.outputs)


def _recomputed(eqns, remat: tuple[Value, ...], env: dict) -> None:
    """Record again, in the current trace, the equations whose results are in ``remat``, on the
    step's values in ``env`` (updated with their new results, in place of the saved residuals)."""
    again = set(remat)
    for e in eqns:
        if any(o in again for o in e.outputs):
            ins = [env[i] if isinstance(i, Value) else np.asarray(i.value) for i in e.inputs]
            outs = bind(e.op, *ins, shardings=e.shardings, **e.kw)
            env.update(zip(e.outputs, outs if isinstance(outs, tuple) else (outs,)))


def _drop_unread_xs(body, nc: int, x_leaves: list) -> tuple:
    """``body`` without the xs inputs that none of its equations or outputs reads, and the xs
    operands left. A derivative's scan takes as xs every residual its rules might look up; the
    ones its body never reads go here, so that the forward scan's residual results they were
    become unused (not materialised) and only what the backward pass reads is saved."""
    read = {i for e in body.eqns for i in e.inputs if isinstance(i, Value)} | set(body.outputs)
    keep = [k for k, v in enumerate(body.inputs[nc:nc + len(x_leaves)]) if v in read]
    if len(keep) == len(x_leaves):
        return body, x_leaves
    inputs = body.inputs[:nc] + tuple(body.inputs[nc + k] for k in keep) + body.inputs[nc + len(x_leaves):]
    return replace(body, inputs=inputs), [x_leaves[k] for k in keep]


def inline(program, *args) -> list:
    """Record ``program``'s equations in the current trace on ``args``; its outputs."""
    env: dict[Value, Any] = dict(zip(program.inputs, args))
    for e in program.eqns:
        ins = [env[i] if isinstance(i, Value) else np.asarray(i.value) for i in e.inputs]
        outs = bind(e.op, *ins, shardings=e.shardings, **e.kw)
        env.update(zip(e.outputs, outs if isinstance(outs, tuple) else (outs,)))
    return [env[v] for v in program.outputs]


def _scan_vjp(cts, *operands, out, body, length, reverse, num_carry, num_xs, num_res=0, remat=(), **_):
    """A scan's derivative is a scan run from the last step to the first: each step applies the
    body's derivative rules to the step's saved residuals (results of the forward scan) and its
    xs (the forward scan's own xs operands, sliced), carrying the carries' cotangents and summing
    the constants'. That scan takes only the residuals its body reads (``_drop_unread_xs``)."""
    if not isinstance(out, tuple):  # a scan of one result gets its cotangent as ops of one result do
        cts, out = (cts,), (out,)
    nc, nx = num_carry, num_xs
    n_user = len(out) - num_res
    xs, consts = list(operands[nc:nc + nx]), list(operands[nc + nx:])
    residuals = list(out[n_user:])
    # the values each step looks up: its xs, then its input carries and intermediates (residuals)
    step_values = list(body.inputs[nc:nc + nx]) + list(body.inputs[:nc]) + [o for e in body.eqns for o in e.outputs]
    user_outs = list(body.outputs[:n_user])
    done: list = []

    def all_cotangents():
        if done:
            return done[0]
        from .reverse import backward_eqns

        ct_carry = [c if c is not None else zeros(o.shape, o.dtype) for c, o in zip(cts[:nc], out[:nc])]
        ct_ys = [c if c is not None else zeros(o.shape, o.dtype) for c, o in zip(cts[nc:n_user], out[nc:n_user])]

        def back(state, inp):
            ct_c, acc = state
            cty_k, saved_k = inp
            builder = trace_stack.current()
            local = [builder.tracer(builder.capture(k)) for k in consts]  # the body's constants, here
            env = dict(zip(step_values, saved_k))  # the step's xs, carries and intermediates
            env.update(zip(body.inputs[nc + nx:], local))
            _recomputed(body.eqns, remat, env)  # checkpointed values: computed again, not read
            got = backward_eqns(body.eqns, env.__getitem__, list(body.inputs), user_outs, list(ct_c) + list(cty_k))
            grads = [g if g is not None else zeros(v.aval.shape, v.aval.dtype) for g, v in zip(got, body.inputs)]
            return (grads[:nc], [a + g for a, g in zip(acc, grads[nc + nx:])]), grads[nc:nc + nx]

        start = (ct_carry, [zeros(np.shape(k), k.dtype) for k in consts])
        (ct_init, ct_consts), ct_xs = scan(back, start, (ct_ys, xs + residuals), length=length, reverse=not reverse)
        done.append(list(ct_init) + list(ct_xs or []) + list(ct_consts))
        return done[0]

    return tuple((lambda k=k: all_cotangents()[k]) for k in range(len(operands)))


define_vjp("scan", _scan_vjp)


def fori_loop(lower, upper, body_fun: Callable, init_val):
    """``body_fun(i, val)`` for ``i`` in ``range(lower, upper)`` (bounds known while tracing): a
    scan over the step numbers, so inside a trace the body is partitioned once."""
    if isinstance(lower, Tracer) or isinstance(upper, Tracer):
        raise TraceError("lax.fori_loop: bounds computed from traced values are not supported; give Python ints")
    lower, upper = int(lower), int(upper)
    if upper <= lower:
        return init_val
    steps = np.arange(lower, upper, dtype=np.int32)
    return _scan(lambda val, i: (body_fun(i, val), None), init_val, steps, None, False, "lax.fori_loop")[0]


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """``body_fun`` while ``cond_fun(val)``. Inside a trace with a condition computed from traced
    values, one ``while`` op: its trip count is decided at run time, the same on every device."""
    outer = trace_stack.current()
    if isinstance(outer, Builder) and not is_explicit(outer.mesh):
        op = _while_op(outer, cond_fun, body_fun, init_val)
        if op is not None:
            return op
    val, step = init_val, 0
    while True:
        keep_going = cond_fun(val)
        if isinstance(keep_going, Tracer):
            raise TraceError(
                "lax.while_loop: the condition depends on traced values, so the trip count is known only at run "
                "time, and explicit mode cannot record such a loop. Bound it "
                "(lax.fori_loop, or a scan with a masked step) or run it outside explicit mode")
        if not bool(keep_going):
            return val
        nxt = body_fun(val)
        _check_carry(init_val, nxt, step, "lax.while_loop")
        val, step = nxt, step + 1


def _while_op(outer: Builder, cond_fun: Callable, body_fun: Callable, init_val):
    """Record ``while_loop`` as one op (None: the condition is known while tracing)."""
    leaves, tree = optree.tree_flatten(init_val, none_is_leaf=False)
    leaves = [as_tracer(x) for x in leaves]
    avals = [x.aval for x in leaves]
    flat_tree = optree.tree_structure(tuple(range(len(leaves))))

    traced = []

    def cond(*flat):
        pred = cond_fun(optree.tree_unflatten(tree, list(flat)))
        traced.append(isinstance(pred, Tracer))
        return pred

    def body(*flat):
        nxt = body_fun(optree.tree_unflatten(tree, list(flat)))
        _check_carry(init_val, nxt, 0, "lax.while_loop")
        return nxt

    c = trace_nested(outer, cond, flat_tree, avals)
    if not traced[0]:  # a condition that does not read the carries: a Python loop
        return None
    b = trace_nested(outer, body, flat_tree, avals)
    if len(c.outputs) != 1 or c.outputs[0].shape != () or c.outputs[0].dtype != np.bool_:
        raise TraceError(f"lax.while_loop: the condition must return a bool scalar, got "
                         f"{[str(o.aval) for o in c.outputs]}")
    for k, (o, x) in enumerate(zip(b.outputs, leaves)):
        if o.dtype != x.dtype:
            raise TraceError(f"lax.while_loop: carry {k} enters the body as {x.dtype} and leaves it as {o.dtype}")
    outs = bind("while", *leaves, *c.captured.values(), *b.captured.values(), cond=c.program(), body=b.program(),
                num_carry=len(leaves), num_cond_consts=len(c.captured))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return optree.tree_unflatten(tree, list(outs))


def switch(index, branches: Sequence[Callable], *operands):
    """``branches[index](*operands)``, ``index`` clamped into range as in JAX. Inside a trace, a
    traced index records one ``switch`` op: every branch traced and partitioned once, only the
    chosen one run. (In explicit mode or a scan's body: every branch runs and a select picks.)"""
    if not branches:
        raise TraceError("lax.switch: no branches")
    return _switch(index, branches, operands, "lax.switch", [f"branch {k}" for k in range(len(branches))])


def _switch(index, branches: Sequence[Callable], operands, what: str, names: Sequence[str]):
    if not isinstance(index, Tracer):
        k = int(np.clip(int(np.asarray(index)), 0, len(branches) - 1))
        return branches[k](*operands)
    outer = trace_stack.current()
    if isinstance(outer, Builder) and not is_explicit(outer.mesh):
        return _switch_op(outer, index, branches, operands)
    outs = [b(*operands) for b in branches]
    _check_branches(outs)
    check_branch_types(what, names, outs)
    idx = np.clip(index, 0, len(branches) - 1)
    result = outs[-1]
    for k in range(len(branches) - 2, -1, -1):
        result = optree.tree_map(lambda a, b, k=k: np.where(idx == k, a, b), outs[k], result, none_is_leaf=False)
    return result


def _check_branches(outs) -> None:
    first = optree.tree_structure(outs[0], none_is_leaf=False)
    for k, o in enumerate(outs[1:], 1):
        if optree.tree_structure(o, none_is_leaf=False) != first or _signature(o) != _signature(outs[0]):
            raise TraceError(f"lax.switch / cond: branch {k} returns {_signature(o)}, branch 0 {_signature(outs[0])}: "
                             "every branch must return the same structure, shapes and dtypes")


def _switch_op(outer: Builder, index, branches, operands):
    """Record ``switch`` as one op. Each branch program takes the operands and every branch's
    constants (a branch ignores the others'), so that all take the same inputs."""
    leaves, tree = optree.tree_flatten(tuple(operands), none_is_leaf=False)
    leaves = [as_tracer(x) for x in leaves]
    flat_tree = optree.tree_structure(tuple(range(len(leaves))))
    nested = []
    for br in branches:
        nested.append(trace_nested(outer, lambda *flat, br=br: br(*optree.tree_unflatten(tree, list(flat))),
                                   flat_tree, [x.aval for x in leaves]))
    _check_branches([optree.tree_unflatten(n.out_tree, n.outputs) for n in nested])
    consts = [t for n in nested for t in n.captured.values()]
    programs = []
    for k, n in enumerate(nested):
        p = n.program()
        top = max([v.id for v in p.values()], default=-1) + 1
        before = [Value(top + i, Aval(t.shape, t.dtype)) for i, t in enumerate(c for m in nested[:k] for c in m.captured.values())]
        top += len(before)
        after = [Value(top + i, Aval(t.shape, t.dtype)) for i, t in enumerate(c for m in nested[k + 1:] for c in m.captured.values())]
        own = p.inputs[len(leaves):]
        programs.append(replace(p, inputs=p.inputs[:len(leaves)] + tuple(before) + own + tuple(after)))
    idx = np.asarray(index).astype(np.int32) if not isinstance(index, Tracer) else index.astype(np.int32)
    outs = bind("switch", idx, *leaves, *consts, branches=tuple(programs))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return optree.tree_unflatten(nested[0].out_tree, list(outs))


def _switch_vjp(cts, index, *operands, out, branches, **_):
    """The chosen branch's derivative: a switch of the branches' vjps on the same index."""
    from .api import vjp

    if not isinstance(out, tuple):
        cts, out = (cts,), (out,)
    cts = [c if c is not None else zeros(o.shape, o.dtype) for c, o in zip(cts, out)]
    done: list = []

    def all_cotangents():
        if done:
            return done[0]

        def branch_vjp(program):
            def run(*args):
                ops, ct = list(args[:len(operands)]), list(args[len(operands):])
                _, f_vjp = vjp(lambda *o: inline(program, *o), *ops)
                return list(f_vjp(ct))
            return run

        done.append(switch(index, [branch_vjp(p) for p in branches], *operands, *cts))
        return done[0]

    return (None,) + tuple((lambda k=k: all_cotangents()[k]) for k in range(len(operands)))


define_vjp("switch", _switch_vjp)


def cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``."""
    if isinstance(pred, Tracer):
        if pred.shape != ():
            raise TraceError(f"lax.cond: the predicate must be a scalar, got shape {pred.shape}")
        return _switch(pred.astype(np.int32), [false_fun, true_fun], operands, "lax.cond", ["false branch", "true branch"])
    return true_fun(*operands) if bool(np.asarray(pred)) else false_fun(*operands)
