"""Pytrees the scalax way: leaves named by '/'-joined tree paths, dataclasses as nodes.

scalax names a leaf by joining its path keys with '/': a dict key as ``str(key)``, a list or tuple
index as its number, a namedtuple or dataclass field by its name (``params/layers/0/kernel``).
Flattening is optree's (the same as ``ss.trace``): dict keys in sorted order, ``None`` an empty
subtree. Dataclasses become pytree nodes once registered (``register_dataclass``); the scalax
entry points register the dataclasses they meet in their arguments automatically.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import optree
from optree import registry as _registry

from ..ir.program import Aval

# optree's global namespace: what ss.trace (and optree without namespace=) flattens with.
_GLOBAL = getattr(_registry, "__GLOBAL_NAMESPACE")
_REGISTERED: set[type] = set()


def entry_name(entry: optree.PyTreeEntry) -> str:
    """One path component as scalax prints it (field names for namedtuples and dataclasses)."""
    for attr in ("field", "name"):
        v = getattr(entry, attr, None)
        if isinstance(v, str):
            return v
    return str(entry.entry)


def path_string(accessor, sep: str = "/") -> str:
    """The scalax tree path of a leaf: ``'layers/0/kernel'`` (empty for a bare leaf)."""
    return sep.join(entry_name(e) for e in accessor)


def leaves_with_paths(tree) -> tuple[list[str], list[Any], optree.PyTreeSpec]:
    """(scalax path strings, leaves, treespec) of ``tree``, flattened like ss.trace does."""
    accessors, leaves, spec = optree.tree_flatten_with_accessor(tree, none_is_leaf=False)
    return [path_string(a) for a in accessors], leaves, spec


def named_tree_map(f: Callable[[str, Any], Any], tree) -> Any:
    """``f(path, leaf)`` on every leaf; the results in the same structure (scalax's named_tree_map).

    Dataclasses among the leaves are registered as pytree nodes first."""
    register_dataclasses_in(tree)
    paths, leaves, spec = leaves_with_paths(tree)
    return optree.tree_unflatten(spec, [f(p, x) for p, x in zip(paths, leaves)])


def leaf_aval(x) -> Aval:
    """Shape and dtype of a leaf: an array, a tracer, an ShapeDtype or a Python scalar."""
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is None or dtype is None:
        arr = np.asarray(x)
        shape, dtype = arr.shape, arr.dtype
    return Aval(tuple(shape), dtype)


# -- dataclasses ----------------------------------------------------------------------------------
def _is_static_field(f: dataclasses.Field) -> bool:
    # JAX's register_dataclass meta fields / flax's struct.field(pytree_node=False).
    return bool(f.metadata.get("static", False)) or f.metadata.get("pytree_node", True) is False


def register_dataclass(cls: type) -> type:
    """Make a dataclass a pytree node in optree's global namespace (the one ss.trace uses).

    Its ``init`` fields are children, named by field (``GetAttrEntry``), except fields with
    ``metadata={"static": True}`` (or flax's ``pytree_node=False``), which are kept as hashable
    node data. Idempotent; usable as a decorator.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"register_dataclass: {cls!r} is not a dataclass type")
    if cls in _REGISTERED:
        return cls
    fields = [f for f in dataclasses.fields(cls) if f.init]
    data = tuple(f.name for f in fields if not _is_static_field(f))
    meta = tuple(f.name for f in fields if _is_static_field(f))

    def flatten(obj):
        return (
            tuple(getattr(obj, n) for n in data),
            tuple(getattr(obj, n) for n in meta),
            data,
        )

    def unflatten(meta_values, children):
        return cls(**dict(zip(data, children)), **dict(zip(meta, meta_values)))

    try:
        optree.register_pytree_node(
            cls, flatten, unflatten, path_entry_type=optree.GetAttrEntry, namespace=_GLOBAL
        )
    except ValueError:
        pass  # already registered by the user (optree refuses a second registration): keep theirs
    _REGISTERED.add(cls)
    return cls


def _is_simshard_object(x) -> bool:
    from ..sharding.mesh import Mesh
    from ..sharding.dims import NamedSharding
    from ..sharding.placements import DTensorSpec
    from ..sharding.dims import Sharding
    from ..tracing.tracer import ShapeDtype

    return isinstance(x, (Mesh, NamedSharding, DTensorSpec, Sharding, ShapeDtype))


def register_dataclasses_in(tree) -> None:
    """Register every dataclass found among the leaves of ``tree`` (nested ones too).

    Array-like dataclasses (anything with a ``shape``) and simshard's own types stay leaves.
    """
    for _ in range(100):  # each round registers one more level of nesting
        new = {
            type(x)
            for x in optree.tree_leaves(tree, none_is_leaf=False)
            if dataclasses.is_dataclass(x)
            and not isinstance(x, type)
            and type(x) not in _REGISTERED
            and not hasattr(x, "shape")
            and not _is_simshard_object(x)
        }
        if not new:
            return
        for cls in new:
            register_dataclass(cls)
