"""Projection of tensor shardings onto the factors of an op's rule, and back (Shardy's
``ShardingProjection``).

Projecting a dimension walks its factors major to minor and hands each factor axes (or
sub-axes) from the dimension's list until the factor is fully sharded:

* an axis bigger than what the factor has left is split with the gcd into sub-axes; this is
  where sub-axes are born (``[{"x"}] : 8`` over factors ``i=2, j=4`` gives ``i: x:(1)2``,
  ``j: x:(2)2`` when ``x=4``);
* the minor-most factor of a dim takes every remaining axis (it may be over-sharded: padding);
* if a non-minor factor still has size left but the next axis is coprime with it, the rest of
  the dim's axes become that factor's *overflow axes* and the later factors of the dim are
  frozen (closed, empty): nothing may be added behind an axis that does not divide.

Projecting back concatenates each dim's factor axes (merging consecutive sub-axes), appends
overflow axes, and stops after a factor that is not fully sharded (anything after it would need
a strided view). Priorities are dropped, as Shardy does; open/closed is kept.

A dim with no factor at all (a ``.`` in our rule specs; Shardy gives such dims a private size-1
factor instead) keeps its dimension sharding untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..sharding.axes import AxisRef
from ..sharding.mesh import Mesh
from ..ops.factors import FactorRule
from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from . import axis_math as am


@dataclass
class FactorSharding:
    """The axes sharding one factor of one tensor."""

    axes: list[AxisRef] = field(default_factory=list)
    closed: bool = False
    minor_most: bool = False
    overflow: list[AxisRef] = field(default_factory=list)


@dataclass
class TensorFactors:
    """One operand or result seen through the rule: factor index -> its sharding."""

    factors: dict[int, FactorSharding]
    replicated: tuple[AxisRef, ...] = ()
    unreduced: tuple[AxisRef, ...] = ()
    source: Sharding | None = None  # the dimension sharding this was projected from

    def expand(self, factor: int, new_axes: Sequence[AxisRef], sizes) -> bool:
        """Replace the factor's axes by ``new_axes`` if the current ones are a strict prefix."""
        fs = self.factors.get(factor)
        if fs is None or not am.is_strict_prefix(fs.axes, new_axes, sizes):
            return False
        fs.axes = list(new_axes)
        return True

    def copy(self) -> "TensorFactors":
        factors = {
            i: FactorSharding(list(fs.axes), fs.closed, fs.minor_most, list(fs.overflow)) for i, fs in self.factors.items()
        }
        return TensorFactors(factors, self.replicated, self.unreduced, self.source)

    def sharding_size(self, sizes) -> int:
        return math.prod(am.total_size(fs.axes + fs.overflow, sizes) for fs in self.factors.values())


def factor_index(rule: FactorRule) -> dict[str, int]:
    return {name: i for i, (name, _) in enumerate(rule.factors)}


def tensor_mappings(rule: FactorRule) -> list[tuple[tuple[int, ...], ...]]:
    """Per tensor (operands then results), per dim, the factor indices major to minor."""
    index = factor_index(rule)
    return [tuple(tuple(index[f] for f in dim) for dim in dims) for dims in rule.tensors]


def project_tensor(
    sharding: Sharding | None,
    mapping: Sequence[Sequence[int]],
    factor_sizes: Sequence[int],
    sizes: Mapping[str, int],
    closed_if_missing: bool = False,
) -> TensorFactors:
    factors: dict[int, FactorSharding] = {}
    for d, dim_factors in enumerate(mapping):
        axes = list(sharding.dims[d].axes) if sharding is not None else []
        closed = (not sharding.dims[d].is_open) if sharding is not None else closed_if_missing
        # The axis being consumed: (name, pre, size) so that it can be split further.
        queue = [(a.name, a.pre_size(), am.size(a, sizes)) for a in axes]
        pos = 0
        overflowed = False
        for k, f in enumerate(dim_factors):
            fs = factors.setdefault(f, FactorSharding())
            fs.minor_most = k == len(dim_factors) - 1
            if overflowed:
                fs.closed = True
                break
            fs.closed = closed
            if fs.minor_most:
                for name, pre, n in queue[pos:]:
                    am.add_or_merge(fs.axes, am.make(name, pre, n, sizes), sizes)
                pos = len(queue)
                break
            remaining = factor_sizes[f]
            while pos < len(queue):
                name, pre, n = queue[pos]
                g = math.gcd(remaining, n)
                if n != 1 and g == 1:
                    break
                if n > g:  # split: take the major part of size g
                    fs.axes.append(am.make(name, pre, g, sizes))
                    queue[pos] = (name, pre * g, n // g)
                    remaining //= g
                else:
                    fs.axes.append(am.make(name, pre, n, sizes))
                    remaining //= n
                    pos += 1
            if remaining > 1 and pos < len(queue):
                overflowed = True
                for name, pre, n in queue[pos:]:
                    am.add_or_merge(fs.overflow, am.make(name, pre, n, sizes), sizes)
                pos = len(queue)
    return TensorFactors(
        factors,
        tuple(sharding.replicated) if sharding is not None else (),
        tuple(sharding.unreduced) if sharding is not None else (),
        sharding,
    )


def unproject_tensor(
    tf: TensorFactors,
    mapping: Sequence[Sequence[int]],
    factor_sizes: Sequence[int],
    mesh: Mesh,
) -> Sharding:
    """The dimension sharding the factor shardings of one tensor stand for."""
    sizes = mesh.shape
    dims = []
    for d, dim_factors in enumerate(mapping):
        if not dim_factors:
            src = tf.source
            dims.append(DimSharding(src.dims[d].axes, src.dims[d].is_open) if src is not None else DimSharding((), True))
            continue
        closed = False
        axes: list[AxisRef] = []
        for f in dim_factors:
            fs = tf.factors[f]
            closed |= fs.closed
            sharded = 1
            for i, a in enumerate(fs.axes):
                sharded *= am.size(a, sizes)
                am.add_or_merge(axes, a, sizes) if i == 0 else axes.append(a)
            if fs.overflow:
                for i, a in enumerate(fs.overflow):
                    am.add_or_merge(axes, a, sizes) if i == 0 else axes.append(a)
                break
            if sharded < factor_sizes[f]:
                break
        dims.append(DimSharding(tuple(axes), not closed))
    reduce_op = tf.source.reduce_op if tf.source is not None else "sum"
    return Sharding(mesh, tuple(dims), tf.replicated, tf.unreduced, reduce_op)


@dataclass
class Projection:
    """All operands and results of one op, projected onto the op's factors."""

    operands: list[TensorFactors]
    results: list[TensorFactors]

    @property
    def tensors(self) -> list[TensorFactors]:
        return self.operands + self.results

    def copy(self) -> "Projection":
        """A copy whose factor axis lists can change independently (shardings are immutable and shared)."""
        return Projection([t.copy() for t in self.operands], [t.copy() for t in self.results])

    @staticmethod
    def build(
        operand_shardings: Sequence[Sharding | None],
        result_shardings: Sequence[Sharding | None],
        rule: FactorRule,
        sizes: Mapping[str, int],
        closed_if_missing: bool = False,
    ) -> "Projection":
        mappings = tensor_mappings(rule)
        fsizes = [n for _, n in rule.factors]
        n_ops = len(rule.operands)
        ops = [project_tensor(s, m, fsizes, sizes, closed_if_missing) for s, m in zip(operand_shardings, mappings[:n_ops])]
        res = [project_tensor(s, m, fsizes, sizes, closed_if_missing) for s, m in zip(result_shardings, mappings[n_ops:])]
        return Projection(ops, res)

    def to_shardings(self, rule: FactorRule, mesh: Mesh) -> list[Sharding]:
        """Every tensor projected back, operands then results."""
        mappings = tensor_mappings(rule)
        fsizes = [n for _, n in rule.factors]
        return [unproject_tensor(t, m, fsizes, mesh) for t, m in zip(self.tensors, mappings)]

    def common_prefix_axes(self, n_factors: int, sizes) -> list[list[AxisRef]]:
        """Per factor, the greatest common prefix of its axes over all tensors that have it."""
        out: list[list[AxisRef] | None] = [None] * n_factors
        for t in self.tensors:
            for f, fs in t.factors.items():
                out[f] = list(fs.axes) if out[f] is None else am.common_prefix_list(out[f], fs.axes, sizes)
        return [o or [] for o in out]
