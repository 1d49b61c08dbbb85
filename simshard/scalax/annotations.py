"""``with_sharding_constraint`` over pytrees and named ``with_sharding_annotation`` hooks.

Inside a trace each traced leaf gets a ``sharding_constraint`` op carrying the resolved
Sharding; outside a trace (plain numpy values) both functions return the pytree unchanged, as
scalax does without a mesh. The mesh is the running sjit's helper mesh, else the trace's mesh,
else the ambient one (``ss.set_mesh``). Annotation names are looked up in the
``annotation_shardings`` of the sjit being traced; names it does not list stay plain.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Mapping

import optree

from ..sharding.mesh import Mesh
from .match import match


@dataclass
class ShardingContext:
    """What an sjit trace makes visible to model code: its mesh and its annotation shardings."""

    mesh: Mesh
    annotation_shardings: Mapping[str, Any] = field(default_factory=dict)
    used: set = field(default_factory=set)  # annotation names that found a sharding
    seen: set = field(default_factory=set)  # every annotation name met


_CONTEXTS: list[ShardingContext] = []


def current_context() -> ShardingContext | None:
    return _CONTEXTS[-1] if _CONTEXTS else None


@contextlib.contextmanager
def sharding_context(mesh: Mesh, annotation_shardings: Mapping[str, Any] | None = None):
    ctx = ShardingContext(mesh, dict(annotation_shardings or {}))
    _CONTEXTS.append(ctx)
    try:
        yield ctx
    finally:
        _CONTEXTS.remove(ctx)


def _tracing_leaves(pytree) -> bool:
    from ..tracing.tracer import Tracer

    return any(isinstance(x, Tracer) for x in optree.tree_leaves(pytree, none_is_leaf=False))


def _mesh_for_trace() -> tuple[Mesh | None, Mesh | None]:
    """(mesh to resolve P with, mesh shardings must be on)."""
    from ..tracing.context import get_mesh
    from ..tracing.tracer import current_builder

    ctx = current_context()
    if ctx is not None:
        return ctx.mesh, ctx.mesh
    return current_builder().mesh or get_mesh(), None


def constrain(pytree, sharding_rule, what: str, label=None):
    """Record a sharding_constraint op on every traced leaf of ``pytree`` (the others pass through)."""
    from ..tracing.tracer import Tracer, bind

    mesh, expected = _mesh_for_trace()
    matched, treedef = match(sharding_rule, pytree, mesh, what, expected_mesh=expected, label=label)
    leaves = []
    for m in matched:
        if isinstance(m.leaf, Tracer) and m.sharding is not None:
            leaves.append(bind("sharding_constraint", m.leaf, sharding=m.sharding))
        else:
            leaves.append(m.leaf)  # unconstrained, or a Python / numpy constant of the function
    return optree.tree_unflatten(treedef, leaves)


def with_sharding_constraint(pytree, sharding_rule):
    """Constrain the sharding of every leaf of ``pytree`` inside a traced function.

    ``sharding_rule`` is a ShardingRule, a P (or a concrete sharding: NamedSharding, Sharding,
    DTensorSpec), None (no constraint), or a pytree of those that is a prefix of ``pytree``.
    Returns a pytree of the same structure. Outside a trace it returns ``pytree`` unchanged.
    """
    if not _tracing_leaves(pytree):
        return pytree
    return constrain(pytree, sharding_rule, "with_sharding_constraint")


def with_sharding_annotation(pytree, sharding_name: str):
    """Name a point of the model whose sharding the sjit's ``annotation_shardings`` decides.

    When the sjit being traced maps ``sharding_name`` to a rule or spec, this is
    ``with_sharding_constraint(pytree, that)``; otherwise ``pytree`` comes back unchanged.
    """
    if not isinstance(sharding_name, str):
        raise TypeError(f"with_sharding_annotation: the annotation name must be a string, got {sharding_name!r}")
    ctx = current_context()
    if ctx is None or not _tracing_leaves(pytree):
        return pytree
    ctx.seen.add(sharding_name)
    if sharding_name not in ctx.annotation_shardings:
        return pytree
    ctx.used.add(sharding_name)
    rule = ctx.annotation_shardings[sharding_name]
    return constrain(pytree, rule, f"annotation {sharding_name!r}")
