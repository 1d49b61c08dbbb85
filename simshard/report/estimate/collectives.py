"""Collectives on blocks: each member's result block and the records of what it sent and received.

A step's members are held as arrays over its groups (``group_axis``): each class's copies of
the instruction resolved once per distinct row of codes beyond the group, the groups sorted
into patterns by what their positions hold, each pattern costed once (``group_costs``, from the
direct algorithms' messages, ``report/collective_cost``, so a record equals an executed run's).
A member's signature and result block are its pattern's at its position, read with numpy, so
the work of a step does not grow with its number of groups. Members with equal figures share
one ``ClassRecord`` (in ascending device order), their per-peer rows made only when listed; a
class splits where its members receive different blocks. A permute is ``permute``'s.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from ...spmd import Instr
from ..collective_cost import AllToAllGroup, all_gather_cost, all_reduce_cost, all_to_all_cost, reduce_scatter_cost
from ..comm import CommRecord
from ..records import ClassRecord, GroupsByNumber
from .blocks import Block
from .group_axis import GroupsCosts, Patterns, StepMembers, patterns, step_members
from .group_costs import PeerRows, Signature
from .memo import Memo
from .permute import Result, run_permute
from .state import Classes, Devices, Lists, regroup


def run_collective(devices: Devices, classes: Classes, here: Mapping[int, Instr], lists: Lists, memo: Memo) -> None:
    """One collective SPMD step over every class: results written, class records appended to
    ``memo.records``."""
    first = here[classes[0][0]]
    if first.kind == "collective_permute":
        run_permute(devices, classes, here, lists, memo)
        return
    step = step_members(devices, classes, here, memo)
    found = patterns(first.kind, step, COSTS[first.kind], memo)
    pattern = found.of_group[step.groups]  # each member's
    position = devices[classes[0][0]].state.position
    signatures, sig = _per_member(found, pattern, 1)
    blocks, block = _per_member(found, pattern, 0)
    _write_results(devices, classes, lists, here, step, blocks, block)
    _class_records(memo, first, position, step, found, signatures, sig)


def _per_member(found: Patterns, pattern: np.ndarray, what: int) -> tuple[list, np.ndarray]:
    """The distinct result blocks (``what`` 0) or signatures (1) of the patterns' costs,
    numbered, and each member's number: its pattern's where a pattern has one, else the one of
    its kind of position (by its position)."""
    numbers: dict = {}
    tables = []
    for c in found.costs:
        codes = [numbers.setdefault(r[what], len(numbers)) for r in c.results]
        tables.append(codes[0] if len(set(codes)) == 1 else np.asarray(codes, dtype=np.int64)[c.kinds])
    if all(isinstance(t, int) for t in tables):
        return list(numbers), np.asarray(tables, dtype=np.int64)[pattern]
    out = np.empty(len(pattern), dtype=np.int64)
    for p, t in enumerate(tables):
        mine = pattern == p
        out[mine] = t if isinstance(t, int) else t[found.position[mine]]
    return list(numbers), out


def _write_results(devices: Devices, classes: Classes, lists: Lists, here: Mapping[int, Instr], step: StepMembers,
                   blocks: list[Block], block: np.ndarray) -> None:
    """Each class writes its members' result block once, split where members get different ones."""
    for k, c in enumerate(list(classes)):
        dst = here[c[0]].dst
        mine = block[step.bounds[k]:step.bounds[k + 1]]
        if (mine == mine[0]).all():
            devices[c[0]].state.write_one(dst, blocks[int(mine[0])])
            continue
        of = dict(zip(step.devices[step.bounds[k]:step.bounds[k + 1]].tolist(), mine.tolist()))
        for part in regroup(devices, classes, lists, c, of.__getitem__):
            devices[part[0]].state.write_one(dst, blocks[of[part[0]]])


def _class_records(memo: Memo, ins: Instr, position: int, step: StepMembers, found: Patterns,
                   signatures: list[Signature], sig: np.ndarray) -> None:
    """The step's class records: members with equal figures (``Signature``) share one, in
    ascending device order, their per-peer rows made from their group's costs when listed."""
    ordered = bool(np.all(step.devices[1:] > step.devices[:-1]))
    order = None if ordered else np.argsort(step.devices, kind="stable")
    peers = PeerRows(GroupsCosts(step.table, found))
    axes = tuple(getattr(ins, "axes", ()))
    for k, s in enumerate(signatures):
        if len(signatures) == 1:
            mine = slice(None) if ordered else order
        else:
            mine = np.flatnonzero(sig == k) if ordered else order[sig[order] == k]
        if len(signatures) == 1 and ordered and len(step.lists) == 1:
            devs = tuple(step.lists[0])  # the class itself (its Python ints made once, by the walk)
        else:
            devs = tuple(step.devices[mine].tolist())
        groups = GroupsByNumber(step.table.objects, step.groups[mine])  # listed when read
        record = CommRecord(
            device=devs[0], instr=ins.id, position=position, source=ins.source, kind=ins.kind, axes=axes,
            group=groups[0], bytes_sent=s.bytes_sent, bytes_received=s.bytes_received,
            messages_sent=s.messages_sent, messages_received=s.messages_received, min_bytes=s.min_bytes)
        memo.records.append(ClassRecord(record, devs, groups, peers))


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
