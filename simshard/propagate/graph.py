"""What propagation sees of a program: values with shapes, ops with factor rules, returned values.

Keeping this separate from ``Program`` lets the algorithm run on hand-written rules in tests and
keeps the op-specific knowledge (which ops count as elementwise, pass-through, broadcast, ...)
in one place (:func:`classify`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

from ..ops.factors import FactorRule
from ..sharding.dims import Sharding
from .direction import Direction

# Op categories for the op-priority schedule.
ELEMENTWISE = "elementwise"  # pass-through op, and elementwise for aggressive propagation
PASS_THROUGH = "pass_through"  # reshape, transpose: propagate first, like elementwise ops
FORWARD_ONLY = "forward_only"  # dynamic_slice / dynamic_update_slice: first stages forward only
BROADCAST = "broadcast"  # broadcast_in_dim: backward only until the last stage
OTHER = "other"

_IDENTITY_LIKE = {"sharding_constraint", "propagation_barrier", "reshard", "stop_gradient"}
_PASS_THROUGH_OPS = {"reshape", "transpose"}
_FORWARD_ONLY_OPS = {"dynamic_slice", "dynamic_update_slice"}
_BROADCAST_OPS = {"broadcast_in_dim"}

# Ops that propagation does not look through (Shardy registers no rule for them): a reshard is
# where the user asked for a change of sharding, so nothing flows across it.
OPAQUE_OPS = {"reshard"}


def classify(op: str) -> str:
    """The op-priority category of a registry op, by name and by the kind of its rule."""
    if op in _IDENTITY_LIKE:
        return ELEMENTWISE
    if op in _PASS_THROUGH_OPS:
        return PASS_THROUGH
    if op in _FORWARD_ONLY_OPS:
        return FORWARD_ONLY
    if op in _BROADCAST_OPS:
        return BROADCAST
    from ..ops import OPS
    from ..ops.elementwise import elementwise_rule

    opdef = OPS.get(op)
    if opdef is not None and opdef.rule is elementwise_rule:
        return ELEMENTWISE
    return OTHER


@dataclass(frozen=True)
class ResultRef:
    """The i-th function result (its sharding is separate from the returned value's)."""

    index: int

    def __repr__(self) -> str:
        return f"result{self.index}"


@dataclass(frozen=True, eq=False)
class Node:
    """One op: operands (None for a literal) and results as value keys, and its factor rule
    (None: opaque to propagation)."""

    index: int
    op: str
    operands: tuple[Hashable | None, ...]
    results: tuple[Hashable, ...]
    rule: FactorRule | None
    category: str = OTHER
    barrier: Direction | None = None  # a propagation barrier's fixed direction
    params: Mapping[str, Any] = field(default_factory=dict)
    alternatives: tuple[FactorRule, ...] = ()  # further rules of the op (``ss.register_rule``)

    @property
    def elementwise(self) -> bool:
        return self.category == ELEMENTWISE


@dataclass
class Graph:
    shapes: dict[Hashable, tuple[int, ...]]
    nodes: list[Node]
    outputs: list[Hashable]

    def __post_init__(self):
        self.producer: dict[Hashable, int] = {}
        self.uses: dict[Hashable, list[int]] = {k: [] for k in self.shapes}
        for n in self.nodes:
            for r in n.results:
                self.producer[r] = n.index
            for o in n.operands:
                if o is not None:
                    self.uses.setdefault(o, []).append(n.index)
        self.n_uses = {k: len(u) for k, u in self.uses.items()}
        for o in self.outputs:
            self.n_uses[o] = self.n_uses.get(o, 0) + 1

    def has_multiple_uses(self, key) -> bool:
        return self.n_uses.get(key, 0) > 1

    def is_scalar(self, key) -> bool:
        return key is None or len(self.shapes[key]) == 0


@dataclass
class State:
    """The current sharding of every value (None: none yet) and of every function result."""

    shardings: dict[Hashable, Sharding | None]
    results: list[Sharding | None]

    def get(self, key) -> Sharding | None:
        if isinstance(key, ResultRef):
            return self.results[key.index]
        return self.shardings.get(key)

    def set(self, key, sharding: Sharding | None) -> None:
        if isinstance(key, ResultRef):
            self.results[key.index] = sharding
        else:
            self.shardings[key] = sharding

    def keys(self) -> list:
        return list(self.shardings) + [ResultRef(i) for i in range(len(self.results))]


def identity_rule(shape: Sequence[int], n_operands: int = 1) -> FactorRule:
    """One factor per dim shared by ``n_operands`` operands and one result."""
    names = tuple(f"d{i}" for i in range(len(shape)))
    dims = tuple((n,) for n in names)
    return FactorRule(tuple(zip(names, (int(s) for s in shape))), (dims,) * n_operands, (dims,))
