"""Collectives on blocks: each member's result block and the record of what it sent and received.

Each collective is costed once per group, then per member in O(1) (``report/collective_cost``):
the messages the runtime's direct algorithms send, so a record equals an executed run's. A
class's members resolve the step's ``Varying`` fields (their groups) to one copy per distinct
row of codes; members are then gathered by their group's value (a permute: by its pairs), costed
per group, and a class splits where its members receive different blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple

import numpy as np

from ...spmd import Instr, participants
from ..collective_cost import (NO_COST, AllToAllGroup, Cost, all_gather_cost, all_reduce_cost, all_to_all_cost,
                               analytic_min_bytes, collective_permute_costs, reduce_scatter_cost)
from ..comm import CommRecord
from .blocks import Block
from .local import copies
from .memo import Memo
from .state import Classes, Devices, Lists, regroup


class Result(NamedTuple):
    """A member's side of a collective: the block it writes and its cost."""

    block: Block
    cost: Cost


class Group(NamedTuple):
    """The devices one collective step runs over (its record's ``group``), each one's position
    in it, the members of this walk that run it, and for a permute the devices sent to."""

    devices: tuple[int, ...]
    index: dict[int, int]
    members: list[int]
    receivers: frozenset | None = None


@dataclass(frozen=True)
class Routes:
    """A permute's pairs indexed: where each device sends, who sends to each, and the devices
    another device sends to."""

    targets: dict  # source -> its targets, in pair order
    sources: dict  # target -> its sources, in pair order
    receivers: frozenset

    @staticmethod
    def of(pairs) -> "Routes":
        targets: dict[int, list[int]] = {}
        sources: dict[int, list[int]] = {}
        for s, t in pairs:
            targets.setdefault(s, []).append(t)
            sources.setdefault(t, []).append(s)
        return Routes(targets, sources, frozenset(t for s, t in pairs if s != t))


def run_collective(devices: Devices, classes: Classes, here: Mapping[int, Instr], lists: Lists, memo: Memo) -> None:
    """One collective SPMD step over every class: results written, records appended."""
    kind = next(iter(here.values())).kind
    shares = [share for c in classes for share in copies(here[c[0]], c, memo)]
    step = {d: ins for ins, members in shares for d in members}
    if kind == "collective_permute":
        results, groups, srcs = _permute(devices, shares, step, memo)
    else:
        srcs = {}
        for c in classes:  # a class runs one instruction on one state: its source block is read once
            ins = here[c[0]]
            block = devices[c[0]].state.read(ins.src, ins, c[0])
            srcs.update(dict.fromkeys(c, block))
        results, groups = _grouped(kind, shares, step, srcs)
    for c in list(classes):  # each class writes its members' result once, split where they differ
        for part in regroup(devices, classes, lists, c, lambda d: results[d].block):
            devices[part[0]].state.write_one(step[part[0]].dst, results[part[0]].block)
    for group in groups:
        _record(devices, kind, group, step, srcs, results)


def _grouped(kind: str, shares, step: Mapping[int, Instr], srcs: Mapping[int, Block]) -> tuple[dict, list[Group]]:
    """Members gathered by their group's value, each group costed once."""
    by_group: dict[tuple, list[int]] = {}
    for ins, members in shares:
        by_group.setdefault(tuple(ins.group), []).extend(members)
    results: dict[int, Result] = {}
    groups = []
    for devs, members in by_group.items():
        index = {p: j for j, p in enumerate(devs)}
        results.update(COSTS[kind](devs, members, step, srcs, index))
        groups.append(Group(devs, index, members))
    return results, groups


def _permute(devices: Devices, shares, step: Mapping[int, Instr], memo: Memo) -> tuple[dict, list[Group], dict]:
    """A collective-permute: members gathered by their pairs' value; a source reads its block."""
    by_pairs: dict[tuple, list[int]] = {}
    for ins, members in shares:
        by_pairs.setdefault(tuple(ins.pairs), []).extend(members)
    srcs: dict[int, Block | None] = {}
    targets: dict[int, list[int]] = {}
    routes_of: dict[int, Routes] = {}
    groups = []
    for pairs, members in by_pairs.items():
        routes = memo.routes.get(pairs)
        if routes is None:
            routes = memo.routes[pairs] = Routes.of(pairs)
        devs = participants(step[members[0]])
        groups.append(Group(devs, {p: j for j, p in enumerate(devs)}, members, routes.receivers))
        for d in members:
            routes_of[d] = routes
            mine = routes.targets.get(d)
            srcs[d] = devices[d].state.read(step[d].src, step[d], d) if mine is not None else None
            if mine:
                targets[d] = mine
    costs = collective_permute_costs(targets, {d: srcs[d].nbytes for d in targets})
    results = {}
    for d, ins in step.items():
        sources = routes_of[d].sources.get(d)
        out = srcs[sources[0]] if sources else Block(tuple(int(n) for n in ins.shape), np.dtype(ins.dtype))
        results[d] = Result(out, costs.get(d, NO_COST))
    return results, groups, srcs


def _record(devices: Devices, kind: str, group: Group, step: Mapping[int, Instr], srcs: Mapping[int, Block | None],
            results: Mapping[int, Result]) -> None:
    """Each member's ``CommRecord`` of the step (a permute's device named in no pair has none)."""
    for d in group.members:
        if d not in group.index:
            continue
        ins, dev, x = step[d], devices[d], srcs[d]
        out, cost = results[d]
        dev.records.append(CommRecord(
            device=d, instr=ins.id, position=dev.state.position, source=ins.source, kind=kind,
            axes=tuple(getattr(ins, "axes", ())), group=group.devices, bytes_sent=cost.bytes_sent,
            bytes_received=cost.bytes_received, messages_sent=cost.messages_sent,
            messages_received=cost.messages_received,
            min_bytes=analytic_min_bytes(ins, d, x.shape if x is not None else (), out.shape, out.dtype.itemsize,
                                         group.index[d], group.receivers),
            peers=cost.peers,
        ))


# -- each kind's blocks and costs: (group, members, step, srcs, index) -> member -> Result ----------


def _all_gather(group, members, step, srcs, index):
    axis = step[members[0]].axis % len(srcs[members[0]].shape)
    sizes = [srcs[p].nbytes for p in group]
    total = sum(sizes)
    out_len = sum(srcs[p].shape[axis] for p in group)
    return {me: Result(srcs[me].along(axis, out_len), all_gather_cost(group, index[me], sizes, total)) for me in members}


def _reduce_scatter(group, members, step, srcs, index):
    res = {}
    for me in members:
        ins, x = step[me], srcs[me]
        axis = ins.axis % len(x.shape)
        i = index[me]
        res[me] = Result(x.along(axis, ins.splits[i]), reduce_scatter_cost(group, i, ins.splits, x.per_index(axis)))
    return res


def _all_reduce(group, members, step, srcs, index):
    return {me: Result(srcs[me], all_reduce_cost(group, index[me], math.prod(srcs[me].shape), srcs[me].dtype.itemsize))
            for me in members}


def _all_to_all(group, members, step, srcs, index):
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
        res[me] = Result(x.along(split_axis, ins.splits[i]).along(axis, length), all_to_all_cost(group, i, sums))
    return res


COSTS: dict[str, Callable] = {"all_gather": _all_gather, "reduce_scatter": _reduce_scatter, "all_reduce": _all_reduce,
                              "all_to_all": _all_to_all}

__all__ = ["COSTS", "Group", "Result", "Routes", "run_collective"]
