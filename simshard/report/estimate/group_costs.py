"""A collective's costs by position in its group, worked out once per distinct group shape.

A member's cost in a direct collective depends on its position in the group and on what each
position holds (its block and its copy of the instruction), not on which devices the group
names. So the groups of one step that hold the same things position by position (the 128 groups
of 64 devices of a 2-D strategy's all-reduce) share one ``GroupCosts``: each position's kind,
and per kind its result block and its signature (sent and received bytes and messages, the
analytic minimum); per-peer rows by position, named by device only when a record is listed.
Where every position holds the same, positions of a kind are costed once (``position_kinds``),
so a group of 8,192 costs as few kinds as a group of 8; ``group_axis`` reads a step's members'
figures from these with numpy, whatever the number of groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from ...spmd import Instr
from ..collective_cost import PEER_ROWS, Cost, analytic_min_bytes
from .blocks import Block

FIELDS = ("axis", "splits", "split_axis", "concat_axis", "shape", "dtype")  # what a member's cost reads of its copy


class Signature(NamedTuple):
    """What one member's record says beyond its device and group: members with equal signatures
    share a class record."""

    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    min_bytes: int


@dataclass(frozen=True, eq=False)
class GroupCosts:
    """Per position of a group, its kind (``kinds``: an index of ``results``; positions of a kind
    cost the same, ``position_kinds``) and per kind its result block and its record's signature;
    and what it takes to make a position's per-peer rows when a record is listed (``peers``: the
    kind's cost run again on that position, with rows)."""

    kinds: np.ndarray  # [positions] -> index into ``results``
    results: tuple[tuple[Block, Signature], ...]  # each kind's result block and signature
    held: tuple  # each position's (copy, source block)
    cost: Callable  # the kind's (group, members, step, srcs, index, rows) -> member -> Result
    rows: dict = field(default_factory=dict)  # position -> its rows as (position, sent, received), once made

    def uniform(self, what: int) -> bool:
        """Whether every position gets one result block (``what`` 0) or signature (1)."""
        return len({r[what] for r in self.results}) == 1

    @property
    def has_rows(self) -> bool:
        """Whether members get per-peer rows (none in a group over ``PEER_ROWS``)."""
        return len(self.held) <= PEER_ROWS

    def peers(self, group: Sequence[int], position: int) -> tuple[tuple[int, int, int], ...]:
        """A member's per-peer rows with its group's devices named, sorted by device."""
        mine = self.rows.get(position)
        if mine is None:
            order = tuple(range(len(self.held)))
            step, srcs = _tables(self.held)
            mine = self.rows[position] = self.cost(order, [position], step, srcs, {j: j for j in order})[position][1].peers
        return tuple(sorted((group[p], s, r) for p, s, r in mine))


def _tables(held: Sequence[tuple[Instr, Block]]) -> tuple[dict, dict]:
    """Each position's copy and source block, keyed by position (what the kinds' costs read)."""
    return {j: ins for j, (ins, _) in enumerate(held)}, {j: block for j, (_, block) in enumerate(held)}


class _Every:
    """A table of positions that all hold ``value`` (read without making one entry per position)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __getitem__(self, position: int):
        return self.value


class _Itself:
    """A position's index in its group of positions: itself."""

    def __getitem__(self, position: int) -> int:
        return position


def shape_key(ins: Instr) -> tuple:
    """The fields of a member's copy its cost reads (its group aside: the group's devices do not
    change a cost, only its length and each position's copy)."""
    return tuple(_hashable(getattr(ins, f, None)) for f in FIELDS)


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def costs_of(kind: str, positions: Sequence[tuple[Instr, Block]], cost: Callable, uniform: bool = False) -> GroupCosts:
    """The ``GroupCosts`` of a ``kind`` collective whose positions hold ``positions`` (each one's
    copy and source block; ``uniform``: all hold the first's); ``cost`` is the kind's (group,
    members, step, srcs, index, rows) -> member -> Result, run here on the positions themselves,
    without per-peer rows: on one position of each kind where every position holds the same
    (``position_kinds``), else on each."""
    g = len(positions)
    kinds = position_kinds(kind, positions[0], g) if uniform else None
    if kinds is None:
        kinds, uniform = np.arange(g, dtype=np.int64), False
    firsts = np.unique(kinds)  # each kind by its first position, ascending: in order of appearance
    if uniform:
        step, srcs = _Every(positions[0][0]), _Every(positions[0][1])
    else:
        step, srcs = _tables(positions)
    results: Mapping = cost(range(g), firsts.tolist(), step, srcs, _Itself(), False)
    of_kind = []
    for j in firsts.tolist():
        out, c = results[j]
        ins, x = positions[j]
        minimum = analytic_min_bytes(ins, j, x.shape, out.shape, out.dtype.itemsize, j)
        of_kind.append((out, Signature(c.bytes_sent, c.bytes_received, c.messages_sent, c.messages_received, minimum)))
    return GroupCosts(np.searchsorted(firsts, kinds), tuple(of_kind), tuple(positions), cost)


def position_kinds(kind: str, held: tuple[Instr, Block], g: int) -> np.ndarray | None:
    """Where all ``g`` positions of a group hold ``held`` (one copy and block), each position's
    kind as the first position of its kind: positions of a kind cost the same (an all-reduce's
    by their balanced chunk's length, a reduce-scatter's and an all-to-all's by their split's, an
    all-gather's all alike). None for a kind not listed."""
    ins, block = held
    if kind == "all_gather":
        return np.zeros(g, dtype=np.int64)
    if kind == "all_reduce":
        r = math.prod(block.shape) % g  # the first r chunks are one longer
        return np.where(np.arange(g) < r, 0, r)
    if kind in ("reduce_scatter", "all_to_all"):
        _, first, inverse = np.unique(np.asarray(ins.splits, dtype=np.int64), return_index=True, return_inverse=True)
        return first[inverse.reshape(-1)]
    return None


class PeerRows:
    """A class record's ``peers``: each member's rows from its group's costs (by position)."""

    __slots__ = ("costs",)

    def __init__(self, costs: Mapping[tuple, GroupCosts]):
        self.costs = costs  # group -> its GroupCosts

    def __call__(self, device: int, group: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        costs = self.costs[group]
        if not costs.has_rows:  # a group over PEER_ROWS members: no rows, no search for the member
            return ()
        return costs.peers(group, group.index(device))


__all__ = ["Cost", "GroupCosts", "PeerRows", "Signature", "costs_of", "shape_key"]
