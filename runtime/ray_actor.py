"""The device host: a Ray asyncio actor (one worker process) holding one or more logical devices.

Each device (``_Device``) holds only its own shards, its Schedules (shipped once, as msgpack
bytes, when a program is loaded: ``load``), a ``Mailbox`` per run and, while running, an
``Executor`` over a ``RayTransport``. ``run`` executes one program on one device and answers
with a summary (records, memory, transfers); its outputs stay here as Ray objects until the
controller asks for them. Peers call ``deliver`` (a message), ``where`` (how far a device got, for
a mismatch report), ``peer_lost`` and ``abort``; every call names the device it is for.

Devices of one host run as asyncio tasks of one event loop, as the local backend's do: a message
between two of them goes straight into the receiver's mailbox (a copy, no Ray call), one to a
device of another host is a Ray call on that host (``RemotePeer``). ``RayMesh(devices_per_process=k)``
chooses how many devices share a host.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import itertools
import os
import pickle
from collections import deque
from typing import Any

import numpy as np

from .ray_start import bootstrap, import_ray
from .ray_transport import make_transport_class

CONNECT_SECONDS = 10.0  # a peer process's socket not open by then is reached by Ray calls instead


class _RunState:
    def __init__(self, device: int):
        from .transport import Mailbox

        self.mailbox = Mailbox(device)
        self.executor = None
        self.transport = None
        self.task: asyncio.Task | None = None
        self.aborted = False
        self.dead: set[int] = set()
        self.error: BaseException | None = None


class _Method:
    """``peer.deliver.remote(...)`` on a device of another host: its host's method, the device named."""

    def __init__(self, method, device: int):
        self.method, self.device = method, device

    def remote(self, *args):
        return self.method.remote(self.device, *args)


class RemotePeer:
    """A device of another host, called like an actor of its own."""

    local = False

    def __init__(self, handle, device: int):
        self.handle, self.device = handle, device

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self.handle, name), self.device)


class SocketPeer(RemotePeer):
    """A device of another process: its messages go over the socket between the two processes
    (``runtime/socket_channel.py``, ``RayTransport._frame``: a Unix socket on this node, TCP to
    another); every other call through Ray."""

    socket = True

    def __init__(self, handle, device: int, connection):
        super().__init__(handle, device)
        self.connection = connection


class _LocalMethod:
    def __init__(self, coro_fn):
        self.coro_fn = coro_fn

    def remote(self, *args):
        return asyncio.ensure_future(self.coro_fn(*args))  # awaitable, as an ObjectRef is


class LocalPeer:
    """A device of this host: a message goes straight into its mailbox (``RayTransport`` calls
    ``target.deliver_now``), its other methods run as tasks of this event loop; no Ray call."""

    local = True

    def __init__(self, device: "_Device"):
        self.target = device

    def __getattr__(self, name: str) -> _LocalMethod:
        return _LocalMethod(getattr(self.target, name))


def _quiet_gc() -> None:
    """A worker process's heap holds Ray's and simshard's long-lived objects, which every full
    collection scans again: freeze them (they are never garbage) and collect the young generation
    less often, since a run allocates many short-lived objects and few cycles. (Measured on a
    chain of two-device messages: about 124 -> 99 us per message, with the collector the most
    expensive thing a Ray worker did per message; ``gc_policy`` says more.)"""
    from .gc_policy import RUN_THRESHOLD

    gc.freeze()
    gc.set_threshold(*RUN_THRESHOLD)


def _keep_freed_pages() -> None:
    """Keep the memory of freed arrays up to 32 MiB in the process for the next ones (glibc's
    malloc): by default it returns each such block to the kernel, and the next array of its size
    gets fresh pages, which cost a fault each (several times a copy of them on this kind of
    machine). A device process allocates and frees the same sizes every run (a collective's output,
    a message's body): measured on the 64 MiB all-to-all on 8 processes, about 10% of its CPU. A
    C library without ``mallopt`` keeps its own policy."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD: give memory back only past 256 MiB free at the top
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks up to 32 MiB (glibc's largest) from the heap


class DeviceHost:
    """One worker process holding the logical devices ``devices`` (see the module docstring).

    A run's outputs stay in this process (``held``), named by integer ids: a later run takes them
    as inputs without any copy or Ray object, the driver fetches them on demand (``fetch``) and
    releases them when its handles go (``release``). Ids travel as plain ints, never as objects of
    a class of this module: it travels by value, so each such object would carry its class."""

    def __init__(self, devices, runtime_dir: str):
        bootstrap(runtime_dir)
        from simshard.ops.threads import pin_one_blas_thread

        pin_one_blas_thread()  # as the local backend runs its kernels: the same bits on either
        _quiet_gc()
        _keep_freed_pages()
        self.devices = {int(d): _Device(int(d)) for d in devices}
        self.listener = None
        self.control = None  # the driver's line (ControlServer), opened with the listener
        self.connections: dict[str, Any] = {}  # peer process address -> Connection
        self.held: dict[int, np.ndarray] = {}
        self._held_ids = itertools.count()

    def _hold(self, array: np.ndarray) -> int:
        i = next(self._held_ids)
        self.held[i] = array
        return i

    def _held(self, i: int) -> np.ndarray:
        try:
            return self.held[i]
        except KeyError:
            raise ValueError(f"an input is an array this process no longer holds (id {i}): it was "
                             "released, or the process was restarted; put it again") from None

    async def hold(self, *arrays) -> list[int]:
        """Keep arrays the driver puts here (its own copies, not views of the object store)."""
        return [self._hold(np.array(a, copy=True)) for a in arrays]

    async def fetch(self, ids) -> list[np.ndarray]:
        return [self._held(i) for i in ids]

    async def release(self, ids) -> None:
        for i in ids:
            self.held.pop(i, None)

    def pid(self, device: int | None = None) -> int:
        return os.getpid()

    def routes(self, device: int) -> dict[int, str]:
        """How ``device``'s messages reach each peer: "process" (a device of this process),
        "unix" (this node's socket), "tcp" (another node's socket) or "ray" (actor calls: the ray
        data plane, or a socket that would not open)."""
        out = {}
        for p, peer in self.devices[device].peers.items():
            if isinstance(peer, LocalPeer):
                out[p] = "process"
            elif getattr(peer, "socket", False):
                out[p] = "tcp" if peer.connection.address.startswith("tcp:") else "unix"
            else:
                out[p] = "ray"
        return out

    def node_id(self, device: int | None = None) -> str:
        return import_ray().get_runtime_context().get_node_id()

    async def listen(self, secret: bytes) -> tuple[str, str, str, str]:
        """Open this process's sockets: (its node id, its message address for this node's
        processes, its TCP message address for other nodes', the address of its control line for
        a driver on its node: ``control_line.py``)."""
        from .control_line import ControlServer
        from .socket_channel import Listener

        if self.listener is None:
            devices = self.devices

            # plain functions, not this actor's methods (which Ray wraps for its tracing): one of
            # each per message
            def deliver(run_id: int, src: int, dst: int, key, array, tag, note: str) -> str:
                return devices[dst].deliver_now(run_id, src, key, array, tag, note)

            def place(run_id: int, src: int, dst: int, key, dtype, shape) -> np.ndarray | None:
                device = devices.get(dst)
                return None if device is None else device.place(run_id, src, key, dtype, shape)

            self.listener = Listener(secret, deliver, place, tcp_host=import_ray().util.get_node_ip_address())
            await self.listener.start()
            self.control = ControlServer(secret, {"run": self.run, "fetch": self.fetch})
            await self.control.start()
        return self.node_id(), self.listener.address, self.listener.tcp_address, self.control.address

    async def connect(self, hosts: dict, floor: int | None = None, sockets: dict | None = None,
                      secret: bytes = b"", busy_poll: bool | None = None) -> bool:
        """Learn every device's host handle (again after a restart) and, with ``sockets`` (device ->
        (node id, address, TCP address) of its process), reach other processes by socket: this
        node's by their Unix socket, other nodes' by TCP. A socket that does not open within
        ``CONNECT_SECONDS`` (a firewall between nodes, say) is given up: its peers are reached by
        Ray calls instead. Runs below ``floor`` are over. ``busy_poll``: whether this process's
        loop polls before it sleeps (``busy_poll.py``; None: where the node has a core for each of
        its device processes). Returns whether it polls."""
        from .busy_poll import SPIN_SECONDS, busy_poll as poll, should_spin
        from .socket_channel import Connection

        for c in self.connections.values():
            c.close()
        self.connections = {}
        here = self.node_id()
        address_of = {}
        for p in hosts:
            if p not in self.devices and sockets and sockets.get(p) and (sockets[p][0] == here or sockets[p][2]):
                address_of[p] = sockets[p][1] if sockets[p][0] == here else sockets[p][2]
        for address in dict.fromkeys(address_of.values()):
            self.connections[address] = Connection(address, secret)
        if self.connections:
            await asyncio.wait([c.opened for c in self.connections.values()], timeout=CONNECT_SECONDS)
        for address, c in list(self.connections.items()):
            if not (c.opened.done() and c.opened.result()):
                c.close()
                del self.connections[address]
        for d, dev in self.devices.items():
            peers = {}
            for p, h in hosts.items():
                if p == d:
                    continue
                if p in self.devices:
                    peers[p] = LocalPeer(self.devices[p])
                elif address_of.get(p) in self.connections:
                    peers[p] = SocketPeer(h, p, self.connections[address_of[p]])
                else:
                    peers[p] = RemotePeer(h, p)
            dev.connect(peers, floor, self.connections.values())
        if busy_poll is None:  # the node's processes are known on the sockets data plane only
            busy_poll = bool(sockets) and should_spin(len({a for node, a, _ in sockets.values() if node == here}))
        return poll(asyncio.get_running_loop(), SPIN_SECONDS if busy_poll else 0.0) and busy_poll

    # every call below is for one of this host's devices
    async def load(self, device: int, *args) -> int:
        n = await self.devices[device].load(*args)
        gc.freeze()  # the schedule (and the modules its first load imported) will not be garbage
        return n

    async def unload(self, device: int, key) -> None:
        await self.devices[device].unload(key)

    async def deliver(self, device: int, *args) -> str:
        return await self.devices[device].deliver(*args)

    async def where(self, device: int, run_id: int) -> str:
        return await self.devices[device].where(run_id)

    async def peer_lost(self, device: int, run_id: int, dead: tuple) -> None:
        await self.devices[device].peer_lost(run_id, dead)

    async def abort(self, device: int, run_id: int) -> None:
        await self.devices[device].abort(run_id)

    async def run(self, plan: tuple, *inputs) -> dict[int, dict]:
        """Run a program on this host's devices. ``plan``: (the program's key, the run id,
        whether to trace values, ``counts``: (device, number of input shards) pairs in the order
        of the shards, ``held``: the (position, id) of each shard this process keeps, ``released``:
        ids of kept arrays the driver dropped, let go first), in one argument; ``inputs``: the
        other shards, in order, as top-level arguments so Ray resolves them. Returns each device's
        summary, its outputs kept here and named by id. When one fails, the others here are
        aborted at once, as the controller would abort them on hearing of it."""
        key, run_id, trace_values, counts, held, released = plan
        await self.release(released)
        kept, given = dict(held), iter(inputs)
        shards = [self._held(kept[pos]) if pos in kept else next(given) for pos in range(sum(n for _, n in counts))]
        tasks, i = {}, 0
        for d, n in counts:
            tasks[d] = asyncio.ensure_future(self.devices[d].run(key, run_id, trace_values, *shards[i:i + n]))
            i += n
        pending = set(tasks.values())
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending and any(t.exception() is not None or t.result()["status"] != "ok" for t in done):
                for d in tasks:
                    await self.devices[d].abort(run_id)  # a no-op on a device that has finished
        results = {d: t.result() if t.exception() is None
                   else {"status": "error", "error": t.exception(), "where": "unknown"} for d, t in tasks.items()}
        for r in results.values():
            if r.get("status") == "ok":
                r["outputs"] = [self._hold(o) for o in r["outputs"]]
        try:
            # plain pickle, not Ray's: cloudpickle's per-object hook makes a summary of thousands of
            # records and spans several times slower to send
            return pickle.dumps(results, protocol=5)
        except Exception:  # something only cloudpickle can carry (a failure's exception)
            return results


class _Device:
    """One logical device's state in its host (see the module docstring)."""

    def __init__(self, device: int):
        self.device = device
        self.peers: dict[int, Any] = {}
        self.connections: tuple = ()  # the host's sockets to other processes
        self.programs: dict[Any, tuple] = {}  # key -> (Schedule, capacity, algorithm, trace buffers, timeout)
        self.runs: dict[int, _RunState] = {}
        self.closed: dict[int, str] = {}  # finished run -> where it ended
        self._closed_order: deque = deque()
        self.finished: set[int] = set()  # closed runs this device completed
        self._transport_cls = None
        self.shared = None  # SharedBlocks: this device's shared-memory files, kept from run to run
        self.floor = 0  # runs below this id are over (a restart): their messages are stale

    def connect(self, peers: dict, floor: int | None = None, connections=()) -> None:
        """Every other device as a ``LocalPeer`` or ``RemotePeer``; runs below ``floor`` are over;
        ``connections``: the process's sockets to other processes."""
        self.peers = peers
        self.connections = tuple(connections)
        prefix = next((c.shared_prefix for c in self.connections if c.shared_prefix), None)
        if prefix and (self.shared is None or self.shared.prefix != prefix):
            from .socket_channel import SharedBlocks

            self.shared = SharedBlocks(prefix)  # files for large messages to socket peers
        if floor is not None:
            self.floor = max(self.floor, floor)

    def _over(self, run_id: int) -> bool:
        return run_id < self.floor or run_id in self.closed

    async def load(self, key, data: bytes, capacity, algorithm: str, trace: tuple, timeout, extras=None) -> int:
        from simshard.spmd import Schedule

        from .user_entries import install

        install(extras)  # the user's own ops and reduce ops, before anything names them
        schedule = Schedule.from_bytes(data)
        if schedule.device != self.device:
            raise ValueError(f"device {self.device} was sent device {schedule.device}'s schedule")
        self.programs[key] = (schedule, capacity, algorithm, frozenset(trace), timeout)
        return len(schedule.instrs)

    async def unload(self, key) -> None:
        self.programs.pop(key, None)

    def _state(self, run_id: int) -> _RunState:
        st = self.runs.get(run_id)
        if st is None:
            st = self.runs[run_id] = _RunState(self.device)
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
        from .transport import is_lent

        if self._over(run_id):
            # a run this device has left: nothing waits for the message
            return "finished" if run_id in self.finished else "over"
        st = self._state(run_id)
        key = tuple(key)
        try:
            # otherwise no copy: a large array is a read-only view of the object store (the kernels
            # and collectives never write into their inputs), a small one was unpickled for us
            # alone, a body still in its sender's memory is read when received (socket_channel.Lent)
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
        from .transport import PeerLost

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

    async def run(self, key, run_id: int, trace_values: bool, *inputs) -> dict:
        from .executor import Executor
        from .transport import DuplicateMessage

        if self._transport_cls is None:
            self._transport_cls = make_transport_class()
        st = self._state(run_id)
        if st.aborted:
            self._close(run_id, "aborted before it started")
            return {"status": "aborted", "where": "not started", "waits": []}
        schedule, capacity, algorithm, trace, timeout = self.programs[key]
        transport = self._transport_cls(self.device, self.peers, run_id, st.mailbox, timeout=timeout,
                                          dead=st.dead, shared=self.shared, connections=self.connections)
        st.transport = transport
        st.executor = ex = Executor(
            schedule, transport, capacity=capacity, algorithm=algorithm,
            describe_peer=lambda d: transport.peer_where.get(d, "(its position is not known here)"),
            trace=trace if trace_values else frozenset(),
        )
        # the shards arrive as read-only views of the object store: no copy, nothing writes into them
        inputs = [np.asarray(a) for a in inputs]
        st.task = asyncio.ensure_future(ex.run(inputs))
        try:
            await asyncio.wait({st.task})
            if st.task.cancelled():
                waits = list(transport.waiting) or ([transport.cancelled_in] if transport.cancelled_in else [])
                if st.error is not None:
                    err = ex._transport_error(st.error) if isinstance(st.error, DuplicateMessage) else st.error
                    return {"status": "error", "error": err, "where": ex.where()}
                return {"status": "aborted", "where": ex.where(), "waits": waits}
            exc = st.task.exception()
            if exc is not None:
                waits = [transport.lost] if transport.lost else list(transport.waiting)
                return {"status": "error", "error": exc, "where": ex.where(), "waits": waits}
            outs = st.task.result()
            undelivered = [(m.src, m.key, m.note) for m in st.mailbox.undelivered()]
            self._close(run_id, ex.where(), completed=True)  # from here on a message is late
            late = await transport.late(timeout if timeout is not None else 5.0)
            return {
                "status": "ok",
                "outputs": [np.asarray(o) for o in outs],  # the host keeps them (DeviceHost.run)
                "records": ex.record_rows,  # CommRecord fields: the driver makes records when asked
                "memory": ex.memory(),
                "transfers": transport.log.rows,  # plain tuples: a summary of many messages pickles fast
                "timeline": ex.spans,
                "values": dict(ex.traced),
                "undelivered": undelivered,
                "late": late,
                "where": ex.where(),
            }
        finally:
            transport.release()
            st.mailbox.close()
            self._close(run_id, ex.where())
