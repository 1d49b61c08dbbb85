"""``ss.from_jax(fn)``: a JAX function as a simshard program, built from its jaxpr on the arguments
of each call (``jax.make_jaxpr``), the shardings JAX states carried over: an outermost
``jax.jit``'s in/out shardings become the program's, arguments' own NamedShardings its input
shardings, and everything inside (``with_sharding_constraint``, ``reshard``, ``shard_map``,
nested jits, explicit-mode meshes) is interpreted in place (``jaxpr``, ``jax_primitives``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import optree

from ..tracing.tracer import ShapeDtype, Tracer
from .common import FrameworkOutputs, require
from .imported import Built, ImportedFunction, argument_names, named_like
from .jax_sharding import convert_sharding, convert_spec
from .jaxpr import interpret

# The default allowance where the arithmetic is not exact: XLA's CPU kernels (its own exp, tanh,
# log approximations, fused multiply-adds, other summation orders) differ from numpy's by a few
# ULPs per op. Measured on docs/examples/jax_transformer.py (a training step, float32 Gaussian
# data): at most 4.1 ULPs of an output's largest magnitude; 64 leaves 16 times that, and is still
# 2^-17 of the output's scale, far below what a wrong op gives (docs/import.md).
TOLERANCE_ULP = 64


def from_jax(fn: Callable, *, in_shardings=None, out_shardings=None, mesh=None,
             tolerance_ulp: int = TOLERANCE_ULP) -> ImportedFunction:
    """``fn`` (a JAX function, ``jax.jit``-wrapped or not) as a function simshard runs.

    ``in_shardings`` / ``out_shardings`` (simshard's spellings or JAX NamedShardings, one per
    argument or a prefix) add to or replace what JAX states; ``mesh`` is the mesh for ``P``s given
    here. ``tolerance_ulp``: the allowance of the comparison with JAX's own output where the
    arithmetic is not exact (module ``report.framework``)."""

    def build(args: tuple) -> Built:
        return _build(fn, args, in_shardings, out_shardings, mesh)

    def reference(args: tuple) -> FrameworkOutputs:
        jax = require("jax", "ss.from_jax")

        outs = jax.tree_util.tree_leaves(fn(*args))
        return FrameworkOutputs(f"jax {jax.__version__} ({jax.default_backend()})",
                                tuple(np.asarray(o) for o in outs), int(tolerance_ulp))

    return ImportedFunction(getattr(fn, "__name__", "jax_function"), build, reference)


def _jax_argument(leaf):
    jax = require("jax", "ss.from_jax")

    if isinstance(leaf, (ShapeDtype, Tracer)):  # abstract, or a value of an enclosing simshard trace
        return jax.ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype)
    return leaf


def _outer_jit(closed):
    """The one ``jit`` equation a ``jax.jit``-wrapped function's jaxpr is, taking the inputs in
    order and giving the outputs; else None."""
    jaxpr = closed.jaxpr
    if len(jaxpr.eqns) != 1 or jaxpr.eqns[0].primitive.name not in ("jit", "pjit") or jaxpr.constvars:
        return None
    eqn = jaxpr.eqns[0]
    if list(eqn.invars) != list(jaxpr.invars) or list(eqn.outvars) != list(jaxpr.outvars):
        return None
    return eqn


def _stated_shardings(closed, leaves: list) -> tuple[Any, list, list]:
    """The body to interpret and the in/out shardings JAX states for it, one per leaf."""
    eqn = _outer_jit(closed)
    if eqn is not None:
        ins = [convert_sharding(s, f"jit in_shardings[{i}]") for i, s in enumerate(eqn.params["in_shardings"])]
        outs = [convert_sharding(s, f"jit out_shardings[{i}]") for i, s in enumerate(eqn.params["out_shardings"])]
        body = eqn.params["jaxpr"]
    else:
        ins, outs, body = [None] * len(leaves), [None] * len(closed.jaxpr.outvars), closed
    own = [_own_sharding(x) for x in leaves]
    return body, [s if s is not None else o for s, o in zip(ins, own)], outs


def _own_sharding(leaf):
    """A JAX array's own NamedSharding (an argument placed with ``jax.device_put``), else None."""
    s = getattr(leaf, "sharding", None)
    if s is None or not hasattr(s, "spec") or not hasattr(s, "mesh"):
        return None
    return convert_sharding(s, "argument")


def _is_jax(x) -> bool:
    return type(x).__module__.split(".")[0] == "jax"


def _simshard_spelling(tree):
    """Shardings given to ``from_jax``: JAX's NamedShardings and PartitionSpecs as simshard's, the
    rest (simshard's own spellings) as they are."""
    def convert(x):
        if _is_jax(x) and hasattr(x, "spec"):
            return convert_sharding(x, "from_jax shardings")
        return convert_spec(x) if _is_jax(x) and type(x).__name__ in ("P", "PartitionSpec") else x

    return optree.tree_map(convert, tree, is_leaf=lambda x: _is_jax(x) or x is None, none_is_leaf=True)


def _build(fn, args: tuple, in_shardings, out_shardings, mesh) -> Built:
    jax = require("jax", "ss.from_jax")

    jargs = optree.tree_map(_jax_argument, args, none_is_leaf=False)
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*jargs)
    leaves, treedef = optree.tree_flatten(args, none_is_leaf=False)
    body, ins, outs = _stated_shardings(closed, leaves)
    out_tree = jax.tree_util.tree_structure(out_shape)

    def imported(*traced):
        results = interpret(body, optree.tree_leaves(traced, none_is_leaf=False))
        return jax.tree_util.tree_unflatten(out_tree, results)

    imported.__name__ = getattr(fn, "__name__", "jax_function")
    named_like(imported, argument_names(fn, len(args)))
    if mesh is None:
        mesh = next((s.mesh for s in ins + outs if s is not None), None)
    per_arg = optree.tree_unflatten(treedef, ins)
    in_sh = _simshard_spelling(in_shardings) if in_shardings is not None else tuple(per_arg)
    out_sh = _simshard_spelling(out_shardings) if out_shardings is not None else (
        None if all(s is None for s in outs) else jax.tree_util.tree_unflatten(out_tree, outs))
    return Built(imported, in_sh, out_sh, mesh)
