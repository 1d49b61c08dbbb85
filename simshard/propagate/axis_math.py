"""Arithmetic on axis references that propagation needs (Shardy's ``AxisRefAttr`` helpers).

A reference covers the multiplicative span ``[pre, pre*size)`` of its axis (a full axis of size
``n`` is ``[1, n)``). Everything here is a function of that span and the mesh's axis sizes:
containment, prefix, overlap, whether two refs can come from one split of an axis, the largest
prefix that avoids another ref, the greatest common prefix, and merging of consecutive sub-axes.
Results are always canonical: a span that covers the whole axis is the full axis.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Iterable, Mapping, Sequence

from ..sharding.axes import AxisRef, canonical_ref

Sizes = Mapping[str, int]
Axes = tuple[AxisRef, ...]


def span(a: AxisRef, sizes: Sizes) -> tuple[int, int]:
    return a.interval(sizes[a.name])


def size(a: AxisRef, sizes: Sizes) -> int:
    return a.size(sizes[a.name])


def total_size(axes: Iterable[AxisRef], sizes: Sizes) -> int:
    return math.prod(size(a, sizes) for a in axes)


def make(name: str, pre: int, k: int, sizes: Sizes) -> AxisRef:
    return canonical_ref(name, pre, k, sizes[name])


def contains(a: AxisRef, b: AxisRef, sizes: Sizes) -> bool:
    """``a`` covers all of ``b``."""
    if a.name != b.name:
        return False
    (alo, ahi), (blo, bhi) = span(a, sizes), span(b, sizes)
    return alo <= blo and ahi >= bhi


def prefix_of(a: AxisRef, b: AxisRef, sizes: Sizes) -> bool:
    """``a`` is a (not necessarily strict) prefix of ``b``: ``x:(1)2`` of ``x:(1)4`` or of ``x``."""
    return contains(b, a, sizes) and span(a, sizes)[0] == span(b, sizes)[0]


def overlaps(a: AxisRef, b: AxisRef, sizes: Sizes) -> bool:
    """Whether ``a`` and ``b`` share part of one axis. A size-1 axis spans nothing, yet it is one
    axis: two uses of it overlap (a sharding may name it once)."""
    if a.name != b.name:
        return False
    if sizes[a.name] == 1:
        return True
    (alo, ahi), (blo, bhi) = span(a, sizes), span(b, sizes)
    return alo < bhi and blo < ahi


def can_coexist(a: AxisRef, b: AxisRef, sizes: Sizes) -> bool:
    """Whether both refs can come from one split of their axis (always true for distinct axes)."""
    if a.name != b.name or a.sub is None or b.sub is None:
        return True
    (alo, ahi), (blo, bhi) = span(a, sizes), span(b, sizes)
    min_pre, max_pre = sorted((alo, blo))
    min_next, max_next = sorted((ahi, bhi))
    if min_next > max_pre:
        return min_next % max_pre == 0 and max_pre % min_pre == 0 and max_next % min_next == 0
    return max_pre % min_next == 0


def prefix_without_overlap(a: AxisRef, b: AxisRef, sizes: Sizes) -> AxisRef | None:
    """The largest prefix of ``a`` not overlapping ``b``; None if there is none."""
    if not can_coexist(a, b, sizes):
        return None
    if not overlaps(a, b, sizes):
        return a
    alo, blo = span(a, sizes)[0], span(b, sizes)[0]
    if alo >= blo:
        return None
    return make(a.name, alo, blo // alo, sizes)


def prefix_without_overlap_all(a: AxisRef, others: Iterable[AxisRef], sizes: Sizes) -> AxisRef | None:
    result: AxisRef | None = a
    for b in others:
        result = prefix_without_overlap(result, b, sizes)
        if result is None:
            return None
    return result


def common_prefix(a: AxisRef, b: AxisRef, sizes: Sizes) -> AxisRef | None:
    """The greatest common prefix of two refs (``x:(1)2`` and ``x`` give ``x:(1)2``), or None."""
    if not can_coexist(a, b, sizes):
        return None
    if prefix_of(a, b, sizes):
        return a
    if prefix_of(b, a, sizes):
        return b
    return None


def common_prefix_list(first: Sequence[AxisRef], second: Sequence[AxisRef], sizes: Sizes) -> list[AxisRef]:
    out: list[AxisRef] = []
    for a, b in zip(first, second):
        if a == b:
            out.append(a)
            continue
        p = common_prefix(a, b, sizes)
        if p is not None:
            out.append(p)
        break
    return out


def can_merge(a: AxisRef, b: AxisRef, sizes: Sizes) -> bool:
    """``b`` directly follows ``a`` inside the same axis (``x:(1)2`` then ``x:(2)2``)."""
    return a.name == b.name and a.sub is not None and b.sub is not None and span(a, sizes)[1] == span(b, sizes)[0]


def merge(a: AxisRef, b: AxisRef, sizes: Sizes) -> AxisRef:
    lo, hi = span(a, sizes)[0], span(b, sizes)[1]
    return make(a.name, lo, hi // lo, sizes)


def add_or_merge(axes: list[AxisRef], a: AxisRef, sizes: Sizes) -> None:
    """Append ``a``, merging it into the last axis when they are consecutive sub-axes."""
    if axes and can_merge(axes[-1], a, sizes):
        axes[-1] = merge(axes[-1], a, sizes)
    else:
        axes.append(a)


class Prefix(Enum):
    EQUAL = "equal"
    STRICT = "strict"
    NOT = "not"


def list_prefix(first: Sequence[AxisRef], second: Sequence[AxisRef], sizes: Sizes) -> Prefix:
    """Whether ``first`` is a prefix of ``second``; the last axis of ``first`` may be a sub-axis
    prefix of the corresponding axis of ``second`` (``[x:(1)2]`` is a strict prefix of ``[x]``)."""
    if not first and not second:
        return Prefix.EQUAL
    if not first:
        return Prefix.STRICT
    if len(first) > len(second):
        return Prefix.NOT
    n = len(first)
    if any(first[i] != second[i] for i in range(n - 1)):
        return Prefix.NOT
    if len(first) == len(second) and first[-1] == second[-1]:
        return Prefix.EQUAL
    if prefix_of(first[-1], second[n - 1], sizes):
        return Prefix.STRICT
    return Prefix.NOT


def is_strict_prefix(first: Sequence[AxisRef], second: Sequence[AxisRef], sizes: Sizes) -> bool:
    return list_prefix(first, second, sizes) is Prefix.STRICT
