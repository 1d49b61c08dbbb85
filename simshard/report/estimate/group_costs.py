"""A collective's costs by position in its group, worked out once per distinct group shape.

A member's cost in a direct collective depends on its position in the group and on what each
position holds (its block and its copy of the instruction), not on which devices the group
names. So the groups of one step that hold the same things position by position (the 128 groups
of 64 devices of a 2-D strategy's all-reduce) share one ``GroupCosts``: each position's result
block, its cost (sent and received bytes and messages), its analytic minimum and its per-peer
rows as positions (named by device only when a record is listed). Costing a step is then a
table lookup per group and an extend per signature, whatever the device count.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Sequence

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
    """Per position of a group: its result block and its record's signature; the positions
    sharing each signature; and what it takes to make a position's per-peer rows when a record is
    listed (``peers``: the kind's cost run again on that position, with rows)."""

    blocks: tuple[Block, ...]
    signatures: tuple[Signature, ...]
    positions: dict  # Signature -> list of positions
    distinct_blocks: frozenset  # the result blocks of its positions, each once
    held: tuple  # each position's (copy, source block)
    cost: Callable  # the kind's (group, members, step, srcs, index, rows) -> member -> Result
    rows: dict = field(default_factory=dict)  # position -> its rows as (position, sent, received), once made

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


def shape_key(ins: Instr) -> tuple:
    """The fields of a member's copy its cost reads (its group aside: the group's devices do not
    change a cost, only its length and each position's copy)."""
    return tuple(_hashable(getattr(ins, f, None)) for f in FIELDS)


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def costs_of(kind: str, positions: Sequence[tuple[Instr, Block]], cost: Callable) -> GroupCosts:
    """The ``GroupCosts`` of a ``kind`` collective whose positions hold ``positions`` (each one's
    copy and source block); ``cost`` is the kind's (group, members, step, srcs, index, rows) ->
    member -> Result, run here on the positions themselves, without per-peer rows: on one position
    of each kind where every position holds the same (``position_kinds``)."""
    g = len(positions)
    order = tuple(range(g))
    step, srcs = _tables(positions)
    kinds = position_kinds(kind, positions) if all(p is positions[0] for p in positions) else None
    if kinds is None:
        kinds = list(order)
    firsts = list(dict.fromkeys(kinds))  # a position of each kind (its number's first)
    results: Mapping = cost(order, firsts, step, srcs, {j: j for j in order}, False)
    of_kind = {}
    for j in firsts:
        out, c = results[j]
        ins, x = positions[j]
        minimum = analytic_min_bytes(ins, j, x.shape, out.shape, out.dtype.itemsize, j)
        of_kind[j] = (out, Signature(c.bytes_sent, c.bytes_received, c.messages_sent, c.messages_received, minimum))
    by_signature: dict[Signature, list[int]] = {}
    for j, k in enumerate(kinds):
        by_signature.setdefault(of_kind[k][1], []).append(j)
    blocks = tuple(of_kind[k][0] for k in kinds)
    return GroupCosts(blocks, tuple(of_kind[k][1] for k in kinds), by_signature, frozenset(blocks), tuple(positions),
                      cost)


def position_kinds(kind: str, positions: Sequence[tuple[Instr, Block]]) -> list[int] | None:
    """Where every position holds the same copy and block, each position's kind as the first
    position of its kind: positions of a kind cost the same (an all-reduce's by their balanced
    chunk's length, a reduce-scatter's and an all-to-all's by their split's, an all-gather's all
    alike). None for a kind not listed."""
    ins, block = positions[0]
    g = len(positions)
    if kind == "all_gather":
        return [0] * g
    if kind == "all_reduce":
        r = math.prod(block.shape) % g  # the first r chunks are one longer
        return [0 if j < r else r for j in range(g)]
    if kind in ("reduce_scatter", "all_to_all"):
        first: dict[int, int] = {}
        return [first.setdefault(n, j) for j, n in enumerate(ins.splits)]
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
