"""References to mesh axes and sub-axes, and the arithmetic that keeps them canonical.

A sub-axis ``"x":(m)k`` views an axis of size ``n`` as the shape ``[m, k, n/(m*k)]`` and takes
the middle dimension: ``m`` is its pre-size (product of the sub-axes major to it), ``k`` its size.
A full axis is the sub-axis ``(1)n``; we keep it as its own spelling so text round-trips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import ShardingError


@dataclass(frozen=True, order=False)
class AxisRef:
    """A full mesh axis (``sub is None``) or the sub-axis ``name:(pre_size)size``."""

    name: str
    sub: tuple[int, int] | None = None

    @staticmethod
    def sub_axis(name: str, pre_size: int, size: int) -> "AxisRef":
        return AxisRef(name, (pre_size, size))

    @property
    def is_full(self) -> bool:
        return self.sub is None

    def pre_size(self) -> int:
        return 1 if self.sub is None else self.sub[0]

    def size(self, axis_size: int) -> int:
        """Size of this (sub-)axis, given the size of its full axis."""
        return axis_size if self.sub is None else self.sub[1]

    def interval(self, axis_size: int) -> tuple[int, int]:
        """The multiplicative span ``[pre, pre*size)`` this ref covers inside its axis."""
        pre = self.pre_size()
        return pre, pre * self.size(axis_size)

    def __str__(self) -> str:
        if self.sub is None:
            return f'"{self.name}"'
        return f'"{self.name}":({self.sub[0]}){self.sub[1]}'

    def short(self) -> str:
        """Unquoted spelling for type strings and tables: ``x`` or ``x:(2)2``."""
        return self.name if self.sub is None else f"{self.name}:({self.sub[0]}){self.sub[1]}"


def canonical_ref(name: str, pre: int, size: int, axis_size: int) -> AxisRef:
    """The canonical spelling of span ``(pre)size`` of an axis: the full axis when it is whole."""
    if pre == 1 and size == axis_size:
        return AxisRef(name)
    return AxisRef(name, (pre, size))


def check_ref(ref: AxisRef, axis_sizes: dict[str, int], where: str, dim: int | None = None) -> None:
    """Raise ShardingError unless ``ref`` names an axis of the mesh with a valid sub-axis span."""
    if ref.name not in axis_sizes:
        known = ", ".join(axis_sizes) or "none"
        raise ShardingError(
            "unknown-axis",
            f'axis "{ref.name}" in {where} does not exist in the mesh (axes: {known})',
            axis=ref.name,
            dim=dim,
        )
    if ref.sub is None:
        return
    n = axis_sizes[ref.name]
    pre, size = ref.sub
    if pre < 1 or size < 2:
        raise ShardingError(
            "invalid-sub-axis",
            f"sub-axis {ref} in {where}: pre-size must be >= 1 and size > 1",
            axis=ref.name,
            dim=dim,
        )
    if n % (pre * size) != 0:
        raise ShardingError(
            "invalid-sub-axis",
            f"sub-axis {ref} in {where}: pre-size*size = {pre * size} does not divide the size "
            f'{n} of axis "{ref.name}"',
            axis=ref.name,
            dim=dim,
        )
    if pre == 1 and size == n:
        raise ShardingError(
            "invalid-sub-axis",
            f'sub-axis {ref} in {where} is the whole axis; write it as "{ref.name}"',
            axis=ref.name,
            dim=dim,
        )


def merge_adjacent(refs: Iterable[AxisRef], axis_sizes: dict[str, int]) -> tuple[AxisRef, ...]:
    """Merge neighbouring sub-axes of one axis that are consecutive (``x:(1)2, x:(2)2 -> x``).

    Shardy requires sub-axes to be as big as possible. A ``Sharding`` refuses a list that breaks
    this (see :func:`mergeable_pair`); code that builds axis lists from pieces (propagation's
    back-projection, the reshard planner) merges them with this first.
    """
    out: list[AxisRef] = []
    for ref in refs:
        if out and out[-1].name == ref.name:
            prev = out[-1]
            n = axis_sizes[ref.name]
            p_lo, p_hi = prev.interval(n)
            r_lo, r_hi = ref.interval(n)
            if p_hi == r_lo:
                out[-1] = canonical_ref(ref.name, p_lo, r_hi // p_lo, n)
                continue
        out.append(ref)
    return tuple(out)


def mergeable_pair(refs: Iterable[AxisRef], axis_sizes: dict[str, int]) -> tuple[AxisRef, AxisRef, AxisRef] | None:
    """The first two neighbouring refs that are consecutive sub-axes of one axis, with the
    (sub-)axis they make together (``x:(1)2, x:(2)4`` -> ``x`` when ``x`` is 8), or None."""
    prev: AxisRef | None = None
    for ref in refs:
        if prev is not None and prev.name == ref.name and prev.sub is not None and ref.sub is not None:
            n = axis_sizes[ref.name]
            p_lo, p_hi = prev.interval(n)
            r_lo, r_hi = ref.interval(n)
            if p_hi == r_lo:
                return prev, ref, canonical_ref(ref.name, p_lo, r_hi // p_lo, n)
        prev = ref
    return None


def check_coexist(a: AxisRef, b: AxisRef, axis_size: int) -> str | None:
    """Why two refs to the same axis cannot both appear in one sharding, or None if they can."""
    a_lo, a_hi = a.interval(axis_size)
    b_lo, b_hi = b.interval(axis_size)
    if max(a_lo, b_lo) < min(a_hi, b_hi):
        return "overlapping-sub-axes"
    # Both must come from one split of the axis: their boundaries form a divisibility chain.
    bounds = sorted({a_lo, a_hi, b_lo, b_hi, axis_size})
    if any(hi % lo for lo, hi in zip(bounds, bounds[1:])):
        return "incompatible-sub-axes"
    return None
