"""Collectives on blocks: each member's result block and the records of what it sent and received.

A class's members resolve the step's ``Varying`` fields (their groups) to one copy per distinct
row of codes; members are then gathered by their group's value, and each group's costs looked up
by what its positions hold (``group_costs``: groups holding the same share one table, worked out
once from the direct algorithms' messages, ``report/collective_cost``, so a record equals an
executed run's). Members with equal figures share one ``ClassRecord``, their per-peer rows made
only when listed; a class splits where its members receive different blocks. A permute is
``permute``'s.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from ...spmd import Instr, participants
from ..collective_cost import AllToAllGroup, all_gather_cost, all_reduce_cost, all_to_all_cost, reduce_scatter_cost
from ..comm import CommRecord
from ..records import ClassRecord
from .blocks import Block
from .group_costs import GroupCosts, PeerRows, Signature, costs_of, shape_key
from .local import copies
from .memo import Memo
from .permute import Result, run_permute
from .state import Classes, Devices, Lists, regroup


def run_collective(devices: Devices, classes: Classes, here: Mapping[int, Instr], lists: Lists, memo: Memo) -> None:
    """One collective SPMD step over every class: results written, class records appended to
    ``memo.records``."""
    kind = next(iter(here.values())).kind
    if kind == "collective_permute":
        run_permute(devices, classes, here, lists, memo)
        return
    shares = []  # (copy, members, source block, class number): each within one class
    for k, c in enumerate(classes):  # a class runs one instruction on one state: its source block is read once
        ins = here[c[0]]
        block = devices[c[0]].state.read(ins.src, ins, c[0])
        shares.extend((copy, members, block, k) for copy, members in copies(ins, c, memo))
    by_group: dict[tuple, list] = {}
    for share in shares:
        by_group.setdefault(participants(share[0]), []).append(share)
    held = _Held(shares)
    tables = {group: held.costs(kind, group, parts, memo) for group, parts in by_group.items()}
    position = devices[classes[0][0]].state.position
    _write_results(devices, classes, lists, shares, tables)
    _class_records(memo, kind, shares[0][0], position, tables)


class _Held:
    """What each member of a step holds (its copy's cost fields and its source block) as a small
    number, so a group's positions are told apart by a tuple of ints: looked up once per
    distinct pattern in the step, and by value (``Memo.group_costs``) across steps."""

    def __init__(self, shares: list):
        numbers: dict[tuple, int] = {}
        self.values: list[tuple] = []
        self.numbers: list[int] = []  # each share's number, in ``shares``' order
        for copy, _, block, _ in shares:
            value = (shape_key(copy), block)
            k = numbers.get(value)
            if k is None:
                k = numbers[value] = len(self.values)
                self.values.append(value)
            self.numbers.append(k)
        self.shares = shares
        self.share_number = {id(share): k for share, k in zip(shares, self.numbers)}
        self.copies = {k: (copy, block) for (copy, members, block, _), k in zip(shares, self.numbers) if members}
        self.member_numbers: dict[int, int] | None = None  # member -> number, made when a group mixes copies
        self.patterns: dict[tuple, GroupCosts] = {}

    def of(self, member: int) -> int:
        """The number of what ``member`` holds (the per-member map made on first use: most
        groups run one copy on one block, told by their share alone)."""
        if self.member_numbers is None:
            self.member_numbers = {}
            for (_, members, _, _), k in zip(self.shares, self.numbers):
                self.member_numbers.update(dict.fromkeys(members, k))
        return self.member_numbers[member]

    def costs(self, kind: str, group: tuple, parts: list, memo: Memo) -> GroupCosts:
        """The costs of one group's positions (``group_costs``): groups that hold the same share
        one table."""
        if len(parts) == 1 and len(parts[0][1]) == len(group):  # the usual case: one copy and block throughout
            pattern = (len(group), self.share_number[id(parts[0])])
        else:
            pattern = (0, tuple(map(self.of, group)))
        hit = self.patterns.get(pattern)
        if hit is None:
            numbers = (pattern[1],) * pattern[0] if pattern[0] else pattern[1]
            key = (kind, tuple(self.values[k] for k in dict.fromkeys(numbers)), _positions(numbers))
            hit = memo.group_costs.get(key)
            if hit is None:
                hit = memo.group_costs[key] = costs_of(kind, [self.copies[k] for k in numbers], COSTS[kind])
            self.patterns[pattern] = hit
        return hit


def _positions(numbers: tuple) -> tuple:
    """Which distinct value each position holds (by first appearance): with the distinct values,
    what identifies a group's contents."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(k, len(first)) for k in numbers)


def _write_results(devices: Devices, classes: Classes, lists: Lists, shares: list, tables: Mapping) -> None:
    """Each class writes its members' result block once, split where members get different ones."""
    blocks: dict[int, set] = {}  # class number -> the result blocks its groups' positions get
    dst: dict[int, int] = {}  # class number -> the buffer its copies write
    for copy, _, _, k in shares:
        found = tables[participants(copy)].distinct_blocks
        mine = blocks.get(k)
        if mine is None or mine is found:
            blocks[k] = found
        else:
            blocks[k] = mine | found
        dst[k] = copy.dst
    member_block = None
    for k, c in enumerate(list(classes)):
        if len(blocks[k]) == 1:
            devices[c[0]].state.write_one(dst[k], next(iter(blocks[k])))
            continue
        if member_block is None:
            member_block = _member_blocks(shares, tables)
        for part in regroup(devices, classes, lists, c, member_block.__getitem__):
            devices[part[0]].state.write_one(dst[k], member_block[part[0]])


def _member_blocks(shares: list, tables: Mapping) -> dict[int, Block]:
    """Each member's result block (a class whose members get different ones splits by it)."""
    out: dict[int, Block] = {}
    for copy, members, _, _ in shares:
        group = participants(copy)
        table = tables[group]
        index = {p: j for j, p in enumerate(group)}
        for d in members:
            out[d] = table.blocks[index[d]]
    return out


def _class_records(memo: Memo, kind: str, ins: Instr, position: int, tables: Mapping[tuple, GroupCosts]) -> None:
    """The step's class records: members with equal figures (``Signature``) share one, their
    per-peer rows made from their group's table when listed."""
    members: dict[Signature, list[int]] = {}
    groups: dict[Signature, list[tuple]] = {}
    for group, table in tables.items():
        for sig, js in table.positions.items():
            if sig not in members:
                members[sig], groups[sig] = [], []
            if len(js) == len(group):
                members[sig].extend(group)
                groups[sig].extend([group] * len(group))
            else:
                members[sig].extend(group[j] for j in js)
                groups[sig].extend([group] * len(js))
    peers = PeerRows(tables)
    axes = tuple(getattr(ins, "axes", ()))
    for sig, devs in members.items():
        record = CommRecord(
            device=devs[0], instr=ins.id, position=position, source=ins.source, kind=kind, axes=axes,
            group=groups[sig][0], bytes_sent=sig.bytes_sent, bytes_received=sig.bytes_received,
            messages_sent=sig.messages_sent, messages_received=sig.messages_received, min_bytes=sig.min_bytes)
        memo.records.append(ClassRecord(record, tuple(devs), tuple(groups[sig]), peers))


# -- each kind's blocks and costs: (group, members, step, srcs, index, rows) -> member -> Result ---
# (``rows``: with each member's per-peer rows; the walk leaves them to be made when listed)


def _all_gather(group, members, step, srcs, index, rows=True):
    axis = step[members[0]].axis % len(srcs[members[0]].shape)
    sizes = [srcs[p].nbytes for p in group]
    total = sum(sizes)
    out_len = sum(srcs[p].shape[axis] for p in group)
    return {me: Result(srcs[me].along(axis, out_len), all_gather_cost(group, index[me], sizes, total, rows))
            for me in members}


def _reduce_scatter(group, members, step, srcs, index, rows=True):
    res = {}
    for me in members:
        ins, x = step[me], srcs[me]
        axis = ins.axis % len(x.shape)
        i = index[me]
        res[me] = Result(x.along(axis, ins.splits[i]), reduce_scatter_cost(group, i, ins.splits, x.per_index(axis), rows))
    return res


def _all_reduce(group, members, step, srcs, index, rows=True):
    return {me: Result(srcs[me], all_reduce_cost(group, index[me], math.prod(srcs[me].shape), srcs[me].dtype.itemsize,
                                                 rows))
            for me in members}


def _all_to_all(group, members, step, srcs, index, rows=True):
    g = len(group)
    sums = AllToAllGroup.of([step[p].splits for p in group],
                            [srcs[p].per_index(step[p].split_axis % len(srcs[p].shape)) for p in group])
    first = step[members[0]]
    concat_total = sum(srcs[p].shape[first.concat_axis % len(srcs[p].shape)] for p in group)
    res = {}
    for me in members:
        ins, x = step[me], srcs[me]
        i = index[me]
        axis = ins.concat_axis % len(x.shape)
        split_axis = ins.split_axis % len(x.shape)
        if axis != split_axis:
            length = concat_total
        elif sums.uniform:
            length = g * ins.splits[i]
        else:
            length = sum(step[p].splits[i] for p in group)
        res[me] = Result(x.along(split_axis, ins.splits[i]).along(axis, length), all_to_all_cost(group, i, sums, rows))
    return res


COSTS: dict[str, Callable] = {"all_gather": _all_gather, "reduce_scatter": _reduce_scatter, "all_reduce": _all_reduce,
                              "all_to_all": _all_to_all}

__all__ = ["COSTS", "run_collective"]
