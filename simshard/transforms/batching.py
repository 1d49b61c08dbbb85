"""``vmap``: a function of one example mapped over a batch, by each op's batching rule.

The function is traced once on one example's shapes (a nested trace; values of the enclosing
trace it closes over become its unbatched inputs), then its equations are recorded again in the
enclosing trace, each op given by its registry entry's ``batch`` rule where an operand is batched
(``simshard.ops.batching``) and unchanged where none is. The result is one program over the whole
batch, sharded like any other; ``spmd_axis_name`` puts the batch dim of the inputs and outputs on
a mesh axis.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import optree

from ..errors import TraceError
from ..ir.program import Aval, Value
from ..ops import get_op
from ..ops.cotangents import call
from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from ..tracing.state import Tracer, as_tracer
from .api import outside_trace, trace_builder
from .nested import trace_nested


def _axes_of(in_axes, args: tuple) -> list:
    """One axis (int or None) per leaf of ``args``: ``in_axes`` is an int, None, or a tuple with
    one entry per argument, each a prefix of that argument's tree."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not isinstance(in_axes, tuple):
        in_axes = (in_axes,) * len(args)
    if len(in_axes) != len(args):
        raise TraceError(f"vmap: in_axes has {len(in_axes)} entries for {len(args)} arguments")
    out = []
    for spec, arg in zip(in_axes, args):
        try:
            full = optree.tree_broadcast_prefix(spec, arg, none_is_leaf=True)
        except ValueError as e:
            raise TraceError(f"vmap: in_axes entry {spec!r} does not match its argument's structure: {e}") from None
        out += optree.tree_leaves(full, none_is_leaf=True)
    return out


def _spmd(x, axis_name, dim: int, mesh):
    if mesh is None:
        raise TraceError("vmap: spmd_axis_name needs a mesh (ss.run(mesh=...), ss.jit(mesh=...) or ss.set_mesh)")
    dims = tuple(DimSharding((axis_name,) if d == dim else (), is_open=d != dim) for d in range(np.ndim(x)))
    return call("sharding_constraint", x, sharding=Sharding(mesh, dims))


def vmap(f: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_name=None, axis_size: int | None = None,
         spmd_axis_name: str | None = None):
    """``f`` mapped over the ``in_axes`` dim of its arguments, results stacked along ``out_axes``."""
    if axis_name is not None:
        raise TraceError("vmap: axis_name (collectives over the mapped axis) is not supported; use shard_map")

    @functools.wraps(f)
    def run(*args):
        outer = trace_builder("ss.vmap")
        if outer is None:
            return outside_trace(run, *args)
        leaves, in_tree = optree.tree_flatten(args, none_is_leaf=False)
        axes = _axes_of(in_axes, args)
        size = _batch_size(leaves, axes, axis_size)
        batched_args = []
        for x, a in zip(leaves, axes):
            x = as_tracer(x)
            if a is not None:
                a = a % x.ndim
                if a != 0:
                    x = np.moveaxis(x, a, 0)
                if spmd_axis_name is not None:
                    x = _spmd(x, spmd_axis_name, 0, outer.mesh)
            batched_args.append((x, a is not None))
        nested = trace_nested(outer, f, in_tree, [Aval(x.shape[1:] if b else x.shape, x.dtype) for x, b in batched_args])
        env = _replay_batched(outer, nested, batched_args)
        out = optree.tree_unflatten(nested.out_tree, nested.outputs)
        out_axes_leaves = _axes_of(out_axes, (out,)) if not isinstance(out_axes, int) else [out_axes] * len(nested.outputs)
        result = [_batched_output(env[o.value], a, size, spmd_axis_name, outer.mesh)
                  for o, a in zip(nested.outputs, out_axes_leaves)]
        return optree.tree_unflatten(nested.out_tree, result)

    return run


def _batch_size(leaves, axes, axis_size: int | None) -> int:
    """The one size of every mapped axis (and of ``axis_size`` when given)."""
    sizes = {np.shape(x)[a] for x, a in zip(leaves, axes) if a is not None}
    if axis_size is not None:
        sizes.add(int(axis_size))
    if not sizes:  # JAX: a ValueError, nothing to map over
        raise ValueError("vmap: the function was called with no array arguments, so there is no axis to map over; "
                         "give axis_size=" if not leaves else
                         "vmap: no argument is mapped (every in_axes is None); give axis_size= or map an argument")
    if len(sizes) != 1:
        raise TraceError(f"vmap: the mapped axes have sizes {sorted(sizes)}; they must agree")
    return sizes.pop()


def _replay_batched(outer, nested, batched_args) -> dict[Value, tuple[Tracer, bool]]:
    """The nested trace's equations recorded again in the enclosing trace: unchanged where no
    operand is batched, by the op's batching rule where one is. Returns, per nested value, its
    Tracer in the enclosing trace and whether it is batched."""
    env: dict[Value, tuple[Tracer, bool]] = {t.value: xb for t, xb in zip(nested.inputs, batched_args)}
    env.update((v, (t, False)) for v, t in nested.captured.items())
    for e in nested.builder.eqns:
        ins = [env[i][0] if isinstance(i, Value) else np.asarray(i.value) for i in e.inputs]
        bat = [isinstance(i, Value) and env[i][1] for i in e.inputs]
        if not any(bat):
            outs = outer.bind(e.op, *ins, shardings=e.shardings, **e.kw)
        else:
            rule = get_op(e.op).batch
            if rule is None:
                raise TraceError(f"vmap: op {e.op} has no batching rule; give it one with "
                                 f"ss.ops.define_batch({e.op!r}, rule), or keep batched values out of it")
            outs = rule(ins, bat, **e.kw)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for o, t in zip(e.outputs, outs):
            env[o] = (t, any(bat))
    return env


def _batched_output(traced: tuple[Tracer, bool], out_axis, size: int, spmd_axis_name, mesh):
    """One output with its batch dim (broadcast when the output does not depend on the batch)
    moved to ``out_axis``."""
    t, batched = traced
    if not batched:
        t = call("broadcast_in_dim", t, shape=(size,) + t.shape, broadcast_dimensions=tuple(range(1, t.ndim + 1)))
    if spmd_axis_name is not None:
        t = _spmd(t, spmd_axis_name, 0, mesh)
    if out_axis is None:
        raise TraceError("vmap: out_axes=None (an unmapped output) is not supported")
    if out_axis % t.ndim != 0:
        t = np.moveaxis(t, 0, out_axis % t.ndim)
    return t
