"""JAX's sharding type rules of control flow in explicit mode (seed 001, "JAX transformations and
higher-order functions"): where types must match, the sharding is part of the type.

* ``cond`` / ``switch``: every branch returns the same types, shardings included (a branch that
  reshards its result differently is a TypeError, not a silent select);
* ``scan`` / ``fori_loop`` / ``while_loop``: the body returns each carry with the type it took;
* ``scan`` over ``xs`` sharded on the scanned (leading) dim: the body's ``x`` has the type of one
  slice, the leading dim's axes dropped (JAX maps the type over the scanned axis), so ``xs`` are
  laid out whole along that dim once before the loop; the stacked ``ys`` are unsharded along it.

Outside explicit mode these checks do nothing: auto types carry no sharding.
"""

from __future__ import annotations

from typing import Sequence

import optree

from ..errors import TraceError
from ..sharding.partition_spec import P
from ..tracing.explicit.api import reshard, typeof
from ..tracing.explicit.mode import is_explicit
from ..tracing.explicit.types import partitions
from ..tracing.state import Tracer


def _types(tree) -> list:
    return [typeof(x) for x in optree.tree_leaves(tree, none_is_leaf=False)]


def _sharding_of(t) -> tuple:
    return tuple(t.spec), tuple(t.unreduced)


def check_branch_types(what: str, names: Sequence[str], outs: Sequence) -> None:
    """Every branch's outputs have the first branch's sharding types (TypeError naming the
    branches and the first output that differs)."""
    if not is_explicit():
        return
    first = _types(outs[0])
    for name, out in zip(names[1:], outs[1:]):
        for k, (a, b) in enumerate(zip(first, _types(out))):
            if _sharding_of(a) != _sharding_of(b):
                raise TraceError(
                    f"{what}: branches must have equal output types, but output {k} is {a.str_short()} in the "
                    f"{names[0]} and {b.str_short()} in the {name}. Reshard one of them (ss.reshard) so that "
                    "both give the same sharding")


def check_carry_types(what: str, init, carry, step: int) -> None:
    """The body returned every carry with the sharding type it entered with (TypeError naming the
    carry and both types)."""
    if not is_explicit():
        return
    for k, (a, b) in enumerate(zip(_types(init), _types(carry))):
        if _sharding_of(a) != _sharding_of(b):
            raise TraceError(
                f"{what}: the body's carry input and output types differ: carry {k} enters as {a.str_short()} and "
                f"leaves as {b.str_short()} (step {step}). A carry must keep its type, sharding included: reshard "
                "the body's result back (ss.reshard), or the initial value to the type the body gives")


def unshard_scanned(xs):
    """``xs`` with each leaf's leading (scanned) dim laid out whole, its other dims as typed: the
    type of one slice is the leaf's type with the leading dim dropped, as JAX types it."""
    if not is_explicit():
        return xs

    def one(x):
        if not isinstance(x, Tracer) or not x.ndim:
            return x
        t = typeof(x)
        if not t.spec[0]:
            return x
        return reshard(x, P(None, *partitions(t.spec[1:])))

    return optree.tree_map(one, xs, none_is_leaf=False)


__all__ = ["check_branch_types", "check_carry_types", "unshard_scanned"]
