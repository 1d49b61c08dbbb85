"""The device host: a Ray asyncio actor (one worker process) holding one or more logical devices.

Each device (``HostedDevice``, ``device.py``) holds only its own shards, its schedules (shipped
once, as msgpack bytes, when a program is loaded: ``load``), a mailbox per run and, while
running, an executor over a ``RayTransport``. ``run`` executes one program on the host's devices
and answers with a ``DeviceSummary`` each (``protocol.py``); their outputs stay here, named by
ids, until the driver fetches them. Peers call ``deliver`` (a message), ``where`` (how far a
device got, for a mismatch report), ``peer_lost`` and ``abort``; every call names the device it
is for.

Devices of one host run as asyncio tasks of one event loop, as the local backend's do: a message
between two of them goes straight into the receiver's mailbox (a copy, no Ray call), one to a
device of another process goes over the socket to it or as a Ray call (``peers.py``). Their
heavy contractions run at once, on a thread per device (``core/kernel_threads.py``), as they
would in processes of their own; the loop stops polling meanwhile.
``RayMesh(devices_per_process=k)`` chooses how many devices share a host.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import pickle
from typing import Any

import numpy as np
import ray

from ..protocol import PROBE_GROUP, Connected, DeviceSummary, RunPlan, Unreached, processes_on
from ..start import bootstrap, import_ray
from .peers import LocalPeer, RemotePeer, SocketPeer, route
from .process import keep_freed_pages, quiet_gc

CONNECT_SECONDS = 10.0  # a peer process's socket not open by then is reached by Ray calls instead


class DeviceHost:
    """One worker process holding the logical devices ``devices`` (see the module docstring).

    A run's outputs stay in this process (``held``), named by integer ids: a later run takes them
    as inputs without any copy or Ray object, the driver fetches them on demand (``fetch``) and
    releases them when its handles go (``release``). Ids travel as plain ints, never as objects of
    a class of this module: it travels by value, so each such object would carry its class."""

    def __init__(self, devices, runtime_dir: str):
        bootstrap(runtime_dir)
        from simshard.ops.threads import pin_one_blas_thread  # after bootstrap (see __init__)

        from ...core.kernel_threads import KernelThreads
        from ...wire.preemption import NEVER
        from .device import HostedDevice

        pin_one_blas_thread()  # as the local backend runs its kernels: the same bits on either
        quiet_gc()
        keep_freed_pages()
        self.devices = {int(d): HostedDevice(int(d)) for d in devices}
        self.listener = None
        self.control = None  # the driver's line (ControlServer), opened with the listener
        self.connections: dict[str, Any] = {}  # peer process address -> Connection
        self.spinner = None  # polls the loop during runs where it has no selector (``_poll``)
        self.polling = "off"  # how the loop waits for messages (``_poll``)
        # the loop's thread's record of its preemptions (``wire/preemption``), taken on that thread
        # by ``_poll``; until then one that never moves
        self.aside = NEVER
        if len(self.devices) > 1:  # its devices compute at once, a thread each, as processes of their own would
            kernels = KernelThreads(len(self.devices), on_busy=lambda: self._poll_while_computing(False),
                                    on_idle=lambda: self._poll_while_computing(True))
            for device in self.devices.values():
                device.kernels = kernels
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

    @ray.method(concurrency_group=PROBE_GROUP)
    async def alive(self) -> int:
        """Whether this process answers at all (``driver/probe.py``): on the probe group's own thread
        and event loop, so it answers while the devices' loop runs a kernel, and not when the
        process is stopped or stuck holding the interpreter."""
        return os.getpid()

    def routes(self, device: int) -> dict[int, str]:
        """How ``device``'s messages reach each peer: "process" (a device of this process),
        "unix" (this node's socket), "tcp" (another node's socket) or "ray" (actor calls: the ray
        data plane, or a socket that would not open)."""
        return {p: route(peer) for p, peer in self.devices[device].peers.items()}

    def stepped_aside(self, device: int | None = None) -> int:
        """How often this process's polling loop has stopped polling for a while because another
        task wanted its core (``wire/preemption``)."""
        return self.aside.times

    def node_id(self, device: int | None = None) -> str:
        return import_ray().get_runtime_context().get_node_id()

    async def listen(self, secret: bytes) -> tuple[str, str, str, str]:
        """Open this process's sockets: (its node id, its message address for this node's
        processes, its TCP message address for other nodes', the address of its control line for
        a driver on its node: ``wire/control_server.py``)."""
        from ...wire.control_line import Request  # after bootstrap (see __init__)
        from ...wire.control_server import ControlServer
        from ...wire.sockets import Listener

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
            self.control = ControlServer(secret, {Request.RUN: self.run, Request.FETCH: self.fetch},
                                         on_driver_gone=lambda: self.driver_gone(secret), rings=self.listener.rings)
            await self.control.start()
        return self.node_id(), self.listener.address, self.listener.tcp_address, self.control.address

    def driver_gone(self, secret: bytes) -> None:
        """The driver's line ended: it closed the mesh, or it died (killed, its processes with it).
        Either way nothing will read this mesh's shared memory again: remove its files now rather
        than leave them to whoever cleans up after a crash (``remove_orphans``)."""
        from ...wire.shared_memory import remove_shared, shared_memory_prefix  # after bootstrap (see __init__)

        for device in self.devices.values():
            device.let_go_of_shared()
        prefix = shared_memory_prefix(secret)
        if prefix:
            remove_shared(prefix)

    async def connect(self, hosts: dict, floor: int | None = None, sockets: dict | None = None,
                      secret: bytes = b"", busy_poll: bool | None = None) -> tuple:
        """Learn every device's host handle (again after a restart) and, with ``sockets`` (device ->
        (node id, address, TCP address) of its process), reach other processes by socket: this
        node's by their Unix socket, other nodes' by TCP. A socket that does not open within
        ``CONNECT_SECONDS`` (a firewall between nodes, say) is given up: its peers are reached by
        Ray calls instead, and the answer says which and why (the driver warns). Runs below
        ``floor`` are over. ``busy_poll``: whether this process's loop polls before it sleeps
        (``wire/polling.py``; None: where the node has a core for each of its device processes).
        Returns a ``Connected``, as a plain tuple."""
        from ...wire.polling import should_spin  # after bootstrap (see __init__)

        for c in self.connections.values():
            c.close()
        here = self.node_id()
        address_of = {}
        for p in hosts:
            if p not in self.devices and sockets and sockets.get(p) and (sockets[p][0] == here or sockets[p][2]):
                address_of[p] = sockets[p][1] if sockets[p][0] == here else sockets[p][2]
        self.connections, failed = await self._open_connections(secret, address_of.values())
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
            busy_poll = bool(sockets) and should_spin(processes_on(here, sockets))
        unreached = tuple(Unreached(tuple(self.devices), tuple(p for p, a in address_of.items() if a == address),
                                    address, reason) for address, reason in failed.items())
        routes = {d: self.routes(d) for d in self.devices}
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]  # "uvloop" or "asyncio"
        return Connected(self._poll(bool(busy_poll)), routes, unreached, loop).to_wire()

    async def _open_connections(self, secret: bytes, addresses) -> tuple[dict, dict[str, str]]:
        """A ``Connection`` to each peer process's socket (address -> it) for those that opened
        within ``CONNECT_SECONDS``, and why each of the others did not (address -> reason)."""
        from ...wire.sockets import Connection  # after bootstrap (see __init__)

        connections = {address: Connection(address, secret) for address in dict.fromkeys(addresses)}
        if connections:
            await asyncio.wait([c.opened for c in connections.values()], timeout=CONNECT_SECONDS)
        failed = {}
        for address, c in list(connections.items()):
            if not (c.opened.done() and c.opened.result()):
                failed[address] = (str(c.failed) if c.failed is not None
                                   else f"it did not answer within {CONNECT_SECONDS:g} s")
                c.close()
                del connections[address]
        return connections, failed

    def _poll(self, wanted: bool) -> str:
        """Make this process's loop poll for messages (``wanted``) or sleep in wait: "selector"
        (its selector wrapped: asyncio's loop), "turns" (a loop with none: uvloop's, polled by a
        callback during runs: ``Spinner``) or "off"."""
        from ...wire.polling import SPIN_SECONDS, Spinner, busy_poll  # after bootstrap (see __init__)
        from ...wire.preemption import step_aside

        loop = asyncio.get_running_loop()
        self.aside = step_aside()  # (this, the loop's thread)
        if self.spinner is not None:
            self.spinner.stop()
        self.spinner = None
        rings = self.ring_readers()
        if busy_poll(loop, SPIN_SECONDS if wanted else 0.0, rings):
            self.polling = "selector" if wanted else "off"
        elif wanted:
            self.spinner = Spinner(loop, rings=rings)
            self.polling = "turns"
        else:
            self.polling = "off"
        return self.polling

    def ring_readers(self):
        """This process's readers of its peers' rings of frames, read as its loop polls
        (``wire/frame_rings``); None before it listens."""
        return None if self.listener is None else self.listener.rings

    def _poll_while_computing(self, wanted: bool) -> None:
        """Stop a polling loop while this process's kernels compute on its threads (``wanted``
        False: they need the cores it would spin on) and start it again when they are back."""
        from ...wire.polling import pause_polling  # after bootstrap (see __init__)

        if self.spinner is not None:
            self.spinner.pause(not wanted)
        elif self.polling == "selector":
            pause_polling(asyncio.get_running_loop(), not wanted, self.ring_readers())

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

    async def run(self, plan: tuple, *inputs) -> bytes | dict[int, tuple]:
        """Run a program on this host's devices. ``plan``: a ``RunPlan`` as a plain tuple, in one
        argument; ``inputs``: the shards it does not say are kept here, in order, as top-level
        arguments so Ray resolves them. Returns device -> its ``DeviceSummary`` as a plain tuple
        (``to_wire``), its outputs kept here and named by id; pickled where it can be. When one
        device fails, the others here are aborted at once, as the controller would abort them on
        hearing of it."""
        plan = RunPlan.of(plan)
        if plan.released:
            await self.release(plan.released)
        spinner, aside = self.spinner, self.aside
        pauses = aside.times  # (how often the loop stepped aside before this run)
        if spinner is not None:  # the loop polls while the run is in progress
            spinner.hold()
        try:
            summaries = await self._run_all(plan, inputs)
        finally:
            if spinner is not None:
                spinner.release()
        if aside.times != pauses:  # (rare: the summary remade only then)
            first = next(iter(summaries))
            summaries[first] = summaries[first]._replace(stepped_aside=aside.times - pauses)
        wire = {d: s.to_wire(tuple(self._hold(o) for o in s.outputs)) if s.ok else s.to_wire()
                for d, s in summaries.items()}
        try:
            # plain pickle, not Ray's: cloudpickle's per-object hook makes a summary of thousands of
            # records and spans several times slower to send
            return pickle.dumps(wire, protocol=5)
        except Exception:  # something only cloudpickle can carry (a failure's exception)
            return wire

    async def _run_all(self, plan: RunPlan, inputs) -> dict[int, DeviceSummary]:
        """Each device's summary of its run, to its end; when one fails, the others here are
        aborted. A process of one device (a many-core node's default) runs it in this task: no
        task of its own to make and wait for (here, 21 us to 8 to 10 us from the run call to the
        device's run starting; docs/performance.md)."""
        if len(plan.counts) == 1:
            (d, run), = self._runs(plan, inputs)
            try:
                return {d: await run}
            except Exception as e:
                return {d: DeviceSummary.failed(e)}
        loop = asyncio.get_running_loop()  # once, not once per device (each asks: a getpid call)
        tasks = {d: loop.create_task(run) for d, run in self._runs(plan, inputs)}
        pending = set(tasks.values())
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending and any(t.exception() is not None or not t.result().ok for t in done):
                for d in tasks:
                    await self.devices[d].abort(plan.run_id)  # a no-op on a device that has finished
        return {d: t.result() if t.exception() is None else DeviceSummary.failed(t.exception())
                for d, t in tasks.items()}

    def _runs(self, plan: RunPlan, inputs) -> list[tuple[int, Any]]:
        """Each device's run (a coroutine), on its shards: those kept here (``plan.held``) and the
        others from ``inputs``, in the order ``plan.counts`` gives."""
        kept, given = dict(plan.held), iter(inputs)
        shards = [self._held(kept[pos]) if pos in kept else next(given)
                  for pos in range(sum(n for _, n in plan.counts))]
        runs, i = [], 0
        for d, n in plan.counts:
            runs.append((d, self.devices[d].run(plan.key, plan.run_id, plan.trace_values, *shards[i:i + n])))
            i += n
        return runs
