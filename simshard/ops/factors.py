"""Factor sharding rules (Shardy's ``OpShardingRule``): an op as an einsum over named factors.

Each operand and result dimension maps to an ordered list of factors (major to minor); a factor
shared by several tensors must be sharded the same way in all of them for the op to run locally.
Factor kinds say what happens when a factor is sharded:

* pass-through (default): nothing; every device computes its block.
* reduction: only in operands (contracting / reduced dims); devices compute partial results that
  combine with the rule's ``reduce_op`` (all-reduce, reduce-scatter, or kept pending).
* need_replication: must be whole when the op runs (sort dim, concat dim, ...).
* permutation: sharded execution needs data from neighbours (slice, pad, conv windows).

``blocked`` factors are never used to carry a sharding from one tensor to another.

    ([i,k],[k,j])->([i,j]) {i=8,j=16,k=32} reduction={k}
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

PASS_THROUGH = "pass_through"
REDUCTION = "reduction"
NEED_REPLICATION = "need_replication"
PERMUTATION = "permutation"
KINDS = (PASS_THROUGH, REDUCTION, NEED_REPLICATION, PERMUTATION)

Dims = tuple[tuple[str, ...], ...]  # per dimension, its factors major to minor


class RuleError(ValueError):
    """A factor rule that does not fit the shapes of the op it describes."""


@dataclass(frozen=True)
class FactorRule:
    """Factors with sizes, the factors of each operand / result dim, and each factor's kind."""

    factors: tuple[tuple[str, int], ...]
    operands: tuple[Dims, ...]
    results: tuple[Dims, ...]
    kinds: tuple[tuple[str, str], ...] = ()  # factor -> kind, pass-through when absent
    blocked: frozenset[str] = frozenset()
    reduce_op: str = "sum"
    # Conv windows: the factors of a dim may multiply to more than the dim (overlapping windows).
    inexact: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.factors)

    def kind(self, factor: str) -> str:
        return dict(self.kinds).get(factor, PASS_THROUGH)

    def of_kind(self, kind: str) -> tuple[str, ...]:
        return tuple(f for f, _ in self.factors if self.kind(f) == kind)

    @property
    def tensors(self) -> tuple[Dims, ...]:
        """Operands then results: the index Shardy calls the tensor index."""
        return self.operands + self.results

    def check(self, operand_shapes: Sequence[Sequence[int]], result_shapes: Sequence[Sequence[int]]) -> None:
        """Raise RuleError unless every dim's factors multiply to that dim's size."""
        sizes = self.sizes
        if len(operand_shapes) != len(self.operands) or len(result_shapes) != len(self.results):
            raise RuleError(
                f"rule {self} has {len(self.operands)} operands / {len(self.results)} results, "
                f"op has {len(operand_shapes)} / {len(result_shapes)}"
            )
        for what, dims_list, shapes in (("operand", self.operands, operand_shapes), ("result", self.results, result_shapes)):
            for t, (dims, shape) in enumerate(zip(dims_list, shapes)):
                if len(dims) != len(shape):
                    raise RuleError(f"rule {self}: {what} {t} has rank {len(shape)} but {len(dims)} factor dims")
                for d, (fs, n) in enumerate(zip(dims, shape)):
                    unknown = [f for f in fs if f not in sizes]
                    if unknown:
                        raise RuleError(f"rule {self}: factor {unknown[0]} has no size")
                    prod = math.prod(sizes[f] for f in fs)
                    if prod != n and not (set(fs) & self.inexact):
                        raise RuleError(
                            f"rule {self}: {what} {t} dim {d} has size {n} but its factors {list(fs)} multiply to {prod}"
                        )
        for f, k in self.kinds:
            if k not in KINDS:
                raise RuleError(f"rule {self}: factor {f} has unknown kind {k!r}")
            if k == REDUCTION and any(f in fs for dims in self.results for fs in dims):
                raise RuleError(f"rule {self}: reduction factor {f} appears in a result")

    def __str__(self) -> str:
        def tensor(dims: Dims) -> str:
            return "[" + ", ".join("".join(fs) if len(fs) <= 1 else "(" + "".join(fs) + ")" for fs in dims) + "]"

        text = f"({', '.join(map(tensor, self.operands))})->({', '.join(map(tensor, self.results))})"
        text += " {" + ", ".join(f"{f}={n}" for f, n in self.factors) + "}"
        for kind in (REDUCTION, NEED_REPLICATION, PERMUTATION):
            fs = self.of_kind(kind)
            if fs:
                text += f" {kind}={{{', '.join(fs)}}}"
        if self.blocked:
            text += f" blocked={{{', '.join(sorted(self.blocked))}}}"
        if self.of_kind(REDUCTION) and self.reduce_op != "sum":
            text += f" reduce={self.reduce_op}"
        return text


_TOKEN = re.compile(r"\(([a-zA-Z]*)\)|([a-zA-Z])|(\.)")


def _parse_tensor(spec: str) -> Dims:
    """``"i(jk)."`` -> ((i,), (j, k), ()): a letter per dim, parentheses for a compound dim, ``.``
    for a dim with no factor."""
    dims: list[tuple[str, ...]] = []
    pos = 0
    spec = spec.replace(" ", "")
    while pos < len(spec):
        m = _TOKEN.match(spec, pos)
        if not m:
            raise RuleError(f"bad factor spec {spec!r} at {pos}")
        dims.append(tuple(m[1]) if m[1] is not None else (m[2],) if m[2] else ())
        pos = m.end()
    return tuple(dims)


def factor_rule(
    spec: str,
    operand_shapes: Sequence[Sequence[int]],
    result_shapes: Sequence[Sequence[int]],
    *,
    sizes: Mapping[str, int] | None = None,
    reduction: str = "",
    need_replication: str = "",
    permutation: str = "",
    blocked: str = "",
    reduce_op: str = "sum",
    inexact: str = "",
) -> FactorRule:
    """Build a rule from an einsum-like spec, e.g. ``factor_rule("ik,kj->ij", [a, b], [c],
    reduction="k")``. Sizes of single-factor dims are read off the shapes; compound dims
    (``(ij)``) need all but one of their factor sizes in ``sizes``."""
    lhs, _, rhs = spec.partition("->")
    operands = tuple(_parse_tensor(t) for t in lhs.split(",")) if lhs.strip() or operand_shapes else ()
    if len(operands) == 1 and operands[0] == () and not operand_shapes:
        operands = ()
    results = tuple(_parse_tensor(t) for t in rhs.split(","))
    known: dict[str, int] = dict(sizes or {})
    order: list[str] = []
    for dims, shapes in ((operands, operand_shapes), (results, result_shapes)):
        for t_dims, shape in zip(dims, shapes):
            for fs in t_dims:
                order += [f for f in fs if f not in order]
    # Resolve sizes: single-factor dims directly, then compound dims with one unknown factor.
    for _ in range(3):
        for dims, shapes in ((operands, operand_shapes), (results, result_shapes)):
            for t_dims, shape in zip(dims, shapes):
                for fs, n in zip(t_dims, shape):
                    missing = [f for f in fs if f not in known]
                    if len(missing) == 1:
                        rest = math.prod(known[f] for f in fs if f in known)
                        known[missing[0]] = n // rest if rest else 0
    return FactorRule(
        factors=tuple((f, known.get(f, 0)) for f in sorted(order)),
        operands=operands,
        results=results,
        kinds=tuple(
            (f, kind)
            for kind, fs in ((REDUCTION, reduction), (NEED_REPLICATION, need_replication), (PERMUTATION, permutation))
            for f in fs
        ),
        blocked=frozenset(blocked),
        reduce_op=reduce_op,
        inexact=frozenset(inexact),
    )
