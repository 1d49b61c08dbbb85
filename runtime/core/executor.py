"""Run one device's Schedule over a transport.

``Executor(schedule, transport).run(inputs)`` (async) holds the device's numbered buffers, runs
each instruction in order and returns the buffers the schedule names as outputs:

* ``Compute``: ``OPS[op].kernel(*inputs, **params)`` (a tuple, one array per output buffer;
  ``compute_steps.py``), a heavy contraction on a thread where ``kernels`` is given (the
  process's ``KernelThreads``: devices sharing a process compute at once, ``kernel_threads.py``);
* ``Literal``: a copy of the constant; ``Slice``: the listed local positions per dim;
  ``Pad``: pad at the end of each dim to ``shape`` with ``value``; ``Free``: drop buffers;
* collectives: ``collectives.run_collective`` over a ``Channel`` keyed by the instruction id.

Along the way it records each collective's ``CommRecord`` fields (``records.py``) and keeps a
``MemoryLedger`` (with a ``capacity`` the run fails like a real out-of-memory). Every failure is
an ``ExecutionError`` naming the device, the instruction's position, id, kind and op; transport
failures become ``ScheduleMismatchError``s naming both devices and where each was (``diagnosis.py``).

What a schedule must satisfy (the partitioner's side of the contract):

* inputs arrive as the layout's unpadded local shards (``layout(in_sharding, shape).shard(x)``,
  see ``placement.shard_inputs``) and outputs must leave with the layout's local shapes, padding
  sliced off (``Execution.assemble`` checks them against ``out_shardings``);
* peers match a collective by its instruction id: within one schedule collective ids are unique,
  and every member of a group runs, under that id, the same kind with the same group tuple (same
  order: it is both the concatenation and the reduction order) and parameters, on buffers of one
  dtype (all-reduce: one shape too). Non-collective instructions may differ between devices;
* all-gather blocks may differ in length along ``axis`` only; reduce-scatter and all-to-all need
  ``sum(splits) == src.shape[axis]`` on every member (empty chunks are fine); a permute's target
  appears in at most one pair, a source may feed several, every device that runs it writes
  ``dst`` (zeros of ``shape`` / ``dtype`` where nothing arrives, so set ``dtype``);
* ``Literal`` values are copied with ``np.array(value)``: a Python float becomes float64, so give
  numpy scalars of the intended dtype; ``Pad`` casts ``value`` to the buffer's dtype;
* memory: an instruction's outputs count while its inputs are live, a buffer overwritten under the
  same id is released after the instruction (except a ``dynamic_update_slice`` into its operand's
  own buffer, a scan's stacked output: written in place, no new bytes: ``updates_in_place``),
  ``Free`` releases at once (freeing a buffer the device does not hold is an error; so is reading
  one);
* ``trace``: buffer numbers whose first contents the executor copies into ``traced`` (for op-by-op
  verification; the copies are not counted as device memory);
* each collective's record carries ``source`` and ``axes`` for the report's per-op and per-axis
  tables: name the op consistently (``"%5 dot_general"``) and set ``axes``.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Sequence

import numpy as np

from simshard.report.comm import CommRecord
from simshard.report.ledger import MemoryLedger, OverCapacity
from simshard.report.memory import DeviceMemory
from simshard.spmd import Instr, Schedule
from simshard.spmd.dispatch import COLLECTIVE_KINDS, dispatch_table
from simshard.units import fmt_bytes

from ..errors import CollectiveError, DeviceOutOfMemoryError, ExecutionError
from .collectives import Channel, check_algorithm, signature
from .collectives.prepared import Prepared, at
from .compute_steps import ComputeSteps
from .diagnosis import Span, describe, schedule_error, spans_of
from .kernel_threads import KernelThreads
from .local_moves import OutOfBlock, pad_to, take
from .records import record_rows
from .transport import Transport
from .transport_errors import TransportError


class Step(NamedTuple):
    """How the executor runs one instruction kind: its method, and whether that waits for peers
    (a coroutine, awaited) or runs at once (a plain call, no coroutine of its own)."""

    run: Callable
    waits: bool


class Executor(ComputeSteps):
    """One device running its Schedule (see the module docstring)."""

    def __init__(self, schedule: Schedule, transport: Transport, *, capacity: int | None = None,
                 algorithm: str = "direct", describe_peer: Callable[[int], str] | None = None,
                 trace: frozenset[int] = frozenset(), kernels: KernelThreads | None = None,
                 prepared: Prepared | None = None):
        self.schedule = schedule
        self.device = schedule.device
        self.transport = transport
        self.capacity = capacity
        check_algorithm(algorithm)  # before anything runs, collectives or not
        self.algorithm = algorithm
        self.describe_peer = describe_peer
        self.ledger: MemoryLedger[np.ndarray] = MemoryLedger()  # the buffers held, live bytes, peak
        self.buffers = self.ledger.buffers  # buffer number -> its array (the ledger's own dict)
        self.trace = frozenset(trace)
        # what each collective instruction alone decides, kept across runs where the caller keeps it
        self.prepared = Prepared(self.device) if prepared is None else prepared
        if kernels is not None:  # a device sharing its process: heavy contractions on a thread
            self.kernels, self.STEPS = kernels, THREADED_STEPS
        self.traced: dict[int, np.ndarray] = {}  # buffer -> a copy of what was first written to it
        self.position = -1
        self.state = "not started"
        self.ran: list[tuple] = []  # ``Ran`` fields of each collective run, in the order run
        self.spans: list[tuple] = []  # (position, start, end) per instruction run (``timeline``)

    # -- where am I ------------------------------------------------------------------------------
    @property
    def instr(self) -> Instr | None:
        if 0 <= self.position < len(self.schedule.instrs):
            return self.schedule.instrs[self.position]
        return None

    def where(self) -> str:
        """A readable description of this device's progress, for error messages."""
        if self.state == "finished":
            return f"finished (all {len(self.schedule.instrs)} instructions)"
        if self.state == "not started":
            return "not started"
        ins = self.instr
        if ins is None:
            return "placing its inputs"
        return f"at position {self.position} {describe(ins)}"

    def _fail(self, cls, message: str, cause: BaseException | None = None, **kw) -> ExecutionError:
        ins = self.instr
        return cls(
            message, device=self.device, position=self.position, instr=None if ins is None else ins.id,
            source="" if ins is None else ins.source, **kw,
        )

    def _peer(self, device: int) -> str:
        if self.describe_peer is None:
            return "(its position is not known here)"
        return self.describe_peer(device)

    # -- buffers and memory --------------------------------------------------------------------
    def _read(self, buf: int) -> np.ndarray:
        try:
            return self.buffers[buf]
        except KeyError:
            raise self._fail(
                ExecutionError,
                f"device {self.device} {self.where()}: reads buffer b{buf}, which it does not hold "
                f"(held: {', '.join(f'b{b}' for b in sorted(self.buffers)) or 'none'})",
            ) from None

    @property
    def live_bytes(self) -> int:
        """Bytes of the buffers this device holds now."""
        return self.ledger.live

    @property
    def input_bytes(self) -> int:
        """Bytes of this device's inputs, once placed."""
        return self.ledger.input_bytes

    def _write(self, outs: Sequence[tuple[int, np.ndarray]]) -> None:
        ids = [b for b, _ in outs]
        if len(set(ids)) != len(ids):
            raise self._fail(ExecutionError, f"device {self.device} {self.where()}: writes buffer(s) {ids} more than once")
        outs = [(b, np.asarray(a)) for b, a in outs]
        try:
            self.ledger.write(outs, self.capacity)
        except OverCapacity as e:
            raise self._out_of_memory(e) from None
        for b, a in outs:
            if b in self.trace and b not in self.traced:
                self.traced[b] = np.array(a, copy=True)

    def _out_of_memory(self, e: OverCapacity) -> ExecutionError:
        ins = self.instr
        at = "placing its inputs" if ins is None else f"at position {self.position} {describe(ins)}"
        return self._fail(
            DeviceOutOfMemoryError,
            f"device {self.device} out of memory {at}: needs {fmt_bytes(e.needed)} ({e.needed} bytes: "
            f"{fmt_bytes(e.new)} new on top of {fmt_bytes(e.live)} live), capacity "
            f"{fmt_bytes(self.capacity)} ({self.capacity} bytes)",
            needed=e.needed, capacity=self.capacity,
        )

    def _write_one(self, buf: int, array) -> None:
        """``_write([(buf, array)])``: most instructions write one buffer, and this path spares
        them its lists and sums. A write past the capacity, or into a traced buffer, takes the
        general path (which raises, or keeps the copy)."""
        array = np.asarray(array)
        if (self.capacity is not None and self.ledger.live + array.nbytes > self.capacity) or buf in self.trace:
            self._write([(buf, array)])
            return
        self.ledger.write_one(buf, array)

    def _free(self, bufs: Sequence[int]) -> None:
        for b in bufs:
            if b not in self.buffers:
                raise self._fail(
                    ExecutionError, f"device {self.device} {self.where()}: frees buffer b{b}, which it does not hold"
                )
            self.ledger.free((b,))

    def memory(self) -> DeviceMemory:
        return self.ledger.memory(self.device, self.capacity)

    # -- running ---------------------------------------------------------------------------------
    async def run(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        s = self.schedule
        self.state = "running"
        if len(inputs) != len(s.inputs):
            raise self._fail(
                ExecutionError,
                f"device {self.device}: its schedule takes {len(s.inputs)} input shards, got {len(inputs)}",
            )
        self._write([(b, np.asarray(a)) for b, a in zip(s.inputs, inputs)])
        ledger, steps, spans, clock = self.ledger, self.STEPS, self.spans, time.time
        ledger.inputs_placed()
        for pos, ins in enumerate(s.instrs):  # (its names bound above: looked up once, not per instruction)
            self.position = pos
            ledger.at(pos, ins)
            start = clock()
            try:
                step = steps.get(ins.kind) or self._handler(ins)
                if step.waits:
                    await step.run(self, ins)
                else:
                    step.run(self, ins)
            except ExecutionError:
                self.state = "failed"
                raise
            except TransportError as e:
                self.state = "failed"
                raise self.transport_error(e) from e
            except Exception as e:  # a kernel or numpy error: name where it happened
                self.state = "failed"
                raise self._fail(ExecutionError, f"device {self.device} {self.where()}: {type(e).__name__}: {e}") from e
            spans.append((pos, start, clock()))  # (the rest of its Span is the schedule's: ``spans_of``)
        self.position = len(s.instrs)
        outputs = tuple(self._read(b) for b in s.outputs)
        self.state = "finished"
        self.transport.finished(self.device)
        return outputs

    def _handler(self, ins: Instr) -> "Step":
        """How this executor runs ``ins`` (``STEPS``), or the error naming an unknown kind."""
        step = self.STEPS.get(ins.kind)
        if step is None:
            raise self._fail(ExecutionError, f"device {self.device} {self.where()}: unknown instruction kind {ins.kind!r}")
        return step

    async def _step(self, ins: Instr) -> None:
        """Run ``ins`` inside a loop's, switch's or while's body, waiting where it waits."""
        step = self._handler(ins)
        if step.waits:
            await step.run(self, ins)
        else:
            step.run(self, ins)

    async def _loop(self, ins) -> None:
        for k in range(ins.length):
            self._write_one(ins.counter, np.asarray(ins.step(k), np.int32))
            for body_ins in ins.iteration(k):
                await self._step(body_ins)

    async def _switch(self, ins) -> None:
        for b in ins.chosen(int(self._read(ins.index))):
            await self._step(b)

    async def _while(self, ins) -> None:
        k = 0
        while True:
            cond, body = ins.iteration(k)
            for c in cond:
                await self._step(c)
            if not bool(self._read(ins.pred)):
                break
            for b in body:
                await self._step(b)
            k += 1

    def _literal(self, ins) -> None:
        self._write_one(ins.dst, np.array(ins.value, copy=True))

    def _slice_instr(self, ins) -> None:
        self._write_one(ins.dst, self._slice(self._read(ins.src), ins.index))

    def _pad_instr(self, ins) -> None:
        self._write_one(ins.dst, self._pad(self._read(ins.src), ins.shape, ins.value))

    def _free_instr(self, ins) -> None:
        self._free(ins.bufs)

    def _slice(self, x: np.ndarray, index) -> np.ndarray:
        try:
            return take(x, index)
        except OutOfBlock as e:
            raise self._fail(ExecutionError, f"device {self.device} {self.where()}: {e}") from None

    def _pad(self, x: np.ndarray, shape, value) -> np.ndarray:
        try:
            return pad_to(x, shape, value)
        except OutOfBlock as e:
            raise self._fail(ExecutionError, f"device {self.device} {self.where()}: {e}") from None

    async def _collective(self, ins) -> None:
        me, prepared = self.device, self.prepared.of(ins)
        x = self._read(ins.src) if prepared.reads else None
        tag = prepared.tag
        if tag is None:
            tag = signature(ins, x.dtype, x.shape if ins.kind == "all_reduce" else None)
        # the note (where this device is, for the receiver's errors) travels with each message
        # sent: a permute's device that only receives needs none
        note = "" if x is None else at(self.position, prepared.what)
        ch = Channel(self.transport, me, ins.id, tag, note=note)
        try:
            out = await prepared.run(ch, ins, x, self.algorithm)  # (``run_collective``'s choice, made once)
        except CollectiveError as e:
            raise self._fail(CollectiveError, f"device {me} {self.where()}: {e}") from None
        self._write_one(ins.dst, out)
        # noted only: its record is made where it is read (``records``), off the path of the run
        self.ran.append((ins.id, self.position, () if x is None else x.shape, out.shape, out.dtype.itemsize))

    @property
    def timeline(self) -> list[Span]:
        """When this device ran each instruction, in the order run."""
        return list(spans_of(self.device, self.schedule, self.spans))

    @property
    def records(self) -> list[CommRecord]:
        """One ``CommRecord`` per collective this device took part in, in the order run."""
        rows = record_rows(self.device, self.schedule, self.ran, self.transport.log.counts)
        return [CommRecord(*row) for row in rows]

    # -- transport failures as schedule errors -------------------------------------------------------
    def transport_error(self, e: TransportError) -> ExecutionError:
        """A transport's failure as the error that names this device, its peer and where each was."""
        return schedule_error(e, self.device, self.where(), self._where_of, self._fail)

    def _where_of(self, device: int) -> str:
        return self.where() if device == self.device else self._peer(device)

    # each instruction kind run by this executor (checked against the instruction set at import)
    STEPS = dispatch_table({
        "compute": Step(ComputeSteps.run_compute, False),
        "literal": Step(_literal, False),
        "slice": Step(_slice_instr, False),
        "pad": Step(_pad_instr, False),
        "free": Step(_free_instr, False),
        **dict.fromkeys(COLLECTIVE_KINDS, Step(_collective, True)),  # (a comprehension cannot see the class body)
        "loop": Step(_loop, True),
        "switch": Step(_switch, True),
        "while": Step(_while, True),
    }, "runtime/executor.py")


STEPS = Executor.STEPS
THREADED_STEPS = {**STEPS, "compute": Step(ComputeSteps.run_compute_threaded, True)}

