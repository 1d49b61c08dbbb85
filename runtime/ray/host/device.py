"""One logical device inside its host process (``HostedDevice``): its loaded programs, its runs,
each with a mailbox, and its peers. ``run`` executes one program and answers with a
``DeviceSummary``; peers' messages arrive through ``deliver_now`` (or ``deliver``, a Ray call).

The device process imports this module after ``bootstrap`` (``DeviceHost.__init__``), so it
imports the runtime's core at the top as any module does."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, NamedTuple

import numpy as np

from simshard.spmd import Schedule

from ...core.collectives.prepared import Prepared
from ...core.executor import Executor
from ...core.mailbox import Mailbox, is_lent
from ...core.packed_rows import pack
from ...core.transport_errors import DuplicateMessage, PeerLost
from ...wire.shared_memory import SharedBlocks
from ..protocol import DeviceSummary, Status
from ..user_entries import install
from .transport import RayTransport


class LoadedProgram(NamedTuple):
    """A program shipped to a device (``load``): its schedule and how to run it."""

    schedule: Any  # the device's Schedule
    capacity: int | None  # device memory, bytes (None: unbounded)
    algorithm: str  # collective algorithm
    trace: frozenset  # checkpoint buffers to keep when a run traces values
    timeout: float | None  # receive timeout, seconds
    prepared: Prepared  # what each collective instruction alone decides, made in its first run, kept for the next


async def ended(task: asyncio.Task) -> None:
    """Wait until ``task`` ends, however it ends, without raising what it raised (a run's task,
    which an abort cancels: ``asyncio.wait``'s use here, without the sets, counter and callbacks
    to remove it makes for each call). Cancelling the wait leaves ``task`` running."""
    if not task.done():
        done = task.get_loop().create_future()
        task.add_done_callback(lambda _: done.done() or done.set_result(None))
        await done


class RunState:
    """One run's state on one device: its mailbox and, once started, its transport, executor and task."""

    def __init__(self, device: int):
        self.mailbox = Mailbox(device)
        self.executor = None
        self.transport = None
        self.task: asyncio.Task | None = None
        self.aborted = False
        self.dead: set[int] = set()
        self.error: BaseException | None = None


class HostedDevice:
    """One logical device in its host process: the programs loaded for it, its runs (a mailbox
    each) and how it reaches its peers."""

    def __init__(self, device: int):
        self.device = device
        self.peers: dict[int, Any] = {}
        self.connections: tuple = ()  # the host's sockets to other processes
        self.programs: dict[Any, LoadedProgram] = {}
        self.runs: dict[int, RunState] = {}
        self.closed: dict[int, str] = {}  # finished run -> where it ended
        self._closed_order: deque = deque()
        self.finished: set[int] = set()  # closed runs this device completed
        self.shared = None  # SharedBlocks: this device's shared-memory files, kept from run to run
        self.floor = 0  # runs below this id are over (a restart): their messages are stale
        self.kernels = None  # the host's KernelThreads where it holds other devices too

    def connect(self, peers: dict, floor: int | None = None, connections=()) -> None:
        """Every other device as a ``LocalPeer`` or ``RemotePeer``; runs below ``floor`` are over;
        ``connections``: the process's sockets to other processes."""
        self.peers = peers
        self.connections = tuple(connections)
        prefix = next((c.shared_prefix for c in self.connections if c.shared_prefix), None)
        if prefix and (self.shared is None or self.shared.prefix != prefix):
            self.shared = SharedBlocks(prefix)  # files for large messages to socket peers
        if floor is not None:
            self.floor = max(self.floor, floor)

    def let_go_of_shared(self) -> None:
        """Forget this device's shared-memory files: their names are being removed (the driver is gone)."""
        self.shared = None

    def _over(self, run_id: int) -> bool:
        return run_id < self.floor or run_id in self.closed

    async def load(self, key, data: bytes, capacity, algorithm: str, trace: tuple, timeout, extras=None) -> int:
        install(extras)  # the user's own ops and reduce ops, before anything names them
        schedule = Schedule.from_bytes(data)
        if schedule.device != self.device:
            raise ValueError(f"device {self.device} was sent device {schedule.device}'s schedule")
        self.programs[key] = LoadedProgram(schedule, capacity, algorithm, frozenset(trace), timeout, Prepared(self.device))
        return len(schedule.instrs)

    async def unload(self, key) -> None:
        self.programs.pop(key, None)

    def _state(self, run_id: int) -> RunState:
        st = self.runs.get(run_id)
        if st is None:
            st = self.runs[run_id] = RunState(self.device)
        return st

    def _close(self, run_id: int, where: str, completed: bool = False) -> None:
        if run_id in self.closed:
            return
        st = self.runs.pop(run_id, None)
        if st is not None:  # let go of what arrived for it (a body still in its sender's memory)
            st.mailbox.close()
        self.closed[run_id] = where
        if completed:
            self.finished.add(run_id)
        self._closed_order.append(run_id)
        while len(self._closed_order) > 64:
            old = self._closed_order.popleft()
            self.closed.pop(old, None)
            self.finished.discard(old)

    async def deliver(self, run_id: int, src: int, key, array, tag, note: str) -> str:
        return self.deliver_now(run_id, src, key, array, tag, note)

    def deliver_now(self, run_id: int, src: int, key, array, tag, note: str, copy: bool = False) -> str:
        """Put a peer's message in run ``run_id``'s mailbox (``copy``: ``array`` is a device's of
        this process, so the receiver takes a copy, into the place it offered when that fits).
        The answer, which the sender looks at when it has finished: "ok"; "finished" (this device
        had completed the run without receiving it: a schedule mismatch); "over" (a run left,
        failed or aborted)."""
        if self._over(run_id):
            # a run this device has left: nothing waits for the message
            return "finished" if run_id in self.finished else "over"
        st = self._state(run_id)
        key = tuple(key)
        try:
            # otherwise no copy: a large array is a read-only view of the object store (the kernels
            # and collectives never write into their inputs), a small one was unpickled for us
            # alone, a body still in its sender's memory is read when received (wire.memory_reads.Lent)
            if copy:
                array = st.mailbox.copy_in(src, key, array)
            elif not is_lent(array):
                array = np.asarray(array)
            st.mailbox.arrive(src, key, array, tag, note)
        except Exception as e:  # a duplicate: fail this device's run with it
            st.error = e
            if st.task is not None and not st.task.done():
                st.task.cancel()
        return "ok"

    def place(self, run_id: int, src: int, key, dtype, shape) -> np.ndarray | None:
        """Where a socket frame's array goes: the place this device offered for it in run
        ``run_id`` (``Mailbox.place``), or None."""
        st = None if self._over(run_id) else self.runs.get(run_id)
        return None if st is None else st.mailbox.place(src, tuple(key), np.dtype(dtype), shape)

    async def where(self, run_id: int) -> str:
        if run_id in self.closed:
            return self.closed[run_id]
        st = self.runs.get(run_id)
        if st is None or st.executor is None:
            return "not started"
        return st.executor.where()

    async def peer_lost(self, run_id: int, dead: tuple) -> None:
        """Devices ``dead`` are gone: a receive from them (now or later in this run) fails."""
        if self._over(run_id):
            return
        st = self._state(run_id)
        st.dead.update(dead)
        if st.transport is not None:
            for src, key in list(st.transport.waiting):
                if src in st.dead:
                    st.mailbox.fail(src, key, PeerLost(self.device, src, key))

    async def abort(self, run_id: int) -> None:
        if self._over(run_id):
            return
        st = self._state(run_id)
        st.aborted = True
        if st.task is not None and not st.task.done():
            st.task.cancel()

    async def run(self, key, run_id: int, trace_values: bool, *inputs) -> DeviceSummary:
        """Run loaded program ``key`` as run ``run_id`` on ``inputs``: this device's summary."""
        st = self._state(run_id)
        if st.aborted:
            self._close(run_id, "aborted before it started")
            return DeviceSummary.aborted("not started")
        transport, ex = self._start(key, run_id, trace_values, st)
        # the shards arrive as read-only views of the object store: no copy, nothing writes into them
        st.task = asyncio.get_running_loop().create_task(ex.run([np.asarray(a) for a in inputs]))
        try:
            await ended(st.task)
            if st.task.cancelled() or st.task.exception() is not None:
                return self._stopped(st, transport, ex)
            return self._finished(run_id, st, transport, ex)
        except asyncio.CancelledError:  # the run call itself was cancelled (its process closing)
            st.task.cancel()
            raise
        finally:
            transport.release()
            st.mailbox.close()
            self._close(run_id, ex.where())

    def _start(self, key, run_id: int, trace_values: bool, st: RunState):
        """The run's transport and executor, kept in its state (for ``peer_lost`` and ``where``)."""
        program = self.programs[key]
        transport = RayTransport(self.device, self.peers, run_id, st.mailbox, timeout=program.timeout,
                                 dead=st.dead, shared=self.shared, connections=self.connections)
        st.transport = transport
        st.executor = Executor(
            program.schedule, transport, capacity=program.capacity, algorithm=program.algorithm,
            describe_peer=lambda d: transport.peer_where.get(d, "(its position is not known here)"),
            trace=program.trace if trace_values else frozenset(), kernels=self.kernels, prepared=program.prepared,
        )
        return transport, st.executor

    def _stopped(self, st: RunState, transport, ex) -> DeviceSummary:
        """The summary of a run that did not finish: aborted (cancelled) or failed."""
        if st.task.cancelled():
            waits = list(transport.waiting) or ([transport.cancelled_in] if transport.cancelled_in else [])
            if st.error is not None:
                err = ex.transport_error(st.error) if isinstance(st.error, DuplicateMessage) else st.error
                return DeviceSummary.failed(err, ex.where())
            return DeviceSummary.aborted(ex.where(), tuple(waits))
        waits = [transport.lost] if transport.lost else list(transport.waiting)
        return DeviceSummary.failed(st.task.exception(), ex.where(), tuple(waits))

    def _finished(self, run_id: int, st: RunState, transport, ex) -> DeviceSummary:
        """The summary of a run this device completed; from here on a message to it is late."""
        undelivered = tuple((m.src, m.key, m.note) for m in st.mailbox.undelivered())
        self._close(run_id, ex.where(), completed=True)
        return DeviceSummary(
            Status.OK, ex.where(),
            outputs=tuple(np.asarray(o) for o in st.task.result()),  # the host keeps them (DeviceHost.run)
            ran=tuple(ex.ran),  # what it ran: the driver makes the records when they are asked for
            memory=ex.memory().to_wire(),  # plain: the driver unpickles a step's answers one by one
            transfers=pack(transport.log.rows),  # packed: the driver unpacks them only if asked
            timeline=pack(ex.spans),
            values=dict(ex.traced),
            undelivered=undelivered,
            taken=tuple(transport.taken.items()),
            received=transport.received,
        )
