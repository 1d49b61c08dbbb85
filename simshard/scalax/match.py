"""Match sharding rules (a pytree of rules / specs, a prefix of the values) to the leaves of a value.

This is the one place scalax shardings become simshard ``Sharding``s; every error raised here
names the leaf (by its tree path and, in sjit, by its program input name), the rule, and what broke.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import optree

from ..errors import ShardingError
from ..sharding.mesh import Mesh
from ..sharding.partition_spec import P
from ..sharding.dims import NamedSharding
from ..ir.program import Aval
from ..sharding.dims import Sharding
from .pytree import entry_name, leaf_aval
from .rules import ShardingRule, is_rule_leaf, is_spec_leaf


@dataclass(frozen=True)
class Matched:
    """One leaf of a value with the spec its rule gave and the resolved Sharding."""

    path: str  # scalax tree path within the whole value ('/'-joined)
    entries: tuple  # optree path entries within the whole value
    leaf: Any
    aval: Aval
    spec: Any  # None, P, NamedSharding, Sharding or DTensorSpec, as the rule gave it
    named: Any  # what match_sharding_rule returns for the leaf (NamedSharding for a P)
    sharding: Sharding | None


def describe(rule) -> str:
    return f"rule {rule!r}" if isinstance(rule, ShardingRule) else f"spec {rule!r}"


def _spec_mesh(spec):
    return getattr(spec, "mesh", None)


def resolve_spec(spec, aval: Aval, where: str, mesh: Mesh | None, expected_mesh: Mesh | None) -> Sharding | None:
    """A spec leaf as a Sharding for a value of type ``aval`` (errors prefixed with ``where``)."""
    from ..tracing.tracer import resolve_sharding

    if spec is None:
        return None
    if not is_spec_leaf(spec):
        raise ShardingError("invalid-spec", f"{where}: {spec!r} is not a PartitionSpec, sharding or ShardingRule")
    m = _spec_mesh(spec)
    if expected_mesh is not None and m is not None and m != expected_mesh:
        raise ShardingError(
            "wrong-mesh",
            f"{where}: the sharding is on mesh {m!r} but this MeshShardingHelper's mesh is {expected_mesh!r}",
        )
    return resolve_sharding(spec, aval, where, mesh)


def match(
    rules,
    value,
    mesh: Mesh | None,
    what: str,
    *,
    expected_mesh: Mesh | None = None,
    label: Callable[[tuple], str] | None = None,
    default: Callable[[Any], Any] | None = None,
) -> tuple[list[Matched], optree.PyTreeSpec]:
    """Apply ``rules`` (a rule / spec, or a pytree of them that is a prefix of ``value``).

    Returns one ``Matched`` per leaf of ``value`` (optree order, ``None`` an empty subtree) and
    the treespec of ``value``. ``label(entries)`` names a leaf in messages (default: its tree
    path); ``default(leaf)`` gives the spec of a leaf whose rule says None (e.g. a ShapeDtype's own
    sharding).
    """
    r_acc, r_leaves, subtrees = _rule_subtrees(rules, value, what)

    def name_of(entries) -> str:
        if label is not None:
            return label(entries)
        return repr("/".join(entry_name(e) for e in entries)) if entries else "the value"

    out: list[Matched] = []
    for r_entries, rule, sub in zip(r_acc, r_leaves, subtrees):
        s_acc, s_leaves, s_spec = optree.tree_flatten_with_accessor(sub, none_is_leaf=False)
        if isinstance(rule, ShardingRule):
            specs = _applied_specs(rule, sub, s_spec, f"{what}: {describe(rule)}", name_of(tuple(r_entries)))
        else:
            specs = [rule] * len(s_leaves)
        for s_entries, leaf, spec in zip(s_acc, s_leaves, specs):
            entries = tuple(r_entries) + tuple(s_entries)
            path = "/".join(entry_name(e) for e in entries)
            aval = leaf_aval(leaf)
            name = name_of(entries)
            if isinstance(rule, ShardingRule):
                where = f"{what}: leaf {name} ({aval}) with {describe(rule)} giving {spec!r}"
            else:
                where = f"{what}: leaf {name} ({aval}) with {describe(rule)}"
            if spec is None and default is not None:
                spec = default(leaf)
                where = f"{what}: leaf {name} ({aval}) with its own sharding {spec!r}"
            sharding = resolve_spec(spec, aval, where, mesh, expected_mesh)
            named = NamedSharding(mesh, spec) if isinstance(spec, P) else spec
            out.append(Matched(path, entries, leaf, aval, spec, named, sharding))
    return out, optree.tree_structure(value, none_is_leaf=False)


def _rule_subtrees(rules, value, what: str) -> tuple[list, list, list]:
    """The rule leaves of ``rules`` (with their accessors) and the subtree of ``value`` each
    applies to; a leaf that is no rule, or rules that are no prefix of ``value``, are errors."""
    r_acc, r_leaves, r_spec = optree.tree_flatten_with_accessor(rules, is_leaf=is_rule_leaf, none_is_leaf=True)
    for a, r in zip(r_acc, r_leaves):
        if not is_rule_leaf(r):
            where = f"{what}{'[' + '/'.join(entry_name(e) for e in a) + ']' if len(a) else ''}"
            raise ShardingError(
                "invalid-spec", f"{where}: {r!r} is not a ShardingRule, PartitionSpec, sharding or None"
            )
    try:
        subtrees = r_spec.flatten_up_to(value)
    except ValueError as e:
        raise ShardingError(
            "structure-mismatch",
            f"{what}: the sharding rules {_short(rules)} are not a prefix of the value's structure "
            f"{optree.tree_structure(value, none_is_leaf=False)}: {_first_clause(e)}",
        ) from None
    return r_acc, r_leaves, subtrees


def _applied_specs(rule: ShardingRule, sub, s_spec, where: str, name: str) -> list:
    """One spec per leaf of ``sub``, as ``rule`` gives them (a pytree of ``sub``'s structure)."""
    try:
        applied = rule.specs(sub)
    except ShardingError as e:
        raise ShardingError(e.rule, f"{where} on {name}: {e.detail}", axis=e.axis, dim=e.dim) from None
    try:
        return s_spec.flatten_up_to(applied)
    except ValueError as e:
        raise ShardingError(
            "structure-mismatch", f"{where} returned a pytree of another structure than {name}: {_first_clause(e)}"
        ) from None


def _short(x, n: int = 200) -> str:
    r = repr(x)
    return r if len(r) <= n else r[: n - 3] + "..."


def _first_clause(e: Exception) -> str:
    """optree's mismatch message without the dump of the whole value that follows it."""
    msg = str(e).split("; dict:")[0].split("; tuple:")[0].split("; list:")[0]
    return _short(msg, 300)
