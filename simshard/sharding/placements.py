"""Mesh-dimension placements (PyTorch DTensor's model): one placement per mesh axis.

A placement list is read left to right: each mesh axis splits the piece its predecessors left
on a device into as many pieces as the axis has coordinates. That is the whole contract of a
``Placement``: ``split`` says how a piece is cut along one mesh axis, ``join`` how the pieces go
back together. Layout, shard / assemble and conversion are derived from those two, so a
user-defined placement (see ``simshard.sharding.ragged``) works everywhere unchanged.

Splits act on 1-D index vectors (the global indices a piece holds along ``dim``); the layout
applies the same cut to data by indexing.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ShardingError
from .mesh import Mesh
from .reduce_ops import REDUCE_OPS, ReduceOp, register_reduce_op


def chunk(a: np.ndarray, k: int) -> list[np.ndarray]:
    """``torch.chunk`` padded to ``k`` pieces: blocks of ceil(n/k); trailing pieces short or empty."""
    c = math.ceil(len(a) / k) if len(a) else 0
    return [a[i * c : (i + 1) * c] for i in range(k)]


class Placement:
    """How one mesh axis treats a tensor. Subclass and implement ``split`` to add a placement.

    A placement that cuts a tensor dimension has a ``dim`` attribute; one whose mesh axis holds
    pending-reduction contributions has a ``reduce_op``. ``cut_dim`` / ``pending_op`` read them.
    """

    def split(self, indices: np.ndarray, num: int) -> list[np.ndarray]:
        """Cut a piece (its 1-D global indices along ``dim``) into ``num`` pieces, one per coordinate."""
        return [indices] * num

    def join(self, pieces: Sequence[np.ndarray], axis: int) -> np.ndarray:
        """Put pieces cut by ``split`` back together along ``axis``.

        The default inverts ``split`` itself: concatenate, then undo the order ``split`` put the
        positions in. Override when a placement has a cheaper or clearer rule.
        """
        sizes = [p.shape[axis] for p in pieces]
        total = sum(sizes)
        where = np.concatenate(self.split(np.arange(total), len(pieces)))
        if sorted(where.tolist()) != list(range(total)):
            raise ShardingError("invalid-placement", f"{self} does not cut a piece into a partition of it")
        return np.take(np.concatenate(pieces, axis=axis), np.argsort(where, kind="stable"), axis=axis)

    def normalized(self, ndim: int) -> "Placement":
        """This placement with a negative ``dim`` made positive for a tensor of rank ``ndim``."""
        dim = cut_dim(self)
        if dim is None or 0 <= dim < ndim:
            return self
        out = copy.copy(self)
        object.__setattr__(out, "dim", normalize_dim(self, dim, ndim))
        return out

    def with_dim(self, dim: int) -> "Placement":  # pragma: no cover - overridden by dim placements
        return self


def cut_dim(p: Placement) -> int | None:
    """The tensor dim a placement cuts, or None (Replicate, Partial)."""
    return getattr(p, "dim", None)


def pending_op(p: Placement) -> str | None:
    """The reduce op of a placement holding pending-reduction contributions, or None."""
    return getattr(p, "reduce_op", None)


def normalize_dim(p: "Placement", dim: int, ndim: int) -> int:
    """``dim`` of a rank-``ndim`` tensor counted from 0 (a negative dim counts from the end);
    a dim outside the tensor is an error naming placement ``p``."""
    d = dim + ndim if dim < 0 else dim
    if not 0 <= d < ndim:
        raise ShardingError("invalid-placement", f"{p} names dim {dim} of a rank-{ndim} tensor", dim=dim)
    return d


@dataclass(frozen=True)
class Replicate(Placement):
    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True)
class Partial(Placement):
    """Every coordinate holds a contribution; the value is their reduction (sum by default).

    ``reduce_op`` names a registered op, or is a user ``ReduceOp``, registered here and then
    named (so placements compare and print by name)."""

    reduce_op: str = "sum"

    def __post_init__(self):
        if isinstance(self.reduce_op, ReduceOp):
            object.__setattr__(self, "reduce_op", register_reduce_op(self.reduce_op).name)
        if self.reduce_op not in REDUCE_OPS:
            raise ShardingError("unknown-reduce-op", f"Partial({self.reduce_op!r}): op must be one of {', '.join(REDUCE_OPS)}")

    def __str__(self) -> str:
        return "P" if self.reduce_op == "sum" else f"P({self.reduce_op})"


@dataclass(frozen=True)
class Shard(Placement):
    """Cut ``dim`` into contiguous blocks of ceil(n/k) (``torch.chunk``)."""

    dim: int = 0

    def split(self, indices, num):
        return chunk(indices, num)

    def join(self, pieces, axis):
        return np.concatenate(pieces, axis=axis)

    def normalized(self, ndim):
        return Shard(normalize_dim(self, self.dim, ndim))

    def with_dim(self, dim):
        return Shard(dim)

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True)
class StridedShard(Placement):
    """DTensor's ``_StridedShard``: cut ``dim`` into ``split_factor`` stripes, cut each stripe
    into one block per coordinate, and give coordinate i block i of every stripe.

    With ``split_factor`` = product of later mesh axes that shard the same dim first, it is how a
    placement list says "this axis is the minor split" (right-to-left order).
    """

    dim: int = 0
    split_factor: int = 1

    def __post_init__(self):
        if self.split_factor < 1:
            raise ShardingError("invalid-placement", f"{self}: split_factor must be >= 1")

    def split(self, indices, num):
        stripes = [chunk(s, num) for s in chunk(indices, self.split_factor)]
        return [np.concatenate([s[i] for s in stripes]) for i in range(num)]

    def normalized(self, ndim):
        return StridedShard(normalize_dim(self, self.dim, ndim), self.split_factor)

    def with_dim(self, dim):
        return StridedShard(dim, self.split_factor)

    def __str__(self) -> str:
        return f"_S({self.dim}, sf={self.split_factor})"


@dataclass(frozen=True)
class DTensorSpec:
    """A mesh plus one placement per mesh axis, e.g. ``DTensorSpec(mesh, [Shard(0), Replicate()])``."""

    mesh: Mesh
    placements: tuple[Placement, ...]

    def __post_init__(self):
        pl = tuple(self.placements)
        if len(pl) != self.mesh.ndim:
            raise ShardingError(
                "placement-count",
                f"{len(pl)} placements for mesh {self.mesh.shape} with {self.mesh.ndim} axes; give one per mesh axis",
            )
        for i, p in enumerate(pl):
            if not isinstance(p, Placement):
                raise ShardingError(
                    "invalid-placement", f"placement {i} ({p!r}) for axis {self.mesh.axis_names[i]!r} is not a Placement",
                    axis=self.mesh.axis_names[i],
                )
        object.__setattr__(self, "placements", pl)

    def normalized(self, ndim: int) -> "DTensorSpec":
        return DTensorSpec(self.mesh, tuple(p.normalized(ndim) for p in self.placements))

    def __str__(self) -> str:
        return f"DTensorSpec(@{self.mesh.name}, [{', '.join(map(str, self.placements))}])"


def _int(digits: str) -> int:
    """A dim or split factor from placement text; more digits than any tensor has is refused."""
    if len(digits.lstrip("-")) > 18:
        raise ShardingError("invalid-placement", f"{digits[:12]}... ({len(digits)} digits) is too large for a dim or split factor")
    return int(digits)


_PLACEMENT_FORMS = [
    (r"(?:Replicate\(\)|R)", lambda m: Replicate()),
    (r"(?:Shard|S)\((-?\d+)\)", lambda m: Shard(_int(m[1]))),
    (r"(?:_StridedShard|StridedShard|_S)\((-?\d+),\s*(?:split_factor|sf)=(\d+)\)", lambda m: StridedShard(_int(m[1]), _int(m[2]))),
    (r"(?:Partial|P)(?:\((?:reduce_op=)?['\"]?(\w+)['\"]?\))?", lambda m: Partial(m[1] or "sum")),
]


def parse_placement(text: str) -> Placement:
    """A placement from DTensor's spelling (``Shard(0)``, ``Replicate()``, ``Partial(max)``,
    ``_StridedShard(0, split_factor=4)``) or the short one simshard prints (``S(0)``, ``R``, ``P``,
    ``_S(0, sf=4)``)."""
    import re

    t = text.strip()
    for pattern, make in _PLACEMENT_FORMS:
        m = re.fullmatch(pattern, t)
        if m:
            return make(m)
    raise ShardingError("invalid-placement", f"cannot read a placement from {text!r}")


def parse_placements(text: str) -> tuple[Placement, ...]:
    """A placement list as DTensor code writes it, ``[Shard(0), Replicate()]`` (brackets or
    parentheses optional), each item read by ``parse_placement``; commas inside an item's own
    parentheses (``_StridedShard(0, split_factor=4)``) do not split."""
    t = text.strip()
    if t[:1] + t[-1:] in ("[]", "()"):
        t = t[1:-1]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(t):
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            raise ShardingError("invalid-placement", f"unbalanced parentheses in {text!r}")
        if ch == "," and depth == 0:
            items.append(t[start:i])
            start = i + 1
    items.append(t[start:])
    if depth != 0:
        raise ShardingError("invalid-placement", f"unbalanced parentheses in {text!r}")
    if not any(item.strip() for item in items):
        raise ShardingError("invalid-placement", f"no placements in {text!r}; give one per mesh axis")
    return tuple(parse_placement(item) for item in items)
