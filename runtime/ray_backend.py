"""The Ray backend: one Ray asyncio actor per logical device.

Each device actor holds only its own shards, its Schedule (shipped once, as msgpack bytes, when a
program is loaded), a ``Mailbox`` per run and, while running, an ``Executor`` over a
``RayTransport``. Devices send to each other directly: ``RayTransport._deliver`` calls the
receiving actor's ``deliver`` method without waiting for an answer, the array travelling as a Ray
object (``ray.put`` from ``INLINE_BYTES`` up, inline below); ``_collect`` waits on the local
mailbox with the receive timeout. The collective library and the executor are the local
backend's, so outputs and communication records are the same, bit for bit and byte for byte.

The controller (``RayMesh``) makes O(1) Ray calls per device per run: a ``ray.put`` per input
shard (each actor gets only its shards), one ``run`` call, and a wait / get of its summary
(records, memory, transfers). Outputs stay on the devices as Ray objects until asked for
(``Execution.outputs[device]`` fetches one device's, ``assemble`` all of them). ``RayMesh.calls``
counts every call the controller made.

    with RayMesh(mesh) as devices:                     # actors kept alive across runs
        compiled = devices.compile(f, x, w, in_shardings=(P("x", None), None))
        res = compiled(x, w)                           # run again and again
        res.outputs, res.shards(3), res.comm, res.controller_calls

On a cluster: ``RayMesh(mesh, address="<head>:6379", node_axes=("host",))`` plans the devices
onto nodes (``runtime/nodes.py``: devices sharing every coordinate of ``node_axes`` share a node),
reserves one placement-group bundle per node and pins each device actor to its node's bundle;
``close`` removes the group. ``device_nodes()`` says which Ray node each device is on.

Failures: a device whose actor dies gives a ``DeviceLostError`` naming it and the instruction its
peers were waiting for it to reach; the other devices are stopped at once. With ``retries=N``
(``execute``, ``Compiled(...)``, ``ss.run(..., backend="ray")``) the controller instead restarts
the lost devices (``RayMesh.repair``: fresh actors, every peer reconnected, schedules shipped again
from the bytes kept here) and runs the whole program again under a new run id, so messages of the
failed attempt are dropped; after N failed retries the last ``DeviceLostError`` is raised. A
mismatched schedule is found by the receive timeout (a device sees only itself) and reported with
both devices' positions (the waiting device asks the silent one where it is); a message its
receiver never took is reported whether it arrived before the receiver finished (left in its
mailbox) or after (the sender, once done, looks at its deliveries' answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

import numpy as np

# Arrays from this size travel via ray.put, smaller ones inline in the call (one gRPC hop to the
# receiving actor, no object-store round trips: an MLP's 256 KiB all-reduce chunks arrive ~2x
# sooner). A local Ray started here inlines call arguments up to this size
# (max_direct_call_object_size, 100 KiB by default); on another cluster Ray promotes the larger
# ones to the object store itself.
INLINE_BYTES = 1 << 20
ACTOR_CPUS_MAX = 0.25
_RUNTIME_DIR = str(Path(__file__).resolve().parent)


def _import_ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - ray is a dependency of this backend only
        raise ImportError("the Ray backend needs ray: pip install 'ray>=2.9'") from e
    return ray


def ensure_ray(address: str | None = None, num_cpus: int | None = None):
    """Connect to Ray: reuse an initialised Ray; with ``address`` join that cluster; otherwise
    start a local one, dashboard off, logs quiet, on loopback only (``_loopback_only``)."""
    ray = _import_ray()
    if ray.is_initialized():
        return ray
    kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    if address is None:
        # "local": a new instance of our own, even when another one runs on this machine
        kw.update(address="local", num_cpus=num_cpus or max(os.cpu_count() or 1, 1), _node_ip_address="127.0.0.1",
                  _system_config={"max_direct_call_object_size": INLINE_BYTES})
        with _loopback_only():
            ray.init(**kw)
    else:
        kw.update(address=address)
        ray.init(**kw)
    return ray


@contextlib.contextmanager
def _loopback_only():
    """While starting a private local Ray: keep ``_node_ip_address="127.0.0.1"``.

    On Linux, Ray (2.x) turns a loopback node address into the machine's routable one
    (``services.resolve_ip_for_localhost``) unless its cluster mode is off, which is what
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` does. That variable is read once, when ``ray`` is
    imported (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``), so it is set on the module for
    the ``ray.init`` call only. With the node address 127.0.0.1 the GCS, the raylet, the
    runtime-env agent and every worker (device actor) listen on 127.0.0.1 only, and the Ray
    state records 127.0.0.1. The address of a node started here is written down by Ray at start,
    so nothing else reads the flag later; joining a cluster (``address=``) never goes through
    here. A Ray without that module attribute just starts as before."""
    try:
        from ray._private import ray_constants
    except ImportError:  # pragma: no cover - another Ray layout
        yield
        return
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):  # pragma: no cover
        yield
        return
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


# -- the device side ---------------------------------------------------------------------------


def _bootstrap(runtime_dir: str) -> None:
    """Make ``simshard.runtime`` in this worker the driver's runtime folder (a worker could find
    another checkout through an editable install)."""
    import importlib.util

    mod = sys.modules.get("simshard.runtime")
    if mod is not None:
        if Path(mod.__file__).resolve().parent == Path(runtime_dir):
            return
        raise ImportError(f"this Ray worker imported simshard.runtime from {mod.__file__}, the driver's is {runtime_dir}")
    for package in LEAN_PACKAGES:
        _lean_package(package)
    import simshard

    found = importlib.util.find_spec("simshard.runtime")
    if found is not None and found.origin and Path(found.origin).resolve().parent == Path(runtime_dir):
        import simshard.runtime  # noqa: F401
        return
    init = Path(runtime_dir) / "__init__.py"
    spec = importlib.util.spec_from_file_location("simshard.runtime", init, submodule_search_locations=[runtime_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules["simshard.runtime"] = module
    spec.loader.exec_module(module)
    simshard.runtime = module


# Packages whose __init__ a device worker skips until something asks for a name it defines: a
# device needs the executor's modules, not the tracing / propagation API the package roots gather
# (half a worker's start-up CPU, which 64 workers on 2 cores pay in turn).
LEAN_PACKAGES = ("simshard", "simshard.partition", "simshard.report")


def _lean_package(name: str) -> None:
    """Register package ``name`` without running its ``__init__``: its submodules import as usual,
    and the first attribute it does not have yet runs the ``__init__`` into the same module (so
    user code in a manual region that uses ``simshard.…`` finds everything)."""
    import importlib.util

    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    module = importlib.util.module_from_spec(spec)

    def __getattr__(attr: str):
        if module.__dict__.pop("__getattr__", None) is not None:
            spec.loader.exec_module(module)
            if attr in module.__dict__:
                return module.__dict__[attr]
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    module.__getattr__ = __getattr__
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, module)


class _PutOnce:
    """``ray.put`` each distinct array once, by identity: a block several devices hold, an array
    sent to several peers. Each array is kept with its ref, so its id cannot be reused meanwhile."""

    def __init__(self):
        self._refs: dict[int, tuple[np.ndarray, Any]] = {}

    def __call__(self, array: np.ndarray):
        hit = self._refs.get(id(array))
        if hit is None:
            hit = self._refs[id(array)] = (array, _import_ray().put(array))
        return hit[1]

    def __len__(self) -> int:
        return len(self._refs)


def _make_transport_class():
    from .transport import Message, PeerLost, RecvTimeout, Transport, TransportError

    class RayTransport(Transport):
        """One device's side of the Ray transport: sends are fire-and-forget calls on the receiving
        actor's ``deliver``; receives wait on this device's mailbox. Its log holds this device's
        transfers only."""

        def __init__(self, device: int, peers: Mapping[int, Any], run_id: int, mailbox, timeout, dead: set):
            super().__init__(timeout)
            self.dead = dead  # devices the controller reported dead: waiting for them fails at once
            self.lost: tuple | None = None  # (source, key) of the receive a dead peer failed
            self.device = device
            self.peers = peers
            self.run_id = run_id
            self.mailbox = mailbox
            self.waiting: dict[tuple, float] = {}  # (source, key) -> since when
            self.sent: list[tuple] = []  # (deliver call, destination, key, note) of every message sent
            self.peer_where: dict[int, str] = {}  # what a silent peer said when asked
            self._puts_for, self._puts = None, _PutOnce()  # the instruction whose arrays _puts holds
            self.cancelled_in: tuple | None = None  # (source, key) of the receive an abort cancelled

        async def _deliver(self, msg: Message) -> None:
            if msg.dst == self.device:
                self.mailbox.put(Message(msg.src, msg.dst, msg.key, np.array(msg.array, copy=True), msg.tag, msg.note))
                return
            peer = self.peers.get(msg.dst)
            if peer is None:
                raise TransportError(f"device {msg.dst} is not one of this mesh's devices {sorted(self.peers)}")
            payload = self._payload(msg) if msg.array.nbytes >= INLINE_BYTES else msg.array
            # no ack awaited here; the answers are looked at once this device has finished (``late``)
            ref = peer.deliver.remote(self.run_id, msg.src, msg.key, payload, msg.tag, msg.note)
            self.sent.append((ref, msg.dst, msg.key, msg.note))

        def _payload(self, msg: Message):
            """The array as a Ray object, put once per instruction however many peers it goes to
            (an all-gather's block, an all-reduce's finished chunk): every receiver on a node
            reads the same object, as Ray moves one object to many actors."""
            if self._puts_for != msg.key[0]:
                self._puts_for, self._puts = msg.key[0], _PutOnce()
            return self._puts(msg.array)

        async def late(self, timeout: float = 5.0) -> list[tuple]:
            """(destination, key, note) of the messages whose receiver had already finished the
            run when they arrived: a schedule mismatch that would otherwise pass unnoticed."""
            if not self.sent:
                return []
            try:
                answers = await asyncio.wait_for(
                    asyncio.gather(*(r for r, *_ in self.sent), return_exceptions=True), timeout)
            except asyncio.TimeoutError:
                return []  # a receiver too busy to answer: nothing known
            return [(dst, key, note) for (_, dst, key, note), a in zip(self.sent, answers) if a == "finished"]

        async def _collect(self, dst: int, src: int, key, timeout) -> Message:
            if src != self.device and src not in self.peers:
                raise TransportError(f"device {src} is not one of this mesh's devices {sorted(self.peers)}")
            self.waiting[(src, key)] = time.monotonic()
            try:
                if src in self.dead and not self.mailbox.has(src, key):
                    raise PeerLost(dst, src, key)
                return await self.mailbox.get(src, key, timeout)
            except PeerLost:
                self.lost = (src, key)
                raise
            except RecvTimeout:
                self.peer_where[src] = await self._ask_where(src)
                raise
            except asyncio.CancelledError:
                self.cancelled_in = (src, key)  # an aborted device still says whom it waited for
                raise
            finally:
                self.waiting.pop((src, key), None)

        async def _ask_where(self, src: int) -> str:
            try:
                return await asyncio.wait_for(self.peers[src].where.remote(self.run_id), 5.0)
            except asyncio.TimeoutError:
                return "not answering (its actor did not reply within 5 s)"
            except Exception as e:  # a dead actor
                return f"unreachable ({type(e).__name__}: its actor is gone)"

    return RayTransport


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


class DeviceActor:
    """One logical device (a Ray asyncio actor; see the module docstring)."""

    def __init__(self, device: int, runtime_dir: str):
        _bootstrap(runtime_dir)
        self.device = device
        self.peers: dict[int, Any] = {}
        self.programs: dict[Any, tuple] = {}  # key -> (Schedule, capacity, algorithm, trace buffers, timeout)
        self.runs: dict[int, _RunState] = {}
        self.closed: dict[int, str] = {}  # finished run -> where it ended
        self._closed_order: deque = deque()
        self.finished: set[int] = set()  # closed runs this device completed
        self._transport_cls = None
        self.floor = 0  # runs below this id are over (a restart): their messages are stale

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        return _import_ray().get_runtime_context().get_node_id()

    async def connect(self, peers: dict, floor: int | None = None) -> int:
        """Learn every peer's handle (again after a restart); runs below ``floor`` are over."""
        self.peers = {d: h for d, h in peers.items() if d != self.device}
        if floor is not None:
            self.floor = max(self.floor, floor)
        return len(self.peers)

    def _over(self, run_id: int) -> bool:
        return run_id < self.floor or run_id in self.closed

    async def load(self, key, data: bytes, capacity, algorithm: str, trace: tuple, timeout) -> int:
        from simshard.partition.schedule import Schedule

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
        self.runs.pop(run_id, None)
        self.closed[run_id] = where
        if completed:
            self.finished.add(run_id)
        self._closed_order.append(run_id)
        while len(self._closed_order) > 64:
            old = self._closed_order.popleft()
            self.closed.pop(old, None)
            self.finished.discard(old)

    async def deliver(self, run_id: int, src: int, key, array, tag, note: str) -> str:
        """Put a peer's message in run ``run_id``'s mailbox. The answer, which the sender looks at
        when it has finished: "ok"; "finished" (this device had completed the run without
        receiving it: a schedule mismatch); "over" (a run left, failed or aborted)."""
        from .transport import Message

        if self._over(run_id):
            # a run this device has left: nothing waits for the message
            return "finished" if run_id in self.finished else "over"
        st = self._state(run_id)
        try:
            # no copy: a large array is a read-only view of the object store (the kernels and
            # collectives never write into their inputs), a small one was unpickled for us alone
            st.mailbox.put(Message(src, self.device, tuple(key), np.asarray(array), tag, note))
        except Exception as e:  # a duplicate: fail this device's run with it
            st.error = e
            if st.task is not None and not st.task.done():
                st.task.cancel()
        return "ok"

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
            self._transport_cls = _make_transport_class()
        st = self._state(run_id)
        if st.aborted:
            self._close(run_id, "aborted before it started")
            return {"status": "aborted", "where": "not started", "waits": []}
        schedule, capacity, algorithm, trace, timeout = self.programs[key]
        transport = self._transport_cls(self.device, self.peers, run_id, st.mailbox, timeout=timeout,
                                          dead=st.dead)
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
            ray = _import_ray()
            outs = st.task.result()
            undelivered = [(m.src, m.key, m.note) for m in st.mailbox.undelivered()]
            self._close(run_id, ex.where(), completed=True)  # from here on a message is late
            late = await transport.late(timeout if timeout is not None else 5.0)
            return {
                "status": "ok",
                "outputs": [ray.put(np.asarray(o)) for o in outs],  # stay here until asked for
                "records": tuple(ex.records),
                "memory": ex.memory(),
                "transfers": list(transport.log.entries),
                "timeline": tuple(ex.timeline),
                "values": dict(ex.traced),
                "undelivered": undelivered,
                "late": late,
                "where": ex.where(),
            }
        finally:
            self._close(run_id, ex.where())


# -- the controller ----------------------------------------------------------------------------


class _Outputs(Mapping):
    """device -> its output shards, fetched from the device actor on first access."""

    def __init__(self, refs: Mapping[int, list], calls: Counter):
        self._refs = dict(refs)
        self._calls = calls
        self._got: dict[int, tuple[np.ndarray, ...]] = {}

    def __getitem__(self, device: int) -> tuple[np.ndarray, ...]:
        if device not in self._got:
            if device not in self._refs:
                raise KeyError(device)
            ray = _import_ray()
            self._calls["get"] += 1
            try:
                got = ray.get(self._refs[device])
            except ray.exceptions.ObjectLostError as e:  # OwnerDiedError too: the actor held them
                raise _outputs_lost(device, e) from e
            self._got[device] = tuple(np.array(a, copy=True) for a in got)
        return self._got[device]

    def fetch(self) -> "_Outputs":
        """Every device's shards in one call."""
        missing = [d for d in self._refs if d not in self._got]
        if missing:
            ray = _import_ray()
            self._calls["get"] += 1
            try:
                flat = ray.get([r for d in missing for r in self._refs[d]])
            except ray.exceptions.ObjectLostError:
                for d in missing:  # which device's: fetch one by one
                    self[d]
                raise
            i = 0
            for d in missing:
                n = len(self._refs[d])
                self._got[d] = tuple(np.array(a, copy=True) for a in flat[i:i + n])
                i += n
        return self

    def __iter__(self):
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)


def _outputs_lost(device: int, cause: BaseException) -> BaseException:
    from .errors import DeviceLostError

    return DeviceLostError(
        f"device {device}'s Ray actor died after the run, and its output shards with it (they stay on "
        f"the device until fetched): run the program again (RayMesh.repair() restarts the device; "
        f"retries= does it for you). Ray said: {type(cause).__name__}",
        device=device, lost=(device,),
    )


class RayMesh:
    """Device actors for ``mesh`` (or the ``devices`` ids), alive until ``close`` / the end of
    the ``with`` block. ``calls`` counts the controller's Ray calls (kind -> count)."""

    _keys = itertools.count()
    _last_run = -1  # the latest run id (set per mesh by each run)

    def __init__(self, mesh=None, address: str | None = None, node_axes: Sequence[str] | str | None = None, *,
                 devices: Sequence[int] | None = None, actor_cpus: float | None = None,
                 node_strategy: str = "STRICT_SPREAD", placement_timeout: float = 60.0,
                 start_timeout: float = 60.0):
        if devices is None:
            if mesh is None:
                raise TypeError("RayMesh needs a mesh or devices=")
            devices = mesh.device_ids
        if node_axes is not None:
            if mesh is None:
                raise TypeError("RayMesh: node_axes= needs the mesh (it names mesh axes)")
            if isinstance(node_axes, str):
                node_axes = (node_axes,)
            node_axes = tuple(node_axes)
            if sorted(int(d) for d in devices) != sorted(mesh.device_ids):
                raise ValueError("RayMesh: with node_axes= the devices must be the mesh's devices")
        self.mesh = mesh
        self.devices = tuple(int(d) for d in devices)
        self.address = address
        self.node_axes = node_axes
        self.node_strategy = node_strategy
        self.placement_timeout = placement_timeout
        self.actor_cpus = actor_cpus
        self.plan = None  # the NodePlan when node_axes is given (runtime/nodes.py)
        self.placement_group = None
        self._options: dict[int, dict] = {}  # each device's actor options, set by start()
        self.start_timeout = float(start_timeout)
        self.actors: dict[int, Any] = {}
        self.calls: Counter = Counter()
        self._run_ids = itertools.count()
        self._loaded: dict[int, Any] = {}  # id(spmd) -> key

    # -- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> "RayMesh":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "RayMesh":
        if self.actors:
            return self
        ray = ensure_ray(self.address)
        cpus = self.actor_cpus if self.actor_cpus is not None else self._default_actor_cpus(ray)
        options = {d: dict(num_cpus=cpus, max_concurrency=1000, name=None) for d in self.devices}
        if self.node_axes is not None:
            from .nodes import actor_options, node_plan, placement_group_for

            self.plan = node_plan(self.mesh, self.node_axes, cpus_per_device=cpus, strategy=self.node_strategy)
            self.placement_group = placement_group_for(self.plan, timeout=self.placement_timeout)
            self.calls["remote"] += 1
            for d in self.devices:
                options[d].update(actor_options(self.plan, self.placement_group, d))
        self._options = options  # a restarted device gets the same options (and bundle)
        # the actor class travels by value: a worker must not import another checkout's runtime
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        cls = ray.remote(DeviceActor)
        try:
            self.actors = {d: cls.options(**options[d]).remote(d, _RUNTIME_DIR) for d in self.devices}
            self.calls["remote"] += len(self.devices)
            try:
                ray.get([a.connect.remote(self.actors) for a in self.actors.values()], timeout=self.start_timeout)
            except ray.exceptions.GetTimeoutError:
                free = ray.available_resources().get("CPU", 0.0)
                raise RuntimeError(
                    f"could not start {len(self.devices)} device actors within {self.start_timeout:g} s "
                    f"({options[self.devices[0]].get('num_cpus')} CPU each; the cluster has {free:g} CPU free): "
                    "close other RayMeshes, or pass actor_cpus= smaller"
                ) from None
        except BaseException:
            self.close()
            raise
        self.calls["remote"] += len(self.devices)
        self.calls["get"] += 1
        return self

    def _default_actor_cpus(self, ray) -> float:
        """Half the CPUs the devices will run on, shared out, at most ``ACTOR_CPUS_MAX`` each
        (rounded down to Ray's 1e-4 grid). Without ``node_axes`` the whole cluster's CPUs count;
        with it, those of the ``k``-th largest node for ``k`` nodes, over its devices."""
        if self.node_axes is None:
            total, per = float(ray.cluster_resources().get("CPU", 1.0)), len(self.devices)
        else:
            from .nodes import node_plan

            shape = node_plan(self.mesh, self.node_axes, cpus_per_device=1.0, strategy=self.node_strategy)
            per = shape.devices_per_node
            node_cpus = sorted((float(n["Resources"].get("CPU", 0.0)) for n in ray.nodes() if n.get("Alive")),
                               reverse=True)
            if self.node_strategy in ("SPREAD", "PACK", "STRICT_PACK"):
                total = sum(node_cpus) / shape.num_nodes  # bundles may share a node
            else:
                # too few nodes: keep the fraction small, placement_group_for refuses the plan clearly
                total = node_cpus[shape.num_nodes - 1] if len(node_cpus) >= shape.num_nodes else 1.0
        return max(0.001, min(ACTOR_CPUS_MAX, int(max(total, 0.0) / (2 * per) * 1e4) / 1e4))

    def device_nodes(self) -> dict[int, str]:
        """Each device to the Ray node id its actor was placed on (with ``node_axes``; ``start``
        first). Without ``node_axes``, asks each actor where it runs."""
        ray = _import_ray()
        self.start()
        if self.plan is not None:
            from .nodes import device_nodes

            return device_nodes(self.plan, self.placement_group)
        ids = ray.get([self.actors[d].node_id.remote() for d in self.devices])
        self.calls["remote"] += len(self.devices)
        self.calls["get"] += 1
        return dict(zip(self.devices, ids))

    def close(self) -> None:
        ray = _import_ray()
        for a in self.actors.values():
            try:
                ray.kill(a)
            except Exception:
                pass
        self.actors = {}
        if self.placement_group is not None:
            from .nodes import remove

            try:
                remove(self.placement_group)
            except Exception:
                pass
            self.placement_group = None

    def pid(self, device: int) -> int:
        ray = _import_ray()
        return ray.get(self.actors[device].pid.remote())

    # -- programs ------------------------------------------------------------------------------
    def load(self, spmd, *, device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct"):
        """Ship each device its schedule (once); returns the key runs refer to."""
        from simshard.report.memory import capacity_of

        from .collectives import check_algorithm

        check_algorithm(algorithm)  # here, not on every device at its first collective
        ray = _import_ray()
        self.start()
        missing = [d for d in spmd.devices if d not in self.actors]
        if missing:
            raise ValueError(f"the program has schedules for devices {missing}, which this RayMesh does not hold")
        key = next(self._keys)
        trace = tuple(sorted(spmd.checkpoint_buffers))
        refs = []
        shipped = self._shipped()[key] = {}  # device -> load arguments, to load a restarted device again
        for s in spmd.schedules:
            a = self.actors[s.device]
            shipped[s.device] = (s.to_bytes(), capacity_of(device_memory, s.device), algorithm, trace, timeout)
            refs.append(a.load.remote(key, *shipped[s.device]))
        self.calls["remote"] += len(refs)
        ray.get(refs)
        self.calls["get"] += 1
        return key

    def unload(self, key) -> None:
        """Drop a loaded program from every device (and from what a restart would ship again)."""
        ray = _import_ray()
        per = self._shipped().pop(key, {})
        refs = [self.actors[d].unload.remote(key) for d in per if d in self.actors]
        self.calls["remote"] += len(refs)
        if refs:
            try:
                ray.get(refs)
            except ray.exceptions.RayActorError:
                pass  # a dead device holds nothing any more
            self.calls["get"] += 1

    def compile(self, f, *args, in_shardings=None, out_shardings=None, static_argnums: Sequence[int] = (),
                strategy: str = "user_priority", device_memory=None, timeout: float = 10.0,
                algorithm: str = "direct") -> "Compiled":
        """Trace, propagate and partition ``f`` (the arguments of ``ss.run``) and ship the
        schedules to the device actors once."""
        from simshard.partition import partition
        from simshard.propagate.prepare import prepare, static_of

        program, _ = prepare(f, *args, mesh=self.mesh, in_shardings=in_shardings, out_shardings=out_shardings,
                              static_argnums=static_argnums, strategy=strategy)
        spmd = partition(program)
        key = self.load(spmd, device_memory=device_memory, timeout=timeout, algorithm=algorithm)
        return Compiled(self, key, spmd, program, static_of(f, static_argnums))

    # -- running -----------------------------------------------------------------------------
    def execute(self, key, spmd, inputs: Mapping[int, Sequence[np.ndarray]], *, trace_values: bool = False,
                abort_wait: float = 10.0, lost_grace: float = 2.0, retries: int = 0):
        """Run loaded program ``key`` on each device's input shards; an ``Execution`` whose
        outputs stay on the devices until asked for.

        ``retries``: when a device's actor dies, restart it (``repair``: a fresh actor, every peer
        given its new handle, the schedules loaded again) and run the whole program again, under a
        new run id (messages of the failed attempt are ignored), up to ``retries`` more times; the
        shards are put once and sent again. The ``Execution`` is the successful attempt's
        (``attempts``: how many were made; ``controller_calls``: all of them). Once the retries
        are spent the last attempt's ``DeviceLostError`` is raised."""
        from .errors import DeviceLostError
        from .local import _check_inputs

        _check_inputs(spmd, inputs)
        if retries < 0:
            raise ValueError(f"retries must be >= 0, not {retries}")
        before = Counter(self.calls)
        put = _PutOnce()  # a block several devices hold goes once
        shards = {d: [put(a) for a in inputs[d]] for d in spmd.devices}
        self.calls["put"] += len(put)
        restarted: list[int] = []
        for attempt in range(retries + 1):
            last = attempt == retries
            if attempt:
                restarted += self.repair(floor=self._last_run + 1)
            try:
                ex = self._attempt(key, spmd, shards, trace_values, abort_wait, lost_grace if last else 0.0)
            except DeviceLostError as e:
                if last:
                    e.attempts = attempt + 1
                    raise
                continue
            object.__setattr__(ex, "controller_calls", dict(self.calls - before))
            object.__setattr__(ex, "attempts", attempt + 1)
            object.__setattr__(ex, "restarted", tuple(restarted))
            return ex
        raise AssertionError("unreachable")

    def _attempt(self, key, spmd, shards: Mapping[int, list], trace_values: bool, abort_wait: float,
                 lost_grace: float):
        """One run of the program on every device (see ``execute``)."""
        from simshard.report.memory import MemoryReport

        from .local import Execution
        from .transport import TransferLog

        ray = _import_ray()
        run_id = self._last_run = next(self._run_ids)
        pending: dict[Any, int] = {}
        for d in spmd.devices:
            pending[self.actors[d].run.remote(key, run_id, bool(trace_values), *shards[d])] = d
            self.calls["remote"] += 1
        results: dict[int, dict] = {}
        dead: dict[int, BaseException] = {}
        told_dead: set[int] = set()
        deadline: float | None = None  # once something failed: when to stop waiting
        aborted = False

        def abort():
            nonlocal aborted, deadline
            aborted, deadline = True, time.monotonic() + abort_wait
            for d in pending.values():
                self.actors[d].abort.remote(run_id)
                self.calls["remote"] += 1

        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
            self.calls["wait"] += 1
            if not ready:
                if aborted:
                    break  # aborted devices that do not answer: reported as such
                abort()  # survivors of a dead device that did not fail in the grace time
                continue
            for ref in ready:
                d = pending.pop(ref)
                self.calls["get"] += 1
                try:
                    results[d] = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    dead[d] = e
                except ray.exceptions.RayTaskError as e:
                    results[d] = {"status": "error", "error": getattr(e, "cause", e), "where": "unknown"}
            if aborted or not pending:
                continue
            if any(r["status"] != "ok" for r in results.values()):
                abort()  # a device failed: stop the others now
            elif set(dead) - told_dead and lost_grace <= 0:
                abort()  # a device died and the run will be tried again: stop the others now
            elif set(dead) - told_dead:
                # a device died: the others run on until they need it (and so name what they
                # waited for), then fail; whatever still runs after the grace time is aborted
                told_dead |= set(dead)
                deadline = time.monotonic() + lost_grace
                for d in pending.values():
                    self.actors[d].peer_lost.remote(run_id, tuple(sorted(told_dead)))
                    self.calls["remote"] += 1
        for d in pending.values():
            results[d] = {"status": "aborted", "where": "not answering", "waits": []}
        if dead or any(r["status"] != "ok" for r in results.values()):
            raise _failure(spmd, results, dead)
        unreceived = [(src, d, k, note) for d in spmd.devices for src, k, note in results[d]["undelivered"]]
        # a message that reached its receiver after that had finished, as its sender heard
        unreceived += [(s, d, k, note) for s in spmd.devices for d, k, note in results[s].get("late", ())]
        if unreceived:
            from .errors import ScheduleMismatchError

            src, d, k, note = unreceived[0]
            raise ScheduleMismatchError(
                f"schedules do not match: device {src} sent message {k} (instruction id {k[0]}, sent {note}) to "
                f"device {d}, which finished without receiving it",
                devices=(src, d), positions={src: note, d: results[d]["where"]},
            )
        log = TransferLog()
        for d in spmd.devices:
            for e in results[d]["transfers"]:
                log.record(e.device, e.peer, e.direction, e.key, e.nbytes)
        records = tuple(r for d in spmd.devices for r in results[d]["records"])
        memory = MemoryReport(tuple(results[d]["memory"] for d in spmd.devices))
        values = {d: results[d]["values"] for d in spmd.devices} if trace_values else {}
        outputs = _Outputs({d: results[d]["outputs"] for d in spmd.devices}, self.calls)
        timeline = {d: results[d]["timeline"] for d in spmd.devices}
        return Execution(spmd, outputs, records, memory, log, values, timeline)

    def run_spmd(self, spmd, inputs, *, device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct",
                 trace_values: bool = False, retries: int = 0):
        """Load and run an ``SpmdProgram`` once (``run_local``'s arguments)."""
        key = self.load(spmd, device_memory=device_memory, timeout=timeout, algorithm=algorithm)
        return self.execute(key, spmd, inputs, trace_values=trace_values, retries=retries)

    # -- restarting lost devices -------------------------------------------------------------
    def _shipped(self) -> dict:
        if not hasattr(self, "_shipped_args"):
            self._shipped_args: dict[Any, dict[int, tuple]] = {}  # key -> device -> load arguments
        return self._shipped_args

    def lost(self, timeout: float = 5.0) -> list[int]:
        """The devices whose actor is dead or does not answer within ``timeout`` seconds."""
        ray = _import_ray()
        refs = {self.actors[d].pid.remote(): d for d in self.devices}
        self.calls["remote"] += len(refs)
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        self.calls["wait"] += 1
        gone = {d for r, d in refs.items() if r not in ready}
        for r in ready:
            try:
                ray.get(r)
            except Exception:  # RayActorError: the actor is gone
                gone.add(refs[r])
        self.calls["get"] += 1
        return sorted(gone)

    def _actor_options(self, device: int) -> dict:
        """The options of a restarted device's actor: those ``start`` gave it (fractional CPUs, and
        its placement-group bundle when ``node_axes`` is set)."""
        return dict(self._options[device])

    def repair(self, floor: int | None = None, tries: int = 3) -> list[int]:
        """Restart every lost device (``lost``): a fresh ``DeviceActor`` for the same device id,
        every actor given the new handles (and ``floor``: runs below it are over, their late
        messages dropped), and every program loaded so far shipped to it again (the schedules'
        msgpack bytes are kept here). Returns the devices restarted."""
        ray = _import_ray()
        floor = self._last_run + 1 if floor is None else floor
        restarted: list[int] = []
        for _ in range(tries):
            gone = self.lost()
            if not gone:
                return restarted
            cls = ray.remote(DeviceActor)
            for d in gone:
                try:
                    ray.kill(self.actors[d])  # one that did not answer
                except Exception:
                    pass
                self.actors[d] = cls.options(**self._actor_options(d)).remote(d, _RUNTIME_DIR)
                self.calls["remote"] += 1
            refs = [a.connect.remote(self.actors, floor) for a in self.actors.values()]
            refs += [self.actors[d].load.remote(k, *per[d]) for k, per in self._shipped().items()
                     for d in gone if d in per]
            self.calls["remote"] += len(refs)
            try:
                ray.get(refs)
            except ray.exceptions.RayActorError:
                pass  # another actor died meanwhile: look again
            finally:
                self.calls["get"] += 1
            restarted += gone
        if self.lost():
            raise RuntimeError(f"RayMesh.repair: devices {self.lost()} still do not answer after {tries} restarts")
        return restarted


def _failure(spmd, results: dict[int, dict], dead: dict[int, BaseException]) -> BaseException:
    from .errors import DeviceLostError, ExecutionError, ScheduleMismatchError
    from .executor import describe

    positions = {d: r.get("where", "unknown") for d, r in results.items()}
    if dead:
        d = min(dead)
        waiting = []  # (peer, instruction id) of survivors waiting for d
        for p, r in sorted(results.items()):
            for src, k in r.get("waits", ()):
                if src == d:
                    waiting.append((p, k[0]))
            err = r.get("error")
            if isinstance(err, ScheduleMismatchError) and d in getattr(err, "devices", ()) and err.instr is not None:
                waiting.append((p, err.instr))
        instr = position = None
        at = "its position is unknown (no surviving device was waiting for it)"
        if waiting:
            peer, instr = waiting[0]
            sched = spmd.schedule(d)
            position = next((i for i, ins in enumerate(sched.instrs) if ins.id == instr), None)
            what = f"[{instr}]" if position is None else f"position {position} {describe(sched.instrs[position])}"
            at = (f"it had not finished its part of instruction {what}: device {peer} was waiting for it "
                  f"({positions[peer]})")
        cause = str(dead[d]).strip().splitlines()[0] if str(dead[d]).strip() else type(dead[d]).__name__
        others = f" (devices {sorted(dead)} died)" if len(dead) > 1 else ""
        return DeviceLostError(
            f"device {d}'s Ray actor died during the run{others}; {at}. Ray said: {cause}",
            device=d, position=position, instr=instr, positions=positions, lost=tuple(sorted(dead)),
        )
    errors = {d: r["error"] for d, r in results.items() if r["status"] == "error"}
    own = {d: e for d, e in errors.items() if not isinstance(e, ScheduleMismatchError)}
    pick = own or errors
    if pick:
        e = pick[min(pick)]
        return e if isinstance(e, BaseException) else ExecutionError(str(e))
    return ExecutionError(f"the run was aborted without an error (devices: {positions})")


class Compiled:
    """A program loaded on a ``RayMesh``: call it with the function's arguments to run it."""

    def __init__(self, mesh: RayMesh, key, spmd, program, static: frozenset[int]):
        self.devices = mesh
        self.key = key
        self.spmd = spmd
        self.program = program
        self.static = static

    def __call__(self, *args, trace_values: bool = False, retries: int = 0) -> "RayResult":
        from simshard.propagate.prepare import dynamic_leaves

        from .placement import shard_inputs

        inputs = shard_inputs(self.spmd, *dynamic_leaves(args, self.static))
        return RayResult(self, self.devices.execute(self.key, self.spmd, inputs, trace_values=trace_values,
                                                    retries=retries))


class RayResult:
    """One run of a ``Compiled``: outputs stay on the devices until ``outputs`` / ``shards``."""

    def __init__(self, compiled: Compiled, execution):
        self.compiled = compiled
        self.execution = execution
        self.controller_calls = execution.controller_calls

    @property
    def outputs(self):
        from .placement import assemble_outputs

        out = assemble_outputs(self.compiled.spmd, self.execution.outputs.fetch())
        tree = self.compiled.program.out_tree
        if tree is None:
            return out
        import optree

        return optree.tree_unflatten(tree, list(out))

    def shards(self, device: int) -> tuple[np.ndarray, ...]:
        return tuple(self.execution.outputs[device])

    @property
    def comm(self):
        return self.execution.comm

    @property
    def memory(self):
        return self.execution.memory

    @property
    def records(self):
        return self.execution.records


def _mesh_of(spmd):
    for s in (*spmd.in_shardings, *spmd.out_shardings):
        mesh = getattr(s, "mesh", None)
        if mesh is not None:
            return mesh
    return None


def run_ray(spmd, inputs, *, address: str | None = None, node_axes: Sequence[str] | str | None = None, mesh=None,
            device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct", trace_values: bool = False,
            retries: int = 0, progress=None, ray_mesh: "RayMesh | None" = None, **mesh_options):
    """``run_local``'s counterpart: fresh device actors for one run (outputs fetched before they go).
    ``node_axes`` (with the program's mesh, or ``mesh=``) places them on nodes (``RayMesh``);
    ``retries``: see ``RayMesh.execute``; ``mesh_options`` are ``RayMesh``'s keyword options
    (``actor_cpus``, ``node_strategy``, ...); ``progress(stage)`` is told when the actors start and
    when the run starts. ``ray_mesh``: run on these device actors instead (kept alive; the program
    is loaded for this run and unloaded after it)."""
    say = progress or (lambda stage: None)
    run = dict(device_memory=device_memory, timeout=timeout, algorithm=algorithm, trace_values=trace_values,
               retries=retries)
    if ray_mesh is not None:
        if address is not None or node_axes is not None or mesh_options:
            raise ValueError("run_ray: with ray_mesh= the actors exist already; address=, node_axes= and actor "
                             "options belong to the RayMesh")
        missing = sorted(set(spmd.devices) - set(ray_mesh.devices))
        if missing:
            raise ValueError(f"run_ray: the program runs on devices {missing}, which the given RayMesh does not hold")
        return _run_once(ray_mesh, spmd, inputs, say, keep=True, **run)
    if node_axes is not None:
        mesh = mesh or _mesh_of(spmd)
        if mesh is None:
            raise ValueError("run_ray: node_axes= needs the mesh; pass mesh=")
        m = RayMesh(mesh, address, node_axes, devices=spmd.devices, **mesh_options)
    else:
        m = RayMesh(devices=spmd.devices, address=address, **mesh_options)
    try:
        return _run_once(m, spmd, inputs, say, keep=False, **run)
    finally:
        m.close()


def _run_once(m: RayMesh, spmd, inputs, say, *, keep: bool, device_memory, timeout, algorithm, trace_values,
              retries):
    """Load ``spmd`` on ``m`` (started first if need be), run it, fetch its outputs; a mesh that
    is ``keep``-t drops the program again after the run."""
    if not m.actors:
        say(f"starting {len(m.devices)} Ray device actors")
        m.start()
    key = m.load(spmd, device_memory=device_memory, timeout=timeout, algorithm=algorithm)
    try:
        say(f"running on {len(spmd.devices)} Ray device actors")
        ex = m.execute(key, spmd, inputs, trace_values=trace_values, retries=retries)
        ex.outputs.fetch()
        return ex
    finally:
        if keep:
            m.unload(key)


__all__ = ["Compiled", "DeviceActor", "RayMesh", "RayResult", "ensure_ray", "run_ray"]
