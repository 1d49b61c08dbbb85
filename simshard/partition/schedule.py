"""Schedules: what one device does, as plain data.

A ``Schedule`` is a device's list of instructions over numbered local buffers: local compute
with a registry op, local slicing / padding / freeing, and collectives over device groups
(all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute). Every device of an
``SpmdProgram`` runs the same sequence of instruction ids (SPMD); a collective's ``id`` is how
peers match their messages. Schedules contain no code: they serialize with msgpack and
round-trip exactly (``to_bytes`` / ``from_bytes``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Iterator, Sequence

import msgpack
import numpy as np

from ..sharding.rows import row_of

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


# -- ids of nested blocks ----------------------------------------------------------------------------
# A block (a loop's body, a branch, a while's condition and body) runs its instruction j under id
# ``first + j`` and the control instructions in it under the ids after those: each one's
# ``id_base`` is relative to its block's first id (set by ``number_nested``) until ``placed`` runs
# the block at its ``first`` id, making it absolute.

WHILE_IDS = 10**15  # ids a while loop may use (its iterations times its instructions)


def ids_of(ins: Instr) -> int:
    """How many ids a control instruction's runs use (0 for any other instruction)."""
    if ins.kind == "loop":
        return ins.length * ins.stride
    if ins.kind == "switch":
        return sum(block_ids(b) for b in ins.branches)
    if ins.kind == "while":
        return WHILE_IDS
    return 0


CONTROL = frozenset({"loop", "switch", "while"})  # instructions that run blocks of their own


def block_ids(block: tuple[Instr, ...]) -> int:
    """Ids one run of a block uses: one per instruction, then its control instructions' ranges."""
    return len(block) + sum(ids_of(b) for b in block if b.kind in CONTROL)


def _blocks(ins: Instr) -> tuple[tuple[Instr, ...], ...]:
    """The blocks a control instruction runs (a while's condition and body as one)."""
    if ins.kind == "loop":
        return (ins.body,)
    if ins.kind == "switch":
        return ins.branches
    if ins.kind == "while":
        return (ins.cond + ins.body,)
    return ()


def nested_ids(ins: Instr) -> tuple[tuple[int, int, int], ...]:
    """Where the control instructions in ``ins``'s blocks sit and their id ranges start:
    ``(block, position, id_base relative to the block)``."""
    out = []
    for k, block in enumerate(_blocks(ins)):
        offset = len(block)
        for j, b in enumerate(block):
            if b.kind in CONTROL:
                out.append((k, j, offset))
                offset += ids_of(b)
    return tuple(out)


def number_nested(ins: Instr, where: tuple[tuple[int, int, int], ...] | None = None) -> None:
    """Give the control instructions nested in ``ins`` their id ranges, relative to their block
    (``where``: ``nested_ids(ins)``, the same for every class's copy of one SPMD step)."""
    blocks = _blocks(ins)
    for k, j, offset in nested_ids(ins) if where is None else where:
        b = blocks[k][j]
        object.__setattr__(b, "id_base", offset)
        number_nested(b)


def placed(block: tuple[Instr, ...], first: int) -> tuple[Instr, ...]:
    """A block as it runs from id ``first``: collectives under their ids, control instructions
    with their ranges made absolute."""
    out = []
    for j, b in enumerate(block):
        if b.is_collective:
            b = replace(b, id=first + j)
        elif b.kind in CONTROL:
            b = replace(b, id_base=first + b.id_base)
        out.append(b)
    return tuple(out)


class Varying:
    """A field of one SPMD step's instruction that depends on the device: a value per class of
    devices and each device's class (``codes``, a row per device of ``ids``, ascending). A
    collective over mesh axes holds its groups so (each device indexes the table of groups, as
    replica groups do in XLA), a slice the positions of each device's block, a literal each
    device's offset: one instruction serves every device, and devices that differ only there
    stay in one class. ``resolved`` gives a device its own instruction."""

    __slots__ = ("ids", "codes", "values")

    def __init__(self, ids: np.ndarray, codes: np.ndarray, values: Sequence):
        self.ids, self.codes, self.values = ids, codes, tuple(values)

    def code(self, device: int) -> int:
        return int(self.codes[row_of(self.ids, device)])

    def of(self, device: int):
        return self.values[self.code(device)]

    def map(self, fn):
        """``fn`` of each device's value: a Varying on the same classes, or the one result all share."""
        out = [fn(v) for v in self.values]
        if all(o == out[0] for o in out[1:]):
            return out[0]
        return Varying(self.ids, self.codes, out)

    def __repr__(self) -> str:
        return f"Varying({len(self.values)} values over {len(self.ids)} devices)"


def field_of(value, fn):
    """``fn`` of a field's value, per class where the value is ``Varying``."""
    return value.map(fn) if isinstance(value, Varying) else fn(value)


# the fields the partitioner may make Varying: a collective's groups, a slice's positions, a literal's value
VARYING_FIELDS = ("group", "splits", "reduce_order", "index", "value", "src")


def varying_fields(ins: Instr) -> tuple[tuple[str, Varying], ...]:
    """``ins``'s own ``Varying`` fields, as (name, table) pairs (not its blocks')."""
    return tuple((n, v) for n in VARYING_FIELDS if isinstance(v := getattr(ins, n, None), Varying))


def varies(ins: Instr, seen: dict | None = None) -> bool:
    """Whether ``ins`` (or an instruction of its blocks) has a ``Varying`` field. ``seen`` (id of
    an instruction -> the answer) spares a body shared by several control instructions a second look."""
    if ins.kind not in CONTROL:
        return bool(varying_fields(ins))
    if seen is None:
        seen = {}
    hit = seen.get(id(ins))
    if hit is None:
        hit = seen[id(ins)] = any(_block_varies(block, seen) for block in _blocks(ins))
    return hit


def _block_varies(block, seen: dict) -> bool:
    """``varies`` over a block; a class's list of a table (a loop body) reads the table's slots
    once for all its classes."""
    if not isinstance(block, Instructions):
        return any(varies(b, seen) for b in block)
    key = ("slots", id(block._slots))
    hits = seen.get(key)
    if hits is None:  # per slot with a Varying somewhere: which of its values vary
        hits = seen[key] = varying_slots(block._slots, seen)
    return bool(block.varying_positions(hits))


def varying_slots(slots: Sequence, seen: dict) -> dict[int, tuple[Any, set[int]]]:
    """Position -> (slot, indices of its values that vary) of each step table slot holding a
    ``Varying`` (a slot is one instruction, its index 0, or a builder's per-device table)."""
    hits = {}
    for i, slot in enumerate(slots):
        values = (slot,) if isinstance(slot, Instr) else slot.values
        vary = {k for k, ins in enumerate(values) if varies(ins, seen)}
        if vary:
            hits[i] = (slot, vary)
    return hits


def resolved(ins: Instr, device: int) -> Instr:
    """``device``'s own copy of ``ins``: each ``Varying`` field its value for the device, in the
    blocks of a control instruction too (``ins`` itself where nothing varies)."""
    if ins.kind == "loop":
        return replace(ins, body=_resolved_block(ins.body, device))
    if ins.kind == "while":
        return replace(ins, cond=_resolved_block(ins.cond, device), body=_resolved_block(ins.body, device))
    if ins.kind == "switch":
        return replace(ins, branches=tuple(_resolved_block(b, device) for b in ins.branches))
    changes = {n: v.of(device) for n, v in varying_fields(ins)}
    return replace(ins, **changes) if changes else ins


def _resolved_block(block, device: int) -> tuple[Instr, ...]:
    return tuple(resolved(b, device) if varies(b) else b for b in block)


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
        return _pair_members(tuple(instr.pairs))
    return instr.group if isinstance(instr.group, tuple) else tuple(instr.group)


@functools.lru_cache(maxsize=4096)
def _pair_members(pairs: tuple) -> tuple[int, ...]:
    return tuple(dict.fromkeys(d for pair in pairs for d in pair))


INSTRUCTIONS: dict[str, type[Instr]] = {
    c.kind: c
    for c in (Compute, Literal, Slice, Pad, Free, AllGather, ReduceScatter, AllReduce, AllToAll, CollectivePermute, Loop,
              While, Switch)
}


@dataclass(frozen=True)
class Schedule:
    """One device's program: where its inputs go, its instructions, where its outputs are."""

    device: int
    inputs: tuple[int, ...]  # buffer of each program input's local shard
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]  # buffer of each program output's local shard

    def pretty(self) -> str:
        lines = [f"schedule(device {self.device}) inputs -> {', '.join(f'b{b}' for b in self.inputs)}"]
        for ins in self.instrs:
            body = ", ".join(f"{f.name}={_show(getattr(ins, f.name))}" for f in fields(ins) if f.name not in ("id", "source"))
            lines.append(f"  [{ins.id}] {ins.kind}({body})  # {ins.source}")
        lines.append(f"  return {', '.join(f'b{b}' for b in self.outputs)}")
        return "\n".join(lines)

    # -- serialization ---------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        return msgpack.packb(_encode(self._as_data()), use_bin_type=True)

    @staticmethod
    def from_bytes(data: bytes) -> "Schedule":
        d = _decode(msgpack.unpackb(data, raw=False, strict_map_key=False))
        instrs = tuple(INSTRUCTIONS[i.pop("kind")](**i) for i in d["instrs"])
        return Schedule(d["device"], d["inputs"], instrs, d["outputs"])

    def _as_data(self) -> dict:
        instrs = [{"kind": i.kind, **{f.name: getattr(i, f.name) for f in fields(i)}} for i in self.instrs]
        return {"device": self.device, "inputs": self.inputs, "instrs": instrs, "outputs": self.outputs}


class Instructions(Sequence):
    """One device's (or one class of devices') instruction list, read from the schedule's step
    table where it is read: position ``i`` is the step's one instruction, or the class's value of
    a per-device step. Partitioning writes the table once for the whole mesh; a device's own list
    is made only when something walks it whole (an executor, serialisation), its ``Varying``
    fields resolved for ``device`` (positions ``varying``); the estimate reads a class's list
    position by position (``shared``) without making it. Compares, hashes and pickles as the
    tuple it stands for."""

    __slots__ = ("_slots", "_row", "_made", "device", "varying")

    def __init__(self, slots: tuple, row: int, device: int | None = None, varying: frozenset = frozenset()):
        self._slots, self._row, self._made = slots, row, None  # slots: Instr | PerDevice (builder)
        self.device, self.varying = device, varying

    @property
    def klass(self) -> tuple[int, int]:
        """Which class's list this is: devices with equal ``klass`` run the same table row."""
        return id(self._slots), self._row

    def own(self, device: int, varying: frozenset) -> "Instructions":
        """``device``'s list of this class's, its ``Varying`` fields (at positions ``varying``) resolved."""
        return Instructions(self._slots, self._row, device, varying)

    def varying_positions(self, hits: dict) -> frozenset:
        """The positions where this class's instruction varies, of a table's ``varying_slots``."""
        row = self._row
        return frozenset(i for i, (slot, vary) in hits.items()
                         if (0 if isinstance(slot, Instr) else int(slot.codes[row])) in vary)

    def __len__(self) -> int:
        return len(self._slots)

    def shared(self, i: int) -> Instr:
        """Position ``i`` as the class holds it (``Varying`` fields unresolved)."""
        slot = self._slots[i]
        return slot if isinstance(slot, Instr) else slot.values[slot.codes[self._row]]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.made()[i]
        if self.varying:
            return self.made()[i]
        return self.shared(i)

    def made(self) -> tuple[Instr, ...]:
        """The list as a tuple (made once)."""
        if self._made is None:
            row = self._row
            made = tuple(s if isinstance(s, Instr) else s.values[s.codes[row]] for s in self._slots)
            if self.varying:
                made = tuple(resolved(ins, self.device) if i in self.varying else ins for i, ins in enumerate(made))
            self._made = made
        return self._made

    def __iter__(self) -> Iterator[Instr]:
        return iter(self.made())

    def __eq__(self, other) -> bool:
        if isinstance(other, (tuple, Instructions)):
            return self.made() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.made())

    def __reduce__(self):
        return (tuple, (self.made(),))

    def __repr__(self) -> str:
        return f"Instructions({len(self)} steps)"


def _show(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, tuple) and len(v) > 8:
        return f"({', '.join(map(str, v[:8]))}, ...{len(v)})"
    return str(v)


# msgpack keeps lists, dicts, ints, floats, str and bytes; everything else is tagged so that it
# comes back as the same type (tuples stay tuples, numpy scalars stay numpy scalars).
def _encode(v):
    from ..sharding.dims import Sharding

    if isinstance(v, (tuple, Instructions)):
        return {"__tuple__": [_encode(x) for x in v]}
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {k: _encode(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return {"__ndarray__": v.tobytes(), "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, np.generic):
        return {"__scalar__": np.asarray(v).tobytes(), "dtype": v.dtype.str}
    if isinstance(v, np.dtype):
        return {"__dtype__": v.str}
    if isinstance(v, range):
        return {"__range__": [v.start, v.stop, v.step]}
    if isinstance(v, Sharding):
        return {"__sharding__": str(v), "mesh": str(v.mesh)}
    if isinstance(v, Instr):  # a loop's body
        return {"__instr__": v.kind, "fields": {f.name: _encode(getattr(v, f.name)) for f in fields(v)}}
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    raise TypeError(f"a schedule holds plain data only; cannot serialize {type(v).__name__}")


def _decode(v):
    if isinstance(v, list):
        return [_decode(x) for x in v]
    if isinstance(v, dict):
        if "__tuple__" in v:
            return tuple(_decode(x) for x in v["__tuple__"])
        if "__ndarray__" in v:
            return np.frombuffer(v["__ndarray__"], dtype=np.dtype(v["dtype"])).reshape(v["shape"]).copy()
        if "__scalar__" in v:
            return np.frombuffer(v["__scalar__"], dtype=np.dtype(v["dtype"]))[0]
        if "__dtype__" in v:
            return np.dtype(v["__dtype__"])
        if "__range__" in v:
            return range(*v["__range__"])
        if "__instr__" in v:
            return INSTRUCTIONS[v["__instr__"]](**{k: _decode(x) for k, x in v["fields"].items()})
        if "__sharding__" in v:
            from ..sharding.mesh import Mesh
            from ..sharding.dims import Sharding

            mesh = Mesh.parse(v["mesh"])
            return Sharding.parse(v["__sharding__"], mesh)
        return {k: _decode(x) for k, x in v.items()}
    return v


@dataclass(frozen=True)
class Checkpoint:
    """Where one program value lives right after the op producing it has run: buffer ``buf`` on
    every device (buffer numbers are the same on all devices), laid out as ``sharding`` (with its
    unreduced axes when the value is still a pending reduction). ``eqn`` indexes
    ``program.eqns`` and ``output`` that eqn's outputs; ``source`` names the op as instructions do
    (``"%5 dot_general"``). ``reassociated``: mesh axes over which a sum-like reduction of this op
    was sharded (its float additions then run in another order than in the op run whole)."""

    eqn: int
    output: int
    buf: int
    sharding: Any
    source: str
    reassociated: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpmdProgram:
    """The partitioned program: one Schedule per device, and how inputs / outputs are laid out.
    ``checkpoints`` (driver side only, not part of any Schedule): one ``Checkpoint`` per output
    of each top-level program op, for op-by-op verification (``simshard.report.opcheck``)."""

    program: Any  # the propagated Program it was partitioned from
    schedules: tuple[Schedule, ...]
    in_shardings: tuple[Any, ...]  # Sharding of each program input (how the driver scatters it)
    out_shardings: tuple[Any, ...]  # Sharding of each output as the schedules leave it
    checkpoints: tuple[Checkpoint, ...] = ()

    @property
    def checkpoint_buffers(self) -> frozenset[int]:
        """The buffers an executor keeps copies of when asked to trace values."""
        return frozenset(c.buf for c in self.checkpoints)

    def schedule(self, device: int) -> Schedule:
        for s in self.schedules:
            if s.device == device:
                return s
        raise KeyError(f"no schedule for device {device}")

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(s.device for s in self.schedules)
