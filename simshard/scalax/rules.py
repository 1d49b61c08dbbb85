"""Sharding rules: turn a pytree of arrays into a pytree of PartitionSpecs (scalax semantics).

Each rule's ``apply(pytree)`` returns a pytree of the same structure whose leaves are ``P``
(partition specs, no mesh yet). ``MeshShardingHelper.match_sharding_rule`` puts them on a mesh.
"""

from __future__ import annotations

import abc
import re
from typing import Any, Callable

import numpy as np
import optree

from ..errors import ShardingError
from ..sharding.partition_spec import P
from .pytree import leaf_aval, named_tree_map, register_dataclasses_in


def is_spec_leaf(x) -> bool:
    """A leaf a rule may produce: None, a P, one of simshard's concrete shardings, a placement
    list or sharding text (read on the mesh by ``sharding.spelling``; a bare word is none)."""
    from ..sharding.dims import NamedSharding
    from ..sharding.placements import DTensorSpec
    from ..sharding.dims import Sharding
    from ..sharding.spelling import is_placement_list, is_sharding_text

    return (x is None or isinstance(x, (P, NamedSharding, Sharding, DTensorSpec)) or is_placement_list(x)
            or is_sharding_text(x))


def is_rule_leaf(x) -> bool:
    """A leaf of a sharding-rules pytree: a ShardingRule or a spec leaf."""
    return isinstance(x, ShardingRule) or is_spec_leaf(x)


class ShardingRule(abc.ABC):
    """Base class for sharding rules: ``specs(pytree)`` gives a pytree of P (or None) leaves,
    ``apply(pytree)`` the same as ``NamedSharding`` leaves on the mesh, as scalax states."""

    @abc.abstractmethod
    def specs(self, pytree) -> Any:
        """A pytree with the structure of ``pytree`` holding one P (or None) per leaf."""

    def apply(self, pytree, mesh=None) -> Any:
        """A pytree with the structure of ``pytree`` holding one ``NamedSharding`` per leaf, on
        ``mesh`` (default: the ambient mesh, ``ss.set_mesh`` / ``ss.use_mesh``). With no mesh
        anywhere there is nothing to name: the leaves stay P (``specs``)."""
        from ..sharding.dims import NamedSharding
        from ..tracing.context import get_mesh

        specs = self.specs(pytree)
        mesh = mesh if mesh is not None else get_mesh()
        if mesh is None:
            return specs
        return optree.tree_map(lambda s: NamedSharding(mesh, s) if isinstance(s, P) else s, specs,
                               is_leaf=is_spec_leaf, none_is_leaf=True)


def _largest_power_of_two_divisor(n: int) -> int:
    if n == 0:
        return 1  # scalax loops forever on 0; an empty dimension has nothing to shard
    k = 1
    while n % (2 * k) == 0:
        k *= 2
    return k


class FSDPShardingRule(ShardingRule):
    """Shard every large enough leaf along one dimension over the FSDP mesh axis (scalax's rule).

    * A leaf with fewer than ``min_fsdp_size`` elements is replicated (``P()``).
    * With ``fsdp_axis_size`` given: dimensions are tried from the largest to the smallest and
      the first whose size is divisible by ``fsdp_axis_size`` is sharded; none → replicated.
    * With ``fsdp_axis_size=None``: the dimension with the largest power-of-two divisor is
      sharded, skipping dimensions of size 1 (so it may be uneven on the real axis).
    * Ties go to the lowest dimension index (a stable sort; scalax's ``np.argsort`` does the same
      for ranks up to 16). Dtypes are not looked at (scalax's comment says "only float weights"
      but its code does not check, and neither does this).
    """

    def __init__(self, fsdp_axis_name: str = "fsdp", fsdp_axis_size: int | None = None, min_fsdp_size: int = 2**20):
        if not isinstance(fsdp_axis_name, str) and not (
            isinstance(fsdp_axis_name, tuple) and all(isinstance(a, str) for a in fsdp_axis_name)
        ):
            raise TypeError(f"FSDPShardingRule: fsdp_axis_name must be an axis name, got {fsdp_axis_name!r}")
        if fsdp_axis_size is not None and (not isinstance(fsdp_axis_size, (int, np.integer)) or fsdp_axis_size < 1):
            raise ValueError(f"FSDPShardingRule: fsdp_axis_size must be a positive int or None, got {fsdp_axis_size!r}")
        self.fsdp_axis_name = fsdp_axis_name
        self.fsdp_axis_size = None if fsdp_axis_size is None else int(fsdp_axis_size)
        self.min_fsdp_size = min_fsdp_size

    def spec_for_shape(self, shape) -> P:
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape, dtype=np.int64)) < self.min_fsdp_size:
            return P()
        entries: list = [None] * len(shape)
        if self.fsdp_axis_size is None:
            order = np.argsort([-_largest_power_of_two_divisor(n) for n in shape], kind="stable")
            ok = lambda i: shape[i] > 1  # noqa: E731
        else:
            order = np.argsort([-n for n in shape], kind="stable")
            ok = lambda i: shape[i] % self.fsdp_axis_size == 0  # noqa: E731
        for i in order:
            if ok(int(i)):
                entries[int(i)] = self.fsdp_axis_name
                return P(*entries)
        return P()

    def specs(self, pytree):
        register_dataclasses_in(pytree)
        return optree.tree_map(lambda x: self.spec_for_shape(leaf_aval(x).shape), pytree, none_is_leaf=False)

    def __repr__(self) -> str:
        return (
            f"FSDPShardingRule(fsdp_axis_name={self.fsdp_axis_name!r}, fsdp_axis_size={self.fsdp_axis_size!r}, "
            f"min_fsdp_size={self.min_fsdp_size!r})"
        )


class TreePathShardingRule(ShardingRule):
    """``(regex, spec)`` pairs matched with ``re.search`` against each leaf's '/'-joined tree path.

    The first matching pair wins. Scalars and single-element leaves always get ``P()`` (before
    any matching). With ``strict`` (the default) two mistakes are errors: a leaf no pattern
    matches (scalax's check) and a pattern that matches no leaf at all (usually a typo in a
    path; scalax lets it pass silently). Without ``strict`` unmatched leaves are replicated.
    """

    def __init__(self, *rules, strict: bool = True):
        checked = []
        for k, r in enumerate(rules):
            if not (isinstance(r, (tuple, list)) and len(r) == 2) or isinstance(r, P):
                raise TypeError(
                    f"TreePathShardingRule: rule {k} ({r!r}) must be a pair (regex, PartitionSpec)"
                )
            pattern, spec = r
            if not isinstance(pattern, (str, re.Pattern)):
                raise TypeError(f"TreePathShardingRule: rule {k}: pattern {pattern!r} must be a regex string")
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise ValueError(f"TreePathShardingRule: rule {k}: invalid regex {pattern!r}: {e}") from None
            if isinstance(spec, (tuple, list)) and not is_spec_leaf(spec):
                spec = P(*spec)
            if not is_spec_leaf(spec):
                raise TypeError(
                    f"TreePathShardingRule: rule {k} ({pattern!r}): {spec!r} is not a PartitionSpec"
                )
            checked.append((compiled, spec))
        self.rules = tuple(checked)
        self.strict = bool(strict)

    def spec_for(self, path: str, leaf):
        shape = leaf_aval(leaf).shape
        if len(shape) == 0 or int(np.prod(shape, dtype=np.int64)) == 1:
            return P()  # scalax never partitions scalars
        for pattern, spec in self.rules:
            if pattern.search(path) is not None:
                return spec
        if self.strict:
            tried = ", ".join(repr(p.pattern) for p, _ in self.rules) or "none"
            raise ShardingError(
                "no-matching-rule",
                f"TreePathShardingRule: no pattern matches the leaf at tree path {path!r} "
                f"(shape {shape}); patterns tried: {tried}. Add a pattern for it, or pass strict=False "
                "to replicate unmatched leaves",
            )
        return P()

    def specs(self, pytree):
        out = named_tree_map(self.spec_for, pytree)
        if self.strict:
            paths: list[str] = []
            named_tree_map(lambda path, leaf: paths.append(path), pytree)
            unused = [p.pattern for p, _ in self.rules if not any(p.search(path) for path in paths)]
            if unused:
                raise ShardingError(
                    "rule-matches-nothing",
                    f"TreePathShardingRule: pattern(s) {', '.join(map(repr, unused))} match no leaf "
                    f"(tree paths: {', '.join(map(repr, paths)) or 'none'}); fix the pattern, or pass "
                    "strict=False to allow rules that match nothing",
                )
        return out

    def __repr__(self) -> str:
        body = ", ".join(f"({p.pattern!r}, {s!r})" for p, s in self.rules)
        return f"TreePathShardingRule({body}{', ' if body else ''}strict={self.strict})"


class PolicyShardingRule(ShardingRule):
    """``policy(path, leaf) -> PartitionSpec`` called on every leaf with its '/'-joined tree path."""

    def __init__(self, policy: Callable[[str, Any], Any]):
        if not callable(policy):
            raise TypeError(f"PolicyShardingRule: policy must be callable, got {policy!r}")
        self.policy = policy

    def _call(self, path: str, leaf):
        spec = self.policy(path, leaf)
        if isinstance(spec, (tuple, list)) and not is_spec_leaf(spec):
            spec = P(*spec)
        if not is_spec_leaf(spec):
            raise TypeError(
                f"{self!r} returned {spec!r} for the leaf at tree path {path!r}; a policy must return a "
                "PartitionSpec (or None)"
            )
        return spec

    def specs(self, pytree):
        return named_tree_map(self._call, pytree)

    def __repr__(self) -> str:
        return f"PolicyShardingRule({getattr(self.policy, '__qualname__', self.policy)!r})"
