"""A collective step's members as arrays over the group axis, so the work of a step does not grow
with the number of its groups.

A collective over mesh axes names its groups as a ``Varying`` field: a table of groups and each
device's row in it (an all-reduce over ``y`` on a 128 x 64 mesh: 128 groups of 64). The step's
members are held here as arrays (``StepMembers``): each member's device, its group (a number in
the step's ``GroupTable``) and what it holds (a number per distinct copy fields and source block,
``shape_key``: a member's cost does not read which devices its group names). A group's costs
depend only on what its positions hold (``group_costs``), so groups are sorted into patterns with
numpy and each pattern is costed once; a member's signature and result block are its pattern's at
its position. Where every position of every group holds the same (the usual case) the groups'
patterns are their lengths and no member's position is needed; otherwise the table of groups is
made a [groups, length] array (once per table and estimate) and positions are read from it.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from ...sharding.rows import distinct_rows, rows_of
from ...spmd import Instr, Varying
from .blocks import Block, EstimateError
from .group_costs import GroupCosts, costs_of, shape_key
from .local import own, tables
from .memo import Memo
from .state import member_ids


class GroupTable:
    """A step's groups (tuples of devices), numbered: the same as an object array (a member's
    group picked by number, every member of a group sharing its tuple), each one's length, and
    the groups of one length as a [groups, length] array of devices, made when asked."""

    __slots__ = ("values", "objects", "lengths", "_matrices")

    def __init__(self, values: Sequence[tuple[int, ...]]):
        self.values = tuple(values)
        self.objects = np.empty(len(self.values), dtype=object)
        for k, group in enumerate(self.values):
            self.objects[k] = group
        self.lengths = np.fromiter(map(len, self.values), dtype=np.int64, count=len(self.values))
        self._matrices: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def matrix(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The numbers of the groups of ``length`` devices and their devices, a row per group."""
        hit = self._matrices.get(length)
        if hit is None:
            numbers = np.flatnonzero(self.lengths == length)
            rows = np.asarray([self.values[k] for k in numbers.tolist()], dtype=np.int64).reshape(len(numbers), length)
            hit = self._matrices[length] = (numbers, rows)
        return hit


def group_table(source, memo: Memo) -> GroupTable:
    """The ``GroupTable`` of one instruction's groups (a ``Varying`` table, or its one group),
    made once per table in an estimate (``Memo.group_tables``, by identity: it holds the table)."""
    hit = memo.group_tables.get(id(source))
    if hit is None or hit[0] is not source:
        values = source.values if isinstance(source, Varying) else (tuple(source),)
        hit = memo.group_tables[id(source)] = (source, GroupTable(values))
    return hit[1]


class StepMembers(NamedTuple):
    """Every member of one collective step, class by class (class ``k``'s are
    ``devices[bounds[k]:bounds[k + 1]]``): its group's number and its held number (an index of
    ``held``: a distinct pair of copy fields and source block, with a copy that holds them)."""

    devices: np.ndarray
    groups: np.ndarray
    numbers: np.ndarray
    bounds: list[int]
    table: GroupTable
    held: list[tuple[Instr, Block]]
    keys: list[tuple]  # each held number's (``shape_key`` of its copy, its group's length, block): what a cost reads
    lists: list[list[int]]  # the classes themselves, in ``devices``' order


def step_members(devices, classes, here: Mapping[int, Instr], memo: Memo) -> StepMembers:
    """A collective step's members as arrays: each class's source block read once, its members'
    copies resolved once per distinct row of codes of the fields other than the group, its
    members' groups read from the group table's codes."""
    numbers: dict[tuple, int] = {}
    held: list[tuple[Instr, Block]] = []
    keys: list[tuple] = []
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    sources: list = []
    for c in classes:
        ins = here[c[0]]
        block = devices[c[0]].state.read(ins.src, ins, c[0])
        members = member_ids(c)
        fields = tables(ins)
        group = ins.group
        others = [t for t in fields if t is not group]
        if others:  # copies that differ beyond their group: one per distinct row of codes
            codes = np.stack([t.codes[rows_of(t.ids, members)] for t in others], axis=1)
            _, first, inverse = distinct_rows(codes)
            reps = members[first].tolist()
        else:
            inverse, reps = None, [c[0]]
        kinds = []
        for d in reps:
            copy = own(ins, tuple(t.code(d) for t in fields), d, memo) if fields else ins
            key = (shape_key(copy), len(copy.group), block)  # its group's length: the minimum reads it
            kinds.append(numbers.setdefault(key, len(held)))
            if kinds[-1] == len(held):
                held.append((copy, block))
                keys.append(key)
        codes = group.codes[rows_of(group.ids, members)] if isinstance(group, Varying) else np.zeros(len(members), np.int64)
        parts.append((members, codes, np.full(len(members), kinds[0], dtype=np.int64) if inverse is None
                      else np.asarray(kinds, dtype=np.int64)[inverse]))
        sources.append(group)
    table, remaps = _joined_tables(sources, memo)
    bounds = np.cumsum([0] + [len(p[0]) for p in parts]).tolist()
    columns = [[p[0] for p in parts], [remap[p[1]] if remap is not None else p[1] for p, remap in zip(parts, remaps)],
               [p[2] for p in parts]]
    devices, groups, numbers = (c[0] if len(c) == 1 else np.concatenate(c) for c in columns)  # one class: as it is
    return StepMembers(devices, groups, numbers, bounds, table, held, keys, list(classes))


def _joined_tables(sources: list, memo: Memo) -> tuple[GroupTable, list]:
    """One table of groups for the classes' group sources: the one table where they share it (the
    usual case), else their groups joined by value, each class's codes remapped into it."""
    first = sources[0]
    if all(s is first for s in sources):
        return group_table(first, memo), [None] * len(sources)
    index: dict[tuple, int] = {}
    remaps = []
    for s in sources:
        values = group_table(s, memo).values
        remaps.append(np.asarray([index.setdefault(v, len(index)) for v in values], dtype=np.int64))
    return GroupTable(list(index)), remaps


class Patterns(NamedTuple):
    """The step's groups sorted by what their positions hold: each group's pattern (-1: no member
    runs it), each pattern's ``GroupCosts``, and each member's position in its group (None where
    no pattern needs it: one signature and one result block throughout each)."""

    of_group: np.ndarray
    costs: list[GroupCosts]
    position: np.ndarray | None


def patterns(kind: str, step: StepMembers, cost: Callable, memo: Memo) -> Patterns:
    """Each group's pattern and each pattern's costs (looked up by value in ``Memo.group_costs``
    across steps): by length where every group's members hold one thing and fill it, else by the
    held numbers of its positions (``distinct_rows`` over the [groups, length] arrays)."""
    table = step.table
    count = np.bincount(step.groups, minlength=len(table.values))
    used = np.flatnonzero(count)
    of_group = np.full(len(table.values), -1, dtype=np.int64)
    if len(step.held) == 1 and np.array_equal(count[used], table.lengths[used]):
        lengths, inverse = np.unique(table.lengths[used], return_inverse=True)
        of_group[used] = inverse.reshape(-1)
        costs = [_costs(kind, (0,) * n, step, cost, memo) for n in lengths.tolist()]
        if all(c.uniform(0) and c.uniform(1) for c in costs):
            return Patterns(of_group, costs, None)
        return Patterns(of_group, costs, _positions(step, used)[0])
    position, held_rows = _positions(step, used)
    costs = []
    for groups, rows in held_rows:
        distinct, _, inverse = distinct_rows(rows)
        of_group[groups] = len(costs) + inverse
        costs.extend(_costs(kind, tuple(row), step, cost, memo) for row in distinct.tolist())
    return Patterns(of_group, costs, position)


def _positions(step: StepMembers, used: np.ndarray) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Each member's position in its group, and per length of the groups with members their
    numbers and the held numbers of their positions (a device of a group that does not run the
    step is an error naming it)."""
    order = np.argsort(step.devices, kind="stable")
    ordered = step.devices[order]
    position = np.empty(len(step.devices), dtype=np.int64)
    out = []
    for length in np.unique(step.table.lengths[used]).tolist():
        numbers, rows = step.table.matrix(length)
        keep = np.isin(numbers, used)
        numbers, rows = numbers[keep], rows[keep]
        at = np.minimum(np.searchsorted(ordered, rows), len(ordered) - 1)
        missing = ordered[at] != rows
        if missing.any():
            ins, d = step.held[0][0], int(rows[missing][0])
            group = step.table.values[int(numbers[missing.any(axis=1)][0])]
            raise EstimateError(f"[{ins.id}] {ins.kind} from {ins.source!r}: device {d} is in the group {group} "
                                "but does not run this step")
        members = order[at]
        position[members] = np.arange(length)[None, :]
        out.append((numbers, step.numbers[members]))
    return position, out


def _costs(kind: str, numbers: tuple[int, ...], step: StepMembers, cost: Callable, memo: Memo) -> GroupCosts:
    """The costs of a group whose position ``j`` holds ``step.held[numbers[j]]``, by value across
    steps (the distinct things held, and which of them each position holds)."""
    distinct = list(dict.fromkeys(numbers))
    first = {k: j for j, k in enumerate(distinct)}
    key = (kind, tuple(step.keys[k] for k in distinct), tuple(first[k] for k in numbers))
    hit = memo.group_costs.get(key)
    if hit is None:
        hit = memo.group_costs[key] = costs_of(kind, [step.held[k] for k in numbers], cost, len(distinct) == 1)
    return hit


class GroupsCosts(Mapping):
    """group (a tuple of devices) -> its pattern's ``GroupCosts``, for the per-peer rows of a
    listed record (``PeerRows``): the lookup by group is made on first use, not per step."""

    def __init__(self, table: GroupTable, found: Patterns):
        self.table, self.found = table, found
        self._by_group: dict | None = None

    def _made(self) -> dict:
        if self._by_group is None:
            costs, of_group = self.found.costs, self.found.of_group.tolist()
            self._by_group = {g: costs[p] for g, p in zip(self.table.values, of_group) if p >= 0}
        return self._by_group

    def __getitem__(self, group):
        return self._made()[group]

    def __iter__(self) -> Iterator:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())


__all__ = ["GroupTable", "GroupsCosts", "Patterns", "StepMembers", "group_table", "patterns", "step_members"]
