"""Build factor rules one factor at a time, the way Shardy's ``OpShardingRuleBuilder`` does.

Factors are named ``a, b, c, ...`` in the order they are added, so a rule prints like Shardy's
(which names them ``i, j, k, ...``): ``([a, c], [c, b])->([a, b]) {a=8, b=16, c=32} reduction={c}``.

``add(operand_dims, result_dims, size, kind)`` maps one new factor to one dim (or ``None``) of
each operand and result, appended minor-most to that dim's factor list. ``build()`` then, like
Shardy, gives every dim still without a factor its own size-1 factor, and marks ``inexact`` every
factor of a dim whose factor sizes do not multiply to the dim's size (a sliced, padded or
concatenated dim, a conv window): such factors describe the op for propagation only and are never
sharded for execution.
"""

from __future__ import annotations

import math
import string
from typing import Callable, Sequence

from .factors import PASS_THROUGH, FactorRule, RuleError

NAMES = string.ascii_lowercase + string.ascii_uppercase


class RuleBuilder:
    def __init__(self, operand_shapes: Sequence[Sequence[int]], result_shapes: Sequence[Sequence[int]]):
        self.operand_shapes = [tuple(s) for s in operand_shapes]
        self.result_shapes = [tuple(s) for s in result_shapes]
        self.operands: list[list[list[str]]] = [[[] for _ in s] for s in self.operand_shapes]
        self.results: list[list[list[str]]] = [[[] for _ in s] for s in self.result_shapes]
        self.sizes: list[tuple[str, int]] = []
        self.kinds: list[tuple[str, str]] = []
        self.blocked: set[str] = set()
        self.inexact: set[str] = set()

    def _new(self, size: int, kind: str) -> str:
        k = len(self.sizes)
        # a letter each, as Shardy prints them; an op of many tensors (a scan) goes on with f52, f53, ...
        name = NAMES[k] if k < len(NAMES) else f"f{k}"
        self.sizes.append((name, int(size)))
        if kind != PASS_THROUGH:
            self.kinds.append((name, kind))
        return name

    def add(
        self,
        operand_dims: Sequence[int | None],
        result_dims: Sequence[int | None],
        size: int,
        kind: str = PASS_THROUGH,
        *,
        blocked: bool = False,
        inexact: bool = False,
    ) -> str:
        """A new factor in ``operand_dims[t]`` of operand t and ``result_dims[t]`` of result t
        (``None``: not in that tensor). Returns its name."""
        name = self._new(size, kind)
        for tensors, dims in ((self.operands, operand_dims), (self.results, result_dims)):
            if len(dims) != len(tensors):
                raise RuleError(f"factor {name}: {len(dims)} dims given for {len(tensors)} tensors")
            for t, d in enumerate(dims):
                if d is not None:
                    tensors[t][d].append(name)
        if blocked:
            self.blocked.add(name)
        if inexact:
            self.inexact.add(name)
        return name

    def add_all(self, dim: int, size: int, kind: str = PASS_THROUGH) -> str:
        """A factor in dim ``dim`` of every non-scalar tensor (Shardy's pointwise ``addFactor``)."""
        ops = [dim if s else None for s in self.operand_shapes]
        res = [dim if s else None for s in self.result_shapes]
        return self.add(ops, res, size, kind)

    def add_pointwise(self, shape: Sequence[int], kind: Callable[[int], str] = lambda d: PASS_THROUGH) -> "RuleBuilder":
        for d, n in enumerate(shape):
            self.add_all(d, n, kind(d))
        return self

    def build(self, reduce_op: str = "sum") -> FactorRule:
        for tensors in (self.operands, self.results):
            for dims in tensors:
                for fs in dims:
                    if not fs:
                        fs.append(self._new(1, PASS_THROUGH))
        sizes = dict(self.sizes)
        inexact = set(self.inexact)
        for tensors, shapes in ((self.operands, self.operand_shapes), (self.results, self.result_shapes)):
            for dims, shape in zip(tensors, shapes):
                for fs, n in zip(dims, shape):
                    if math.prod(sizes[f] for f in fs) != n:
                        inexact.update(fs)
        return FactorRule(
            factors=tuple(self.sizes),
            operands=tuple(tuple(tuple(fs) for fs in dims) for dims in self.operands),
            results=tuple(tuple(tuple(fs) for fs in dims) for dims in self.results),
            kinds=tuple(self.kinds),
            blocked=frozenset(self.blocked),
            reduce_op=reduce_op,
            inexact=frozenset(inexact),
        )
