"""The eager call: a function of committed arrays run on their devices, compiled once per op and types.

``call(fun, args, kwargs, wrap=...)`` is what an eager op is (``x + y``, ``jnp.sum(x)``,
``ss.reshard(x, P(...))``, ``ss.jit(f)(x)``, a DTensor's ``d @ w``): the arguments' array leaves
(committed arrays, and numpy arrays, which are uncommitted and replicated) become the inputs of a
program traced with the committed arrays' shardings, everything else (Python scalars, axes,
specs) is closed over as a constant. The program goes the way of every program (``prepare``:
trace, typed in explicit mode or propagated; ``partition``; the devices object's ``load``) and
is kept per (function, static arguments, input shapes, dtypes and shardings), so an op applied
again to arrays of the same types runs at once. The types of the results are those the trace
gave them: one implementation of each rule serves eager and traced code.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Callable, NamedTuple

import numpy as np
import optree

from ..calls.compiled import Compiled
from ..calls.device_array import DeviceArray
from .rendezvous import member

CACHE_SIZE = 256  # compiled eager ops kept per devices object (least recently used dropped first)
_CACHE: "weakref.WeakKeyDictionary[Any, OrderedDict]" = weakref.WeakKeyDictionary()


class Split(NamedTuple):
    """The arguments of a call as leaves: the array leaves (the program's inputs) and the rest."""

    treedef: Any
    leaves: list
    dynamic: tuple[int, ...]  # positions of the array leaves in ``leaves``


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) or hasattr(x, "device_array")


def split(args: tuple, kwargs: dict) -> Split:
    leaves, treedef = optree.tree_flatten((tuple(args), dict(kwargs)), none_is_leaf=False)
    return Split(treedef, leaves, tuple(i for i, x in enumerate(leaves) if _is_array(x)))


def _static_key(x):
    """A hashable stand-in for a constant argument (slices are unhashable before Python 3.12)."""
    if isinstance(x, slice):
        return ("slice", x.start, x.stop, x.step)
    hash(x)
    return (type(x), x)


def _type_key(x) -> tuple:
    if hasattr(x, "device_array"):
        return (tuple(x.shape), np.dtype(x.dtype).str, x.device_array.sharding)
    return (x.shape, x.dtype.str, None)


def cache_key(fun, parts: Split, options: tuple) -> tuple | None:
    """The key of a compiled eager op, or None where an argument cannot be hashed (not kept)."""
    try:
        statics = tuple(_static_key(x) for i, x in enumerate(parts.leaves) if i not in parts.dynamic)
        key = (fun, parts.treedef, statics, tuple(_type_key(parts.leaves[i]) for i in parts.dynamic), options)
        hash(key)
        return key
    except TypeError:
        return None


def host_of_arrays(arrays: list):
    """The one devices object holding every committed array (a ValueError naming two that differ)."""
    hosts = []
    for x in arrays:
        if not any(h is x.host for h in hosts):
            hosts.append(x.host)
    if len(hosts) != 1:
        shown = ", ".join(f"{type(h).__name__} over mesh @{h.mesh.name} {dict(zip(h.mesh.axis_names, h.mesh.axis_sizes))}"
                          for h in hosts[:2])
        raise ValueError(f"Received incompatible devices for an eager op: the arrays live on different devices "
                         f"objects ({shown}); put them on one (ss.device_put(np.asarray(x), sharding))")
    return hosts[0]


def abstract_inputs(parts: Split, in_specs: list) -> list:
    """The array leaves as ShapeDtypes with their shardings (what the program is traced on)."""
    from simshard.tracing import ShapeDtype

    return [ShapeDtype(tuple(parts.leaves[i].shape), np.dtype(parts.leaves[i].dtype), s)
            for i, s in zip(parts.dynamic, in_specs)]


def flat_function(fun, parts: Split) -> Callable:
    """``fun`` as a function of the array leaves alone, the other arguments closed over."""

    def program(*arrays):
        leaves = list(parts.leaves)
        for i, a in zip(parts.dynamic, arrays):
            leaves[i] = a
        args, kwargs = optree.tree_unflatten(parts.treedef, leaves)
        return fun(*args, **kwargs)

    program.__name__ = getattr(fun, "__name__", type(fun).__name__)
    return program


def _compile(host, fun, parts: Split, in_specs: list, out_shardings, mesh) -> Compiled:
    """Trace ``fun`` on the array leaves (the rest closed over), then prepare, partition and load it."""
    from simshard.partition import partition
    from simshard.propagate.prepare import prepare

    traced, _ = prepare(flat_function(fun, parts), *abstract_inputs(parts, in_specs),
                        mesh=mesh if mesh is not None else host.mesh, out_shardings=out_shardings)
    spmd = partition(traced)
    return Compiled(host, host.load(spmd), spmd, traced, frozenset())


def in_specs(parts: Split, in_shardings) -> list:
    """Each array leaf's sharding: a committed array's own; a numpy array's none (replicated), or
    the ``in_shardings`` given to ``ss.jit`` (the run then checks a committed array agrees)."""
    own = [parts.leaves[i].device_array.sharding if hasattr(parts.leaves[i], "device_array") else None
           for i in parts.dynamic]
    if in_shardings is None:
        return own
    from simshard.tracing.tracer import broadcast_prefix

    args, _ = optree.tree_unflatten(parts.treedef, parts.leaves)
    given = broadcast_prefix(tuple(in_shardings) if isinstance(in_shardings, list) else in_shardings, args,
                             "in_shardings")
    return [g if g is not None else o for g, o in zip(given, own)]


def compiled_for(host, fun, parts: Split, *, in_shardings=None, out_shardings=None, mesh=None) -> Compiled:
    """The compiled eager op for these arguments, from the cache where it was compiled before."""
    key = cache_key(fun, parts, (repr(in_shardings), repr(out_shardings), mesh))
    kept = _CACHE.setdefault(host, OrderedDict())
    if key is not None and key in kept:
        kept.move_to_end(key)
        return kept[key]
    compiled = _compile(host, fun, parts, in_specs(parts, in_shardings), out_shardings, mesh)
    if key is not None:
        kept[key] = compiled
        while len(kept) > CACHE_SIZE:
            _, dropped = kept.popitem(last=False)
            unload = getattr(host, "unload", None)  # a RayMesh's processes let the schedules go
            if unload is not None:
                unload(dropped.key)
    return compiled


def call(fun: Callable, args: tuple, kwargs: dict, *, wrap: Callable[[DeviceArray, Any], Any], in_shardings=None,
         out_shardings=None, static_argnums=(), mesh=None) -> Any:
    """``fun(*args, **kwargs)`` run on the devices of the committed arrays among the arguments;
    each result a ``DeviceArray`` handed to ``wrap(device_array, host)`` (module docstring).
    ``static_argnums`` is accepted for ``ss.jit``'s sake: non-array arguments are static anyway."""
    m = member()
    if m is not None:  # per-rank code: the ranks meet and share one run of the op
        return m.meet(getattr(fun, "__name__", repr(fun)), None, lambda _: call(
            fun, args, kwargs, wrap=wrap, in_shardings=in_shardings, out_shardings=out_shardings, mesh=mesh))
    parts = split(args, kwargs)
    committed = [parts.leaves[i] for i in parts.dynamic if hasattr(parts.leaves[i], "device_array")]
    host = host_of_arrays(committed)
    compiled = compiled_for(host, fun, parts, in_shardings=in_shardings, out_shardings=out_shardings, mesh=mesh)
    inputs = [x.device_array if hasattr(x, "device_array") else x for x in (parts.leaves[i] for i in parts.dynamic)]
    out = compiled(*inputs).arrays
    return optree.tree_map(lambda a: wrap(a, host), out, is_leaf=lambda a: isinstance(a, DeviceArray),
                           none_is_leaf=False)


def clear_cache() -> None:
    """Forget every compiled eager op (a test that registers ops clears what used them)."""
    _CACHE.clear()


__all__ = ["CACHE_SIZE", "Split", "abstract_inputs", "flat_function", "host_of_arrays", "in_specs", "cache_key", "call", "clear_cache", "compiled_for", "split"]
