"""A program's cost without data: every device's schedule walked on shapes and dtypes alone.

``estimate`` traces, propagates and partitions ``f`` as ``ss.run`` does (its arguments may be
``ShapeDtype``s), then ``estimate_spmd`` walks the schedules in SPMD lockstep, a buffer being only
its ``Block`` (shape, dtype): a compute instruction's result comes from its op's ``abstract_eval``
on the local operands, a collective's from its members' blocks. What it records is what an
executed run records, field for field: the communication records of the direct collective
algorithms (``runtime/collectives.py``: the same messages, empty chunks not sent, the same
per-peer bytes) and each device's live bytes and peak (``runtime/executor.py``'s accounting).
``tests/report/test_estimate.py`` holds the two equal over the programs library.

With a ``Topology`` it adds the alpha-beta time (``CommReport.estimate``). A ``while_loop`` (its
trip count is data) and a ``cond`` / ``switch`` (its branch is data) cannot be walked without
data: they are refused, naming the op.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..ir.program import Aval
from ..ops.registry import OPS
from ..partition.schedule import (Instr, Instructions, SpmdProgram, Varying, participants, resolved, updates_in_place,
                                  varying_fields)
from ..sharding.layout import layout
from ..sharding.rows import rows_of
from .collective_cost import (NO_COST, AllToAllGroup, all_gather_cost, all_reduce_cost, all_to_all_cost,
                              collective_permute_costs, reduce_scatter_cost)
from .comm import CommRecord, CommReport, Repeat, TimeEstimate, analytic_min_bytes
from .compute import DeviceCompute, device_of, op_flops
from .dispatch import COLLECTIVE_KINDS, dispatch_table
from .ledger import MemoryLedger
from .memory import DeviceMemory, MemoryReport
from .topology import Topology


class EstimateError(ValueError):
    """A schedule the estimate cannot walk without data (named: the instruction and its op)."""


@dataclass(frozen=True)
class Block:
    """A buffer as the estimate knows it: its local shape and dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int = field(init=False, compare=False, repr=False)  # computed once: the walk asks often

    def __post_init__(self):
        object.__setattr__(self, "nbytes", math.prod(self.shape) * self.dtype.itemsize)

    def per_index(self, axis: int) -> int:
        """Bytes of one index along dim ``axis`` (a slice of the block one element thick)."""
        return self.nbytes // self.shape[axis] if self.shape[axis] else 0

    def along(self, axis: int, length: int) -> "Block":
        """This block with dim ``axis`` cut (or grown) to ``length``."""
        return Block(self.shape[:axis] + (int(length),) + self.shape[axis + 1:], self.dtype)


@dataclass(frozen=True)
class Estimate:
    """What a run would record, without running: ``comm`` and ``memory`` as an executed run's,
    ``time`` under ``topology`` (None without one)."""

    comm: CommReport
    memory: MemoryReport
    spmd: SpmdProgram
    topology: Topology | None = None
    compute: tuple[DeviceCompute, ...] = ()  # per device: its local ops' FLOPs and bytes

    @property
    def time(self) -> TimeEstimate | None:
        return None if self.topology is None else self.comm.estimate(self.topology)

    def compute_seconds(self, device=None) -> float:
        """The slowest device's compute time on ``device`` (a DeviceSpec or class name; default the
        topology's), its ops one after another on the roofline (``report/compute.py``)."""
        spec = device_of(device if device is not None else self._topology_device())
        return max((c.seconds(spec) for c in self.compute), default=0.0)

    def step_seconds(self) -> float:
        """Compute then communication, nothing overlapped: the slowest device's compute plus the
        collectives' alpha-beta time, under the topology (which must name a device)."""
        return self.compute_seconds() + self.time.total

    def _topology_device(self):
        if self.topology is None or self.topology.device is None:
            raise ValueError("a compute time needs a device: give topology=Topology(..., device='h100') or device=")
        return self.topology.device

    @property
    def program(self):
        return self.spmd.program


def estimate(f, *args, mesh=None, in_shardings=None, out_shardings=None, static_argnums: Sequence[int] = (),
             strategy: str = "user_priority", topology: Topology | None = None) -> Estimate:
    """The communication and memory ``ss.run(f, *args, ...)`` would record, and the alpha-beta
    time under ``topology``, without data and without executing: ``args`` may be ``ShapeDtype``s
    (or arrays, of which only the shape and dtype are read)."""
    import optree

    from ..partition import partition
    from ..propagate.prepare import prepare
    from ..tracing.tracer import ShapeDtype

    def abstract(a):
        return ShapeDtype(a.shape, a.dtype) if isinstance(a, np.ndarray) else a

    program, _ = prepare(f, *optree.tree_map(abstract, args), mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings,
                         static_argnums=static_argnums, strategy=strategy)
    spmd = partition(program)
    return estimate_spmd(spmd, topology=topology)


def estimate_spmd(spmd: SpmdProgram, input_blocks: Mapping[int, Sequence[Block]] | None = None,
                  topology: Topology | None = None) -> Estimate:
    """Walk ``spmd``'s schedules on blocks. ``input_blocks`` (device -> its input blocks) default
    to the local shapes of the program's inputs under ``spmd.in_shardings``."""
    if input_blocks is None:
        input_blocks = _input_blocks(spmd)
    devices, classes, lists = {}, {}, {}
    for s in spmd.schedules:
        blocks = tuple(input_blocks[s.device])
        # the same instructions on the same inputs: one class (devices whose lists differ only in
        # Varying fields, a collective's groups, share a class list and resolve per member)
        which = s.instrs.klass if isinstance(s.instrs, Instructions) else id(s.instrs)
        key = (which, s.inputs, blocks)
        if key not in classes:
            state = _State()
            state.start(s.inputs, blocks)
            classes[key] = []
            lists[s.device] = s.instrs
        else:
            state = devices[classes[key][0]].state
        classes[key].append(s.device)
        devices[s.device] = _Device(s.device, state)
    _walk(devices, list(classes.values()), lists, top=True)
    records = tuple(r for d in spmd.devices for r in devices[d].records)  # CommRecords and Repeats
    memory = MemoryReport(tuple(devices[d].memory() for d in spmd.devices))
    compute = tuple(DeviceCompute.of(d, devices[d].state.ops) for d in spmd.devices)
    return Estimate(CommReport(items=records), memory, spmd, topology, compute)


def _input_blocks(spmd: SpmdProgram) -> dict[int, list[Block]]:
    avals = [v.aval for v in spmd.program.inputs] if spmd.program is not None else None
    if avals is None:
        raise EstimateError("estimate_spmd needs input_blocks for a schedule without its program")
    out: dict[int, list[Block]] = {d: [] for d in spmd.devices}
    for aval, spec in zip(avals, spmd.in_shardings):
        dtype = np.dtype(aval.dtype)
        lay = None if spec is None else layout(spec, aval.shape)
        for d in spmd.devices:
            out[d].append(Block(tuple(aval.shape) if lay is None else tuple(lay.local_shape(d)), dtype))
    return out


class _State:
    """Buffers as blocks and the executor's memory accounting over them (a ``MemoryLedger``): of
    one device, or of every device of a class (devices that ran the same instruction objects on
    the same blocks so far hold equal buffers, so they share one state until an instruction sets
    them apart)."""

    def __init__(self):
        self.ledger: MemoryLedger[Block] = MemoryLedger()
        self.buffers = self.ledger.buffers
        self.position = -1
        self.top: Instr | None = None  # the top-level instruction running (a loop, for its body)
        self.ops: Counter = Counter()  # (FLOPs, bytes) of each local op run -> how many times

    @property
    def live(self) -> int:
        return self.ledger.live

    def fork(self) -> "_State":
        out = object.__new__(_State)
        out.ledger = self.ledger.copy()
        out.buffers = out.ledger.buffers
        out.position, out.top, out.ops = self.position, self.top, Counter(self.ops)
        return out

    def start(self, inputs: Sequence[int], blocks: Sequence[Block]) -> None:
        self.write(list(zip(inputs, blocks)))
        self.ledger.inputs_placed()

    def read(self, buf: int, ins: Instr, device) -> Block:
        try:
            return self.buffers[buf]
        except KeyError:
            raise EstimateError(f"device {device}: [{ins.id}] {ins.kind} from {ins.source!r} reads buffer "
                                f"b{buf}, which it does not hold") from None

    def write(self, outs: Sequence[tuple[int, Block]]) -> None:
        self.ledger.write(outs, self.position, self.top)

    def write_one(self, buf: int, block: Block) -> None:
        self.ledger.write_one(buf, block, self.position, self.top)

    def free(self, bufs: Sequence[int]) -> None:
        for k in bufs:
            self.ledger.free(k)


class _Device:
    """One device: its state (maybe shared with its class) and its own communication records."""

    def __init__(self, device: int, state: _State):
        self.device = device
        self.state = state
        self.records: list[CommRecord | Repeat] = []  # in the order they ran

    def memory(self) -> DeviceMemory:
        return self.state.ledger.memory(self.device)


def _split(devices: dict[int, _Device], members: list[int], key) -> list[list[int]]:
    """Members of one class grouped by ``key(device)``; every group but the first gets a copy of
    the state (they are about to diverge)."""
    groups: dict = {}
    for d in members:
        groups.setdefault(key(d), []).append(d)
    parts = list(groups.values())
    for part in parts[1:]:
        state = devices[part[0]].state.fork()
        for d in part:
            devices[d].state = state
    return parts


def _regroup(devices: dict[int, _Device], classes: list[list[int]], lists: dict[int, Sequence[Instr]],
             c: list[int], key) -> list[list[int]]:
    """Class ``c`` split by ``key(device)`` (``_split``), ``classes`` and ``lists`` updated: each
    part runs on in ``c``'s list."""
    parts = _split(devices, c, key)
    if len(parts) > 1:
        classes.remove(c)
        classes.extend(parts)
        for part in parts:
            lists[part[0]] = lists[c[0]]
    return parts


def _walk(devices: dict[int, _Device], classes: list[list[int]], lists: dict[int, Sequence[Instr]],
          top: bool = False, memo: dict | None = None) -> None:
    """Run the aligned instruction lists one SPMD step at a time, a class of devices at a time.
    ``classes`` lists the devices sharing a state (and its first member's instruction list in
    ``lists``, which all of them run): local steps run once per class, collectives per member,
    splitting a class where its members receive different blocks (``classes`` and ``lists`` are
    updated in place). ``memo`` keeps each compute's result blocks by (instruction, operand
    blocks): a mesh of thousands evaluates each distinct local shape once."""
    memo = {} if memo is None else memo
    n = len(lists[classes[0][0]]) if classes else 0
    for pos in range(n):
        here = {c[0]: _at(lists[c[0]], pos) for c in classes}
        if top:
            for c in classes:
                st = devices[c[0]].state
                st.position, st.top = pos, here[c[0]]
        first = here[classes[0][0]]
        STEPS[first.kind](devices, classes, here, lists, memo)


def _locals(devices: dict[int, _Device], classes: list[list[int]], here: Mapping[int, Instr],
            lists: dict[int, Sequence[Instr]], memo: dict) -> None:
    """A local step: once per class (per member where a ``Varying`` field sets them apart)."""
    for c in list(classes):
        ins = here[c[0]]
        if _tables(ins, memo):  # a slice's or literal's Varying field: members may get different blocks
            _local_varying(devices, classes, lists, c, ins, memo)
        else:
            _local(devices[c[0]], ins, memo)


def _loop_step(devices: dict[int, _Device], classes: list[list[int]], here: Mapping[int, Instr],
               lists: dict[int, Sequence[Instr]], memo: dict) -> None:
    """A scan (``_loop``); a class its body's collectives split runs on in its origin's list."""
    origin = {d: c[0] for c in classes for d in c}
    _loop(devices, classes, here, memo)
    for c in classes:
        if c[0] not in lists:
            lists[c[0]] = lists[origin[c[0]]]


def _refuse(devices: dict[int, _Device], classes: list[list[int]], here: Mapping[int, Instr],
            lists: dict[int, Sequence[Instr]], memo: dict) -> None:
    """A while loop or a switch: what it runs depends on data the estimate does not have."""
    first = here[classes[0][0]]
    what = "its trip count" if first.kind == "while" else "the branch it takes"
    raise EstimateError(f"[{first.id}] {first.kind} from {first.source!r}: {what} depends on the data, which "
                        "an estimate does not have; run the program (ss.run) to cost it")


def _local_varying(devices: dict[int, _Device], classes: list[list[int]], lists: dict[int, Sequence[Instr]],
                   c: list[int], ins: Instr, memo: dict) -> None:
    """A local instruction with ``Varying`` fields on class ``c``: each member runs its own copy;
    members whose copies make equal blocks keep sharing a state, and the class splits where they
    do not (as a collective splits it)."""
    tables = _tables(ins, memo)
    if len(c) == 1:  # a class of one (a strategy that sets every device apart): its own copy
        d = c[0]
        _local(devices[d], _own(ins, tuple(t.code(d) for t in tables), d, memo), memo)
        return
    members = np.asarray(c, dtype=np.int64)
    codes = np.stack([t.codes[rows_of(t.ids, members)] for t in tables], axis=1)  # [members, tables]
    distinct, first, inverse = np.unique(codes, axis=0, return_index=True, return_inverse=True)
    copies = [_own(ins, tuple(row), members[i], memo) for row, i in zip(distinct.tolist(), first.tolist())]
    copy_of = dict(zip(c, (copies[k] for k in inverse.reshape(-1).tolist())))
    parts = _regroup(devices, classes, lists, c, lambda d: _made_block(copy_of[d])) if len(copies) > 1 else [c]
    for part in parts:
        _local(devices[part[0]], copy_of[part[0]], memo)


def _own(ins: Instr, codes: tuple, device: int, memo: dict) -> Instr:
    """The copy of ``ins`` the devices with ``codes`` in its Varying fields run (made once)."""
    key = ("own", id(ins), codes)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = resolved(ins, int(device))
        _keep(memo, ins)
    return hit


def _keep(memo: dict, ins: Instr) -> None:
    """Keep ``ins`` alive while ``memo`` has entries under its id (a loop iteration's copies are
    made and dropped, and a later object could otherwise take a dropped one's id)."""
    memo.setdefault("alive", []).append(ins)


def _made_block(ins: Instr) -> tuple:
    """What decides the block a slice or literal writes (its shape and, for a literal, dtype)."""
    if ins.kind == "slice":
        return tuple(len(ix) for ix in ins.index)
    if ins.kind == "literal":
        v = np.asarray(ins.value)
        return v.shape, v.dtype.str
    raise EstimateError(f"[{ins.id}] {ins.kind} from {ins.source!r}: no estimate for a per-device {ins.kind}")


def _tables(ins: Instr, memo: dict) -> tuple[Varying, ...]:
    """An instruction's ``Varying`` fields (a collective's groups, a slice's positions, ...),
    looked up once per instruction object."""
    key = ("tables", id(ins))
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = tuple(v for _, v in varying_fields(ins))
        _keep(memo, ins)
    return hit


def _at(instrs: Sequence[Instr], pos: int) -> Instr:
    """Position ``pos`` of a class's list as the class holds it (a collective's ``Varying`` groups
    unresolved: its members resolve their own)."""
    return instrs.shared(pos) if isinstance(instrs, Instructions) else instrs[pos]


def _loop(devices: dict[int, _Device], classes: list[list[int]], here: Mapping[int, Instr], memo: dict) -> None:
    """A scan's iterations. Its carries keep their shapes, so an iteration that leaves every
    device's buffers as it found them is the same for every later one: walked once, its records
    repeated under each iteration's ids (a 96-layer scan costs one layer's walk). The counter is
    written for every iteration as the executor writes it, so the memory peak stays exact."""
    loops = {d: here[c[0]] for c in classes for d in c}  # each device's Loop (its class's)
    length = next(iter(here.values())).length
    counter = Block((), np.dtype(np.int32))

    def count() -> None:  # the loop writes its step number before each iteration
        for c in classes:
            devices[c[0]].state.write([(loops[c[0]].counter, counter)])

    def walk(k: int) -> None:
        _walk(devices, classes, {c[0]: loops[c[0]].iteration(k) for c in classes}, memo=memo)

    if not length:
        return
    count()  # before the snapshot: the counter is in every iteration's buffers
    snap = {id(devices[c[0]].state): (dict(devices[c[0]].state.buffers), devices[c[0]].state.live,
                                      Counter(devices[c[0]].state.ops)) for c in classes}
    before = {d: (snap[id(devices[d].state)], len(devices[d].records)) for d in loops}
    walk(0)
    if all((devices[d].state.buffers, devices[d].state.live) == before[d][0][:2] for d in loops):
        # every later iteration repeats the first: its counter, its local work, its records
        marks = {d: (before[d][1], len(devices[d].records)) for d in loops}
        ran = {c[0]: devices[c[0]].state.ops - before[c[0]][0][2] for c in classes}  # one iteration's ops
        _repeat(devices, classes, loops, range(1, length), counter, ran, marks)
        return
    for k in range(1, length):
        count()
        walk(k)


def _repeat(devices: dict[int, _Device], classes: list[list[int]], loops: Mapping[int, Instr], iterations: range,
            counter: Block, ran: Mapping[int, Counter], marks: Mapping[int, tuple[int, int]]) -> None:
    """Iterations ``iterations`` of a scan whose first iteration left every buffer as it found it:
    each writes its counter, does the first iteration's local work, and records its collectives
    under its own ids: one ``Repeat`` of the first iteration's records per device, which the
    report weighs rather than copies (a 7B step on 8,192 devices would copy 1.5 million)."""
    for c in classes:
        st = devices[c[0]].state
        for _ in iterations:
            st.write([(loops[c[0]].counter, counter)])
        for work, n in ran[c[0]].items():
            st.ops[work] += n * len(iterations)
    shifts: dict[int, tuple[int, ...]] = {}  # per class's loop: the later iterations' id shifts
    for d, loop in loops.items():
        records = devices[d].records
        first = tuple(records[marks[d][0]:marks[d][1]])
        if first:
            if id(loop) not in shifts:
                shifts[id(loop)] = tuple(k * loop.stride for k in iterations)
            records.append(Repeat(first, shifts[id(loop)]))


@functools.lru_cache(maxsize=65536)
def _block(shape: tuple[int, ...], dtype: np.dtype) -> Block:
    """One Block per shape and dtype (a mesh of thousands slices the same shapes over and over)."""
    return Block(shape, dtype)


def _local(dev: _Device, ins: Instr, memo: dict) -> None:
    """A local instruction on one class's state."""
    run = _LOCAL_RUNS.get(ins.kind)
    if run is None:
        raise EstimateError(f"[{ins.id}] {ins.kind} from {ins.source!r}: no estimate for this instruction kind")
    run(dev.state, dev.device, ins, memo)


def _compute(st: _State, me: int, ins: Instr, memo: dict) -> None:
    blocks = tuple(st.read(k, ins, me) for k in ins.inputs)
    by_id = (id(ins), blocks)
    out = memo.get(by_id)
    if out is None:  # devices may hold equal instructions as distinct objects: try by value
        try:
            by_value = (ins.op, ins.params, blocks)
            out = memo.get(by_value)
        except TypeError:  # a param that does not hash (an array): by identity only
            by_value = None
        if out is None:
            avals = OPS[ins.op].abstract_eval(*(Aval(b.shape, b.dtype) for b in blocks), **dict(ins.params))
            blocks_out = tuple(Block(tuple(a.shape), np.dtype(a.dtype)) for a in avals)
            work = (op_flops(ins.op, [b.shape for b in blocks], [b.shape for b in blocks_out], dict(ins.params)),
                    sum(b.nbytes for b in blocks) + sum(b.nbytes for b in blocks_out))
            out = (blocks_out, work)
            if by_value is not None:
                memo[by_value] = out
        memo[by_id] = out
        _keep(memo, ins)
    blocks_out, work = out
    st.ops[work] += 1
    if not updates_in_place(ins):  # in place: the buffer keeps its block, no new bytes
        if len(blocks_out) == 1:
            st.write_one(ins.outputs[0], blocks_out[0])
        else:
            st.write(list(zip(ins.outputs, blocks_out)))


def _literal(st: _State, me: int, ins: Instr, memo: dict) -> None:
    v = np.asarray(ins.value)
    st.write_one(ins.dst, _block(v.shape, v.dtype))


def _slice(st: _State, me: int, ins: Instr, memo: dict) -> None:
    src = st.read(ins.src, ins, me)
    st.write_one(ins.dst, _block(tuple(len(ix) for ix in ins.index), src.dtype))


def _pad(st: _State, me: int, ins: Instr, memo: dict) -> None:
    st.write_one(ins.dst, _block(tuple(int(s) for s in ins.shape), st.read(ins.src, ins, me).dtype))


def _free(st: _State, me: int, ins: Instr, memo: dict) -> None:
    st.free(ins.bufs)


_LOCAL_RUNS = {"compute": _compute, "literal": _literal, "slice": _slice, "pad": _pad, "free": _free}


# -- collectives: the direct algorithms' messages ----------------------------------------------------
#
# Each collective is costed once per group, then per member in O(1) (``collective_cost``): the
# same messages the runtime's direct algorithms send. Each function below takes
# ``(group, members, step, srcs, index)``: ``index`` maps a member to its position in the group,
# computed once per group for the costing and the records both, and returns each member's result
# block and cost.


def _collective(devices: dict[int, _Device], classes: list[list[int]], here: Mapping[int, Instr],
                lists: dict[int, Sequence[Instr]], memo: dict) -> None:
    kind = next(iter(here.values())).kind
    positions: dict[int, dict[int, int]] = {}  # per group (by identity): device -> its index

    def position(group) -> dict[int, int]:
        where = positions.get(id(group))
        if where is None:
            where = positions[id(group)] = {p: j for j, p in enumerate(group)}
        return where

    step: dict[int, Instr] = {}
    srcs: dict[int, Block | None] = {}
    for c in classes:  # a class runs one instruction on one state: its source block is read once
        ins = here[c[0]]
        block = devices[c[0]].state.read(ins.src, ins, c[0]) if kind != "collective_permute" else None
        tables = _tables(ins, memo)  # its members' groups: each resolves its own copy (one per group)
        for d in c:
            step[d] = _own(ins, tuple(t.code(d) for t in tables), d, memo) if tables else ins
            srcs[d] = block
    routes: dict[int, _Routes] = {}  # a permute's pairs indexed, once per distinct pairs tuple
    if kind == "collective_permute":
        for d, ins in step.items():
            if id(ins.pairs) not in routes:
                routes[id(ins.pairs)] = _Routes.of(ins.pairs)
            srcs[d] = devices[d].state.read(ins.src, ins, d) if d in routes[id(ins.pairs)].targets else None
        results = _collective_permute(step, srcs, routes)
    else:
        results = {}
        groups: dict[int, tuple[tuple, list[int]]] = {}  # by the group tuple's identity: members share it
        for d, ins in step.items():
            groups.setdefault(id(ins.group), (ins.group, []))[1].append(d)
        for group, members in groups.values():
            results.update(_COLLECTIVES[kind](tuple(group), members, step, srcs, position(group)))
    # each class writes its members' result once, split where members got different blocks
    for c in list(classes):
        parts = _regroup(devices, classes, lists, c, lambda d: results[d][0])
        for part in parts:
            devices[part[0]].state.write_one(step[part[0]].dst, results[part[0]][0])
    # each permute's participants once per pairs tuple (classes' copies of a loop iteration's
    # instruction share it), a group's members are its group
    members: dict[int, tuple] = {}
    for d, ins in step.items():
        dev = devices[d]
        out, traffic = results[d]
        key = id(ins.pairs) if kind == "collective_permute" else id(ins.group)
        if key not in members:
            members[key] = participants(ins)
        group = members[key]
        where = position(group)
        if d not in where:
            continue
        x = srcs[d]
        dev.records.append(CommRecord(
            device=d, instr=ins.id, position=dev.state.position, source=ins.source, kind=kind,
            axes=tuple(getattr(ins, "axes", ())), group=group, bytes_sent=traffic.bytes_sent,
            bytes_received=traffic.bytes_received, messages_sent=traffic.messages_sent,
            messages_received=traffic.messages_received,
            min_bytes=analytic_min_bytes(ins, d, x.shape if x is not None else (), out.shape, out.dtype.itemsize,
                                         where[d], routes[id(ins.pairs)].receivers if routes else None),
            peers=traffic.peers,
        ))


def _all_gather(group, members, step, srcs, index):
    axis = step[members[0]].axis % len(srcs[members[0]].shape)
    sizes = [srcs[p].nbytes for p in group]
    total = sum(sizes)
    out_len = sum(srcs[p].shape[axis] for p in group)
    return {me: (srcs[me].along(axis, out_len), all_gather_cost(group, index[me], sizes, total)) for me in members}


def _reduce_scatter(group, members, step, srcs, index):
    res = {}
    for me in members:
        ins, x = step[me], srcs[me]
        axis = ins.axis % len(x.shape)
        i = index[me]
        res[me] = (x.along(axis, ins.splits[i]), reduce_scatter_cost(group, i, ins.splits, x.per_index(axis)))
    return res


def _all_reduce(group, members, step, srcs, index):
    return {me: (srcs[me], all_reduce_cost(group, index[me], math.prod(srcs[me].shape), srcs[me].dtype.itemsize))
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
        res[me] = (x.along(split_axis, ins.splits[i]).along(axis, length), all_to_all_cost(group, i, sums))
    return res


@dataclass(frozen=True)
class _Routes:
    """A permute's pairs indexed: where each device sends, who sends to each, and the devices
    another device sends to."""

    targets: dict  # source -> its targets, in pair order
    sources: dict  # target -> its sources, in pair order
    receivers: frozenset

    @staticmethod
    def of(pairs) -> "_Routes":
        targets: dict[int, list[int]] = {}
        sources: dict[int, list[int]] = {}
        for s, t in pairs:
            targets.setdefault(s, []).append(t)
            sources.setdefault(t, []).append(s)
        return _Routes(targets, sources, frozenset(t for s, t in pairs if s != t))


def _collective_permute(step, srcs, routes):
    targets = {me: routes[id(ins.pairs)].targets.get(me, ()) for me, ins in step.items()}
    costs = collective_permute_costs({me: t for me, t in targets.items() if t},
                                     {me: srcs[me].nbytes for me, t in targets.items() if t})
    res = {}
    for me, ins in step.items():
        sources = routes[id(ins.pairs)].sources.get(me)
        out = srcs[sources[0]] if sources else Block(tuple(int(n) for n in ins.shape), np.dtype(ins.dtype))
        res[me] = (out, costs.get(me, NO_COST))
    return res


_COLLECTIVES = {"all_gather": _all_gather, "reduce_scatter": _reduce_scatter, "all_reduce": _all_reduce,
                "all_to_all": _all_to_all}

# each instruction kind's SPMD step, (devices, classes, here, lists, memo) -> None
STEPS = dispatch_table({
    **{kind: _locals for kind in _LOCAL_RUNS},
    **{kind: _collective for kind in COLLECTIVE_KINDS},
    "loop": _loop_step, "while": _refuse, "switch": _refuse,
}, "simshard/report/estimate")

__all__ = ["Block", "Estimate", "EstimateError", "estimate", "estimate_spmd"]
