"""The SPMD instruction set: what one device does, as plain frozen data.

Local compute with a registry op, local slicing / padding / freeing, collectives over device
groups (all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute) and control
instructions that run blocks of their own (``Loop``, ``While``, ``Switch``). Every device of an
``SpmdProgram`` runs the same sequence of instruction ids (SPMD); a collective's ``id`` is how
peers match their messages. Instructions are built with their final ids
(``simshard.spmd.numbering`` makes numbered copies) and never change after.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from .ids import block_ids, placed
from .varying import Varying

Group = tuple[int, ...]  # device ids in canonical order (ascending mesh coordinate)


@dataclass(frozen=True)
class Instr:
    """Base: ``id`` is shared by every device's copy of one SPMD step; ``source`` names the
    program op (or reshard) it comes from, for reports."""

    id: int
    source: str

    kind: ClassVar[str] = ""
    is_collective: ClassVar[bool] = False

    def reads(self) -> tuple[int, ...]:
        if not hasattr(self, "src"):
            return ()
        src = self.src  # a Varying source (an exchange round's relays read what they assemble): every buffer it names
        return tuple(dict.fromkeys(src.values)) if isinstance(src, Varying) else (src,)

    def writes(self) -> tuple[int, ...]:
        return (self.dst,) if hasattr(self, "dst") else ()


@dataclass(frozen=True)
class Compute(Instr):
    """``outputs = op(*inputs, **params)`` on local buffers (params already localised)."""

    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    params: tuple[tuple[str, Any], ...] = ()
    kind: ClassVar[str] = "compute"

    def reads(self):
        return self.inputs

    def writes(self):
        return self.outputs


@dataclass(frozen=True)
class Literal(Instr):
    """Put a constant (a scalar operand, or a nullary op's block) into a buffer."""

    dst: int
    value: Any
    kind: ClassVar[str] = "literal"


@dataclass(frozen=True)
class Slice(Instr):
    """Keep, per dim, the listed local positions of ``src`` (a local cut: no communication)."""

    src: int
    dst: int
    index: tuple[range | tuple[int, ...], ...]  # per dim a range (a block's rows) or any positions
    kind: ClassVar[str] = "slice"


@dataclass(frozen=True)
class Pad(Instr):
    """Pad ``src`` at the end of each dim to ``shape`` with ``value`` (a reduction's identity, so
    padding never changes a result)."""

    src: int
    dst: int
    shape: tuple[int, ...]
    value: Any
    kind: ClassVar[str] = "pad"


@dataclass(frozen=True)
class Free(Instr):
    bufs: tuple[int, ...]
    kind: ClassVar[str] = "free"

    def reads(self):
        return ()


@dataclass(frozen=True)
class AllGather(Instr):
    """Concatenate the group's blocks along ``axis`` in group order; every member gets it all."""

    src: int
    dst: int
    group: Group
    axis: int
    axes: tuple[str, ...] = ()
    kind: ClassVar[str] = "all_gather"
    is_collective: ClassVar[bool] = True


@dataclass(frozen=True)
class ReduceScatter(Instr):
    """Reduce the group's buffers and give member i chunk i along ``axis``; ``splits`` are the
    chunk lengths (uneven chunks allowed). Contributions combine in ``reduce_order`` (the group
    sorted by mesh coordinate, the canonical order) when given, else in group order: the chunk
    order follows the target dim, which need not be the canonical order."""

    src: int
    dst: int
    group: Group
    axis: int
    splits: tuple[int, ...]
    reduce_op: str = "sum"
    axes: tuple[str, ...] = ()
    reduce_order: Group = ()
    kind: ClassVar[str] = "reduce_scatter"
    is_collective: ClassVar[bool] = True


@dataclass(frozen=True)
class AllReduce(Instr):
    src: int
    dst: int
    group: Group
    reduce_op: str = "sum"
    axes: tuple[str, ...] = ()
    kind: ClassVar[str] = "all_reduce"
    is_collective: ClassVar[bool] = True


@dataclass(frozen=True)
class AllToAll(Instr):
    """Cut ``src`` along ``split_axis`` into the group's chunks (``splits`` lengths), send chunk
    j to member j, concatenate what arrives along ``concat_axis`` in group order."""

    src: int
    dst: int
    group: Group
    split_axis: int
    splits: tuple[int, ...]
    concat_axis: int
    axes: tuple[str, ...] = ()
    kind: ClassVar[str] = "all_to_all"
    is_collective: ClassVar[bool] = True


@dataclass(frozen=True)
class CollectivePermute(Instr):
    """Each ``(source, target)`` device pair moves ``src`` of the source into ``dst`` of the
    target; a device that receives nothing gets zeros of ``shape``."""

    src: int
    dst: int
    pairs: tuple[tuple[int, int], ...]
    shape: tuple[int, ...] = ()
    dtype: str = "float64"
    axes: tuple[str, ...] = ()
    kind: ClassVar[str] = "collective_permute"
    is_collective: ClassVar[bool] = True


@dataclass(frozen=True)
class Loop(Instr):
    """Run ``body`` ``length`` times (a scan, partitioned once). Before each iteration the loop
    writes the step number (``length - 1 - k`` when ``reverse``) into buffer ``counter`` as an
    int32; the body reads the loop's buffers (``reads_``: the scan's constants, carries and
    stacked inputs) and overwrites its carries and stacked outputs (``writes_``) in place.
    Iteration ``k`` runs body instruction ``j`` under id ``id_base + k * stride + j``, and a loop,
    switch or while in the body under ids after the body's own (``nested_ids``), so every
    collective of every iteration, nested ones included, has its own id (numbered by
    ``ScheduleBuilder.finish``)."""

    length: int
    reverse: bool
    counter: int
    body: tuple[Instr, ...]
    reads_: tuple[int, ...]
    writes_: tuple[int, ...]
    id_base: int = 0
    kind: ClassVar[str] = "loop"

    def reads(self):
        return self.reads_

    def writes(self):
        return self.writes_ + (self.counter,)

    def step(self, k: int) -> int:
        """The step number iteration ``k`` runs (the scan's index into its stacked arrays)."""
        return self.length - 1 - k if self.reverse else k

    @functools.cached_property
    def stride(self) -> int:
        """Ids one iteration uses."""
        return block_ids(self.body)

    def iteration(self, k: int) -> tuple[Instr, ...]:
        """The body as iteration ``k`` runs it: collectives under their own ids."""
        return placed(self.body, self.id_base + k * self.stride)


@dataclass(frozen=True)
class While(Instr):
    """A loop whose trip count the data decide (``lax.while_loop``): run ``cond`` (which leaves a
    replicated bool in buffer ``pred``, the same on every device), stop when it is false, else
    run ``body`` (which overwrites the carries) and test again. Iteration ``k`` runs instruction
    ``j`` of ``cond + body`` under id ``id_base + k * block_ids(cond + body) + j``."""

    cond: tuple[Instr, ...]
    pred: int
    body: tuple[Instr, ...]
    reads_: tuple[int, ...]
    writes_: tuple[int, ...]
    id_base: int = 0
    kind: ClassVar[str] = "while"

    def reads(self):
        return self.reads_

    def writes(self):
        return self.writes_ + (self.pred,)

    def iteration(self, k: int) -> tuple[tuple[Instr, ...], tuple[Instr, ...]]:
        both = self.cond + self.body
        run = placed(both, self.id_base + k * block_ids(both))
        return run[:len(self.cond)], run[len(self.cond):]


@dataclass(frozen=True)
class Switch(Instr):
    """Run only ``branches[index]`` (``lax.switch`` / ``lax.cond``): ``index`` is a replicated int
    buffer (clamped into range), the same on every device, so all take the same branch. Each
    branch leaves its results in the same buffers. Instruction ``j`` of branch ``k`` runs under id
    ``id_base + (ids of the branches before k) + j``."""

    index: int
    branches: tuple[tuple[Instr, ...], ...]
    reads_: tuple[int, ...]
    writes_: tuple[int, ...]
    id_base: int = 0
    kind: ClassVar[str] = "switch"

    def reads(self):
        return self.reads_ + (self.index,)

    def writes(self):
        return self.writes_

    def chosen(self, k: int) -> tuple[Instr, ...]:
        k = min(max(int(k), 0), len(self.branches) - 1)
        return placed(self.branches[k], self.id_base + sum(block_ids(b) for b in self.branches[:k]))


def updates_in_place(instr) -> bool:
    """A ``dynamic_update_slice`` whose result goes to its operand's own buffer (a scan writing
    one step of its stacked output): the update lands in the buffer the device holds, so it
    allocates nothing. The executor writes it in place and both memory accountings (the
    executor's and the estimate's) count no new bytes for it: a device does not hold a second
    copy of a 32-layer stack to write one layer's row."""
    return (instr.kind == "compute" and instr.op == "dynamic_update_slice" and len(instr.outputs) == 1
            and instr.outputs[0] == instr.inputs[0])


def participants(instr) -> tuple[int, ...]:
    """The devices a collective instruction exchanges data between (for a permute: every device
    named in a pair, in first-seen order)."""
    if instr.kind == "collective_permute":
        return pair_members(tuple(instr.pairs))
    return instr.group if isinstance(instr.group, tuple) else tuple(instr.group)


@functools.lru_cache(maxsize=4096)
def pair_members(pairs: tuple) -> tuple[int, ...]:
    """The devices named in a permute's pairs, in first-seen order (cached: many steps share pairs)."""
    return tuple(dict.fromkeys(d for pair in pairs for d in pair))


INSTRUCTIONS: dict[str, type[Instr]] = {
    c.kind: c
    for c in (Compute, Literal, Slice, Pad, Free, AllGather, ReduceScatter, AllReduce, AllToAll, CollectivePermute, Loop,
              While, Switch)
}
