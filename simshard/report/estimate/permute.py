"""A collective-permute on blocks: each source's block to its targets, and the records of what
each device sent and received, members with equal figures sharing a class record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np

from ...spmd import Instr, participants
from ..collective_cost import NO_COST, Cost, analytic_min_bytes, collective_permute_costs
from ..comm import CommRecord
from ..records import ClassRecord
from .blocks import Block
from .group_costs import Signature
from .local import copies
from .memo import Memo
from .state import Classes, Devices, Lists, regroup


class Result(NamedTuple):
    """A member's side of a collective: the block it writes and its cost."""

    block: Block
    cost: Cost


class Group(NamedTuple):
    """The devices one permute runs over (every device named in a pair), each one's position in
    it, the members of this walk that run it, and the devices sent to."""

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


def run_permute(devices: Devices, classes: Classes, here: Mapping[int, Instr], lists: Lists, memo: Memo) -> None:
    """One collective-permute step over every class: results written, class records appended."""
    shares = [share for c in classes for share in copies(here[c[0]], c, memo)]
    step = {d: ins for ins, members in shares for d in members}
    results, groups, srcs = _permute(devices, shares, step, memo)
    for c in list(classes):  # each class writes its members' result once, split where they differ
        for part in regroup(devices, classes, lists, c, lambda d: results[d].block):
            devices[part[0]].state.write_one(step[part[0]].dst, results[part[0]].block)
    position = devices[classes[0][0]].state.position
    for group in groups:
        _record(memo, group, step, srcs, results, position)


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


def _record(memo: Memo, group: Group, step: Mapping[int, Instr], srcs: Mapping[int, Block | None],
            results: Mapping[int, Result], position: int) -> None:
    """The group's records (a device named in no pair has none): members with equal figures
    share a class record, each one's per-peer rows its own."""
    by_sig: dict[Signature, list[int]] = {}
    for d in group.members:
        if d not in group.index:
            continue
        x, (out, cost) = srcs[d], results[d]
        minimum = analytic_min_bytes(step[d], d, x.shape if x is not None else (), out.shape, out.dtype.itemsize,
                                     group.index[d], group.receivers)
        sig = Signature(cost.bytes_sent, cost.bytes_received, cost.messages_sent, cost.messages_received, minimum)
        by_sig.setdefault(sig, []).append(d)
    peers = PermutePeers({d: results[d].cost.peers for devs in by_sig.values() for d in devs})
    for sig, devs in by_sig.items():
        ins = step[devs[0]]
        record = CommRecord(
            device=devs[0], instr=ins.id, position=position, source=ins.source, kind="collective_permute",
            axes=tuple(getattr(ins, "axes", ())), group=group.devices, bytes_sent=sig.bytes_sent,
            bytes_received=sig.bytes_received, messages_sent=sig.messages_sent,
            messages_received=sig.messages_received, min_bytes=sig.min_bytes)
        memo.records.append(ClassRecord(record, tuple(sorted(devs)), (group.devices,) * len(devs), peers))


class PermutePeers:
    """A permute's class record's ``peers``: each member's rows, made with its cost."""

    __slots__ = ("rows",)

    def __init__(self, rows: Mapping[int, tuple]):
        self.rows = rows

    def __call__(self, device: int, group: tuple[int, ...]) -> tuple:
        return self.rows[device]


__all__ = ["Result", "Routes", "run_permute"]
