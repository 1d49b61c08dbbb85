"""The mesh of device actors (``RayMesh``) and the controller that runs programs on it.

The controller makes one call per device process per run, for the process's devices, and reads
their summaries back: on its control line to the process (``control_line.py``: the plan, small
input shards by value) or, where a shard is large, an input is a Ray object, the process is on
another node or the data plane is "ray", as a Ray ``run`` call after a ``ray.put`` per distinct
input block. Outputs stay on
the devices until asked for (``Execution.outputs[device]`` fetches one device's, ``assemble``
all of them). ``RayMesh.calls`` counts every call the controller made.

    with RayMesh(mesh) as devices:                     # actors kept alive across runs
        compiled = devices.compile(f, x, w, in_shardings=(P("x", None), None))
        res = compiled(x, w)                           # run again and again
        res.outputs, res.shards(3), res.comm, res.controller_calls

On a cluster: ``RayMesh(mesh, address="<head>:6379", node_axes=("host",))`` plans the devices
onto nodes (``runtime/nodes.py``: devices sharing every coordinate of ``node_axes`` share a node),
reserves one placement-group bundle per node and pins each device actor to its node's bundle;
``close`` removes the group. ``device_nodes()`` says which Ray node each device is on, and
``routes(device)`` how its messages reach each other device.

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

import contextlib
import gc
import itertools
import os
import pickle
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from . import ray_actor, ray_start, ray_transport
from .wire import control_line
from .wire.control_line import INLINE_MAX, ControlLine, Outcome, OutcomeKind, Request
from .ray_actor import DeviceHost
from .ray_start import ACTOR_CPUS_MAX, RUNTIME_DIR, ensure_ray, import_ray
from .compiled import Compiled, Result, compile_on, put as put_arrays
from .ray_transport import PutOnce

RayResult = Result  # the name a run on a RayMesh has always had

# How messages between device processes travel: "sockets" (a frame on a socket: a Unix socket
# between processes of one node, an array from SHM_BYTES up in a shared-memory file the frame
# names; TCP between nodes) or "ray" (every message a Ray actor call): runtime/socket_channel.py.
DATA_PLANES = ("sockets", "ray")


class Held:
    """The driver's handle on an array a device's host process keeps (a run's output): passed to a
    later run of the same device it stays where it is; ``RayMesh.fetch`` brings it here. When the
    last handle goes, the array is released (batched into the mesh's next call on that host)."""

    __slots__ = ("host", "id", "_released")

    def __init__(self, host, id: int, released: dict):
        self.host, self.id, self._released = host, id, released

    def __del__(self):
        try:
            self._released.setdefault(self.host, []).append(self.id)
        except Exception:  # interpreter shutdown
            pass


def _lost_kinds() -> tuple:
    """What a fetch from a process that died raises: Ray's error for a dead actor, or the broken
    control line's."""
    return import_ray().exceptions.RayActorError, ConnectionError


class _Outputs(Mapping):
    """device -> its output shards, kept by its host process and fetched from it on first access
    (``fetch``: ``RayMesh._fetch_held``)."""

    def __init__(self, held: Mapping[int, list], fetch):
        self._held = dict(held)
        self._fetch = fetch
        self._got: dict[int, tuple[np.ndarray, ...]] = {}

    def __getitem__(self, device: int) -> tuple[np.ndarray, ...]:
        if device not in self._got:
            if device not in self._held:
                raise KeyError(device)
            try:
                self._got[device] = tuple(self._fetch(self._held[device]))
            except _lost_kinds() as e:  # the process died, and the arrays it kept
                raise _outputs_lost(device, e) from e
        return self._got[device]

    def fetch(self) -> "_Outputs":
        """Every device's shards, one call per host process."""
        missing = [d for d in self._held if d not in self._got]
        if missing:
            try:
                flat = self._fetch([h for d in missing for h in self._held[d]])
            except _lost_kinds():
                for d in missing:  # which device's: fetch one by one
                    self[d]
                raise
            i = 0
            for d in missing:
                n = len(self._held[d])
                self._got[d] = tuple(flat[i:i + n])
                i += n
        return self

    def handles(self) -> dict[int, list]:
        """device -> its outputs' ``Held`` handles, left where they are."""
        return dict(self._held)

    def __iter__(self):
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)


def _said(cause: BaseException) -> str:
    """Who reported a process dead: Ray (its actor error) or the driver (its control line broke)."""
    return "Ray said" if type(cause).__module__.startswith("ray") else "The driver saw"


def _outputs_lost(device: int, cause: BaseException) -> BaseException:
    from .errors import DeviceLostError

    return DeviceLostError(
        f"device {device}'s Ray actor died after the run, and its output shards with it (they stay on "
        f"the device until fetched): run the program again (RayMesh.repair() restarts the device; "
        f"retries= does it for you). {_said(cause)}: {type(cause).__name__}",
        device=device, lost=(device,),
    )


def _lost_at_load(devices, cause: BaseException, attempts: int) -> BaseException:
    from .errors import DeviceLostError

    devices = tuple(sorted(devices))
    which = f"device {devices[0]}" if len(devices) == 1 else f"devices {list(devices)}"
    return DeviceLostError(
        f"{which}: Ray actor gone while the program was loading (before it ran): RayMesh.repair() restarts "
        f"it; load(..., retries=1), or retries= on a run, does it for you. Ray said: {type(cause).__name__}",
        lost=devices, attempts=attempts,
    )


def _unpickle(summary: bytes):
    """A device host's summary (``DeviceHost.run``), unpickled with the garbage collector paused:
    its thousands of small acyclic objects (a record and a span per instruction, a row per
    message) would otherwise set off collections, some of them over the driver's whole heap,
    which cost more than the unpickling itself (measured: 3 to 60 us per instruction instead of 3)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(summary)
    finally:
        if was_enabled:
            gc.enable()


class RayMesh:
    """Device actors for ``mesh`` (or the ``devices`` ids), alive until ``close`` / the end of
    the ``with`` block. ``calls`` counts the controller's Ray calls (kind -> count).
    ``devices_per_process=k``: ``k`` consecutive devices share one actor process (``groups``),
    messages between them staying in it (see ``runtime/ray_actor.py``); by default one device per
    process up to ``max(8, 2 * CPUs)`` devices on a local Ray, more beyond (``auto_per_process``),
    and one per process on a cluster (``address=`` or ``node_axes=``). ``data_plane``: how
    messages between processes travel (``DATA_PLANES``). ``busy_poll``: whether a waiting device
    process polls for its message before it sleeps (``runtime/busy_poll.py``); by default on the
    sockets data plane where a node has a core for each of its device processes (``polls``)."""

    _keys = itertools.count()
    _last_run = -1  # the latest run id (set per mesh by each run)

    def __init__(self, mesh=None, address: str | None = None, node_axes: Sequence[str] | str | None = None, *,
                 devices: Sequence[int] | None = None, actor_cpus: float | None = None,
                 node_strategy: str = "STRICT_SPREAD", placement_timeout: float = 60.0,
                 start_timeout: float = 60.0, devices_per_process: int | None = None, data_plane: str = "sockets",
                 busy_poll: bool | None = None):
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
        if devices_per_process is None:
            devices_per_process = 1 if address is not None or node_axes is not None else auto_per_process(len(self.devices))
        self.groups = _process_groups(self.devices, devices_per_process)
        if data_plane not in DATA_PLANES:
            raise ValueError(f"RayMesh: data_plane must be one of {', '.join(DATA_PLANES)}, not {data_plane!r}")
        self.data_plane = data_plane
        self.busy_poll = busy_poll
        self._polls: dict[int, bool] = {}  # device -> whether its process busy-polls (set on connect)
        self._secret = os.urandom(16)  # a socket connection must start with it
        self._sockets: dict[int, tuple] = {}  # device -> (node id, address, TCP address) of its process
        self._lines: dict[tuple[int, ...], ControlLine] = {}  # group -> the driver's line to its process
        self._line_lock = threading.Lock()  # held by the thread whose run is on the lines
        self._released: dict[Any, list[int]] = {}  # host handle -> ids of kept arrays nobody holds
        self.address = address
        self.node_axes = node_axes
        self.node_strategy = node_strategy
        self.placement_timeout = placement_timeout
        self.actor_cpus = actor_cpus
        self.plan = None  # the NodePlan when node_axes is given (runtime/nodes.py)
        self.placement_group = None
        self._options: dict[int, dict] = {}  # each device's actor options, set by start()
        self.start_timeout = float(start_timeout)
        self.actors: dict[int, Any] = {}  # device -> the handle of its host actor (shared by its group)
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
        self._check_groups()
        # the actor class travels by value, with the modules it runs on: a worker must not import
        # another checkout's runtime before ``bootstrap`` has bound the driver's
        for module in (ray_start, ray_transport, ray_actor):
            ray.cloudpickle.register_pickle_by_value(module)
        try:
            for group in self.groups:
                self._start_host(group)
            try:
                self._connect(self.groups, None, timeout=self.start_timeout)
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
        self.calls["remote"] += len(self.groups)
        self.calls["get"] += 1
        return self

    def _start_host(self, group: tuple[int, ...]) -> None:
        """A fresh host actor for the devices ``group`` (their options, CPUs summed)."""
        ray = import_ray()
        opts = self._actor_options(group[0])
        opts["num_cpus"] = opts.get("num_cpus", 0) * len(group)
        handle = ray.remote(DeviceHost).options(**opts).remote(group, RUNTIME_DIR)
        self.calls["remote"] += 1
        for d in group:
            self.actors[d] = handle

    def _check_groups(self) -> None:
        """With node_axes, a host's devices must share a node (one placement-group bundle)."""
        if self.plan is None:
            return
        for g in self.groups:
            bundles = {self.plan.bundle_index(d) for d in g}
            if len(bundles) > 1:
                raise ValueError(
                    f"RayMesh: devices_per_process={len(g)} puts devices {list(g)} in one process, but node_axes="
                    f"{self.node_axes} places them on {len(bundles)} nodes; choose a devices_per_process dividing "
                    f"the devices per node ({self.plan.devices_per_node})")

    def _connect(self, new_groups, floor: int | None, timeout: float | None = None) -> None:
        """Tell every host process where every device is: its handle and, on the sockets data plane,
        the socket address of its process (``new_groups`` have just started and open theirs)."""
        ray = import_ray()
        if self.data_plane == "sockets":
            got = ray.get([self.actors[g[0]].listen.remote(self._secret) for g in new_groups], timeout=timeout)
            self.calls["remote"] += len(new_groups)
            self.calls["get"] += 1
            here = ray.get_runtime_context().get_node_id()
            for g, where in zip(new_groups, got):
                self._sockets.update((d, tuple(where[:3])) for d in g)
                self._open_line(g, where[3] if where[0] == here else None, timeout)
        sockets = self._sockets if self.data_plane == "sockets" else None
        polls = ray.get([self.actors[g[0]].connect.remote(self.actors, floor, sockets, self._secret, self.busy_poll)
                         for g in self.groups], timeout=timeout)
        self._polls = {d: p for g, p in zip(self.groups, polls) for d in g}
        self.calls["remote"] += len(self.groups)
        self.calls["get"] += 1

    def _open_line(self, group: tuple[int, ...], address: str | None, timeout: float | None) -> None:
        """The driver's line to ``group``'s (new) process, at ``address`` (None: on another node,
        where its runs stay Ray calls); a line that does not open leaves Ray calls too."""
        old = self._lines.pop(group, None)
        if old is not None:
            old.close()
        if address is not None:
            try:
                self._lines[group] = ControlLine(address, self._secret, timeout=timeout or 10.0)
            except OSError:
                pass

    def _call(self, device: int, method: str, *args):
        """``method`` of ``device``, on its host actor."""
        self.calls["remote"] += 1
        return getattr(self.actors[device], method).remote(device, *args)

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
        return max(1e-4, min(ACTOR_CPUS_MAX, int(max(total, 0.0) / (2 * per) * 1e4) / 1e4))  # Ray's finest grid

    def device_nodes(self) -> dict[int, str]:
        """Each device to the Ray node id its actor was placed on (with ``node_axes``; ``start``
        first). Without ``node_axes``, asks each actor where it runs."""
        ray = import_ray()
        self.start()
        if self.plan is not None:
            from .nodes import device_nodes

            return device_nodes(self.plan, self.placement_group)
        ids = ray.get([self._call(d, "node_id") for d in self.devices])
        self.calls["get"] += 1
        return dict(zip(self.devices, ids))

    def close(self) -> None:
        ray = import_ray()
        for a in {id(h): h for h in self.actors.values()}.values():
            try:
                ray.kill(a)
            except Exception:
                pass
        self.actors = {}
        for line in self._lines.values():
            line.close()
        self._lines = {}
        from .wire.shared_memory import remove_shared, shared_memory_prefix

        prefix = shared_memory_prefix(self._secret)
        if prefix:
            remove_shared(prefix)  # what processes killed mid-run left in this node's shared memory
        if self.placement_group is not None:
            from .nodes import remove

            try:
                remove(self.placement_group)
            except Exception:
                pass
            self.placement_group = None

    def pid(self, device: int) -> int:
        ray = import_ray()
        return ray.get(self._call(device, "pid"))

    def routes(self, device: int) -> dict[int, str]:
        """How ``device``'s messages reach each other device: "process" (the same worker process),
        "unix" (a socket to another process of its node), "tcp" (a socket to another node's) or
        "ray" (an actor call per message: the ``ray`` data plane)."""
        return import_ray().get(self._call(device, "routes"))

    def polls(self, device: int) -> bool:
        """Whether ``device``'s process busy-polls for messages (``busy_poll``) or sleeps in wait."""
        return self._polls[device]

    # -- programs ------------------------------------------------------------------------------
    def load(self, spmd, *, device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct",
             retries: int = 0):
        """Ship each device its schedule (once); returns the key runs refer to. A device whose actor
        is dead, or dies while loading, is a ``DeviceLostError`` naming it; with ``retries=N`` it is
        restarted (``repair``, which ships it every loaded program again) up to N times instead."""
        from simshard.report.memory import capacity_of

        from .collectives import check_algorithm
        from .user_entries import user_entries

        check_algorithm(algorithm)  # here, not on every device at its first collective
        ray = import_ray()
        self.start()
        missing = [d for d in spmd.devices if d not in self.actors]
        if missing:
            raise ValueError(f"the program has schedules for devices {missing}, which this RayMesh does not hold")
        key = next(self._keys)
        trace = tuple(sorted(spmd.checkpoint_buffers))
        extras = user_entries(spmd)  # ops / reduce ops the user registered in this process
        refs = []
        shipped = self._shipped()[key] = {}  # device -> load arguments, to load a restarted device again
        for s in spmd.schedules:
            shipped[s.device] = (s.to_bytes(), capacity_of(device_memory, s.device), algorithm, trace, timeout, extras)
            refs.append(self._call(s.device, "load", key, *shipped[s.device]))
        for attempt in range(retries + 1):
            try:
                ray.get(refs)
                break
            except ray.exceptions.RayActorError as e:
                gone = self.lost()
                if attempt == retries or not gone:
                    raise _lost_at_load(gone or spmd.devices, e, attempt + 1) from None
                self.repair()  # fresh actors, every loaded program (this one too) shipped again
                refs = []
            finally:
                self.calls["get"] += 1
        return key

    def unload(self, key) -> None:
        """Drop a loaded program from every device (and from what a restart would ship again)."""
        ray = import_ray()
        per = self._shipped().pop(key, {})
        refs = [self._call(d, "unload", key) for d in per if d in self.actors]
        if refs:
            try:
                ray.get(refs)
            except ray.exceptions.RayActorError:
                pass  # a dead device holds nothing any more
            self.calls["get"] += 1

    def compile(self, f, *args, **options) -> Compiled:
        """Trace, propagate and partition ``f`` (the arguments of ``ss.run``; DeviceArrays stand for
        their shapes and, without ``in_shardings``, give their shardings) and ship the schedules to
        the device actors once (``runtime/compiled.py``)."""
        return compile_on(self, f, *args, **options)

    # -- arrays on the devices -------------------------------------------------------------------
    def put(self, x, sharding=None):
        """``x`` (an array or a pytree) sharded onto the devices: DeviceArrays, each device's shard
        kept by its host process (``put_shards``), where a compiled program uses it as it is."""
        self.start()
        return put_arrays(self, x, sharding)

    def put_shards(self, blocks) -> dict[int, "Held"]:
        """Each device's block into its host process, which keeps it (one call per process, a
        block several of its devices hold sent once): ``Held`` handles."""
        ray = import_ray()
        calls = []
        for group in self.groups:
            devs = [d for d in group if d in blocks]
            if not devs:
                continue
            unique = list({id(blocks[d]): blocks[d] for d in devs}.values())
            which = [next(k for k, u in enumerate(unique) if u is blocks[d]) for d in devs]
            calls.append((self.actors[devs[0]], devs, which, self.actors[devs[0]].hold.remote(*unique)))
        self.calls["hold"] += len(calls)
        self.calls["get"] += 1
        ids = ray.get([c[-1] for c in calls])
        return {d: Held(host, got[k], self._released)
                for (host, devs, which, _), got in zip(calls, ids) for d, k in zip(devs, which)}

    def fetch(self, handles: list) -> list:
        """Arrays of shards on the devices: ``Held`` ones from their host processes, Ray objects
        (``put``) from the object store."""
        ray = import_ray()
        self._release_dropped()
        held = [i for i, h in enumerate(handles) if isinstance(h, Held)]
        out = list(handles)
        for i, a in zip(held, self._fetch_held([handles[i] for i in held])):
            out[i] = a
        refs = [i for i, h in enumerate(handles) if not isinstance(h, Held)]
        if refs:
            self.calls["get"] += 1
            for i, a in zip(refs, ray.get([handles[i] for i in refs])):
                out[i] = a
        return out

    def _fetch_held(self, handles: Sequence[Held]) -> list[np.ndarray]:
        """Every handle's array (each the caller's own copy), one call per host process: on the
        control lines where every process it reaches has one, else as Ray calls."""
        by_host: dict[Any, list[int]] = {}
        for i, h in enumerate(handles):
            by_host.setdefault(h.host, []).append(i)
        self.calls["fetch"] += len(by_host)  # one per host process, counted apart from the runs' calls
        ids = {host: [handles[i].id for i in idx] for host, idx in by_host.items()}
        got = self._fetch_on_lines(ids)
        if got is None:
            ray = import_ray()
            refs = {host: host.fetch.remote(i) for host, i in ids.items()}
            self.calls["get"] += 1
            # copies: Ray hands out read-only views of its object store
            got = {host: [np.array(a, copy=True) for a in arrays]
                   for host, arrays in zip(refs, ray.get(list(refs.values())))}
        out: list = [None] * len(handles)
        for host, idx in by_host.items():
            for i, a in zip(idx, got[host]):
                out[i] = a
        return out

    def _fetch_on_lines(self, ids: Mapping[Any, list[int]]) -> dict | None:
        """host -> the arrays of its ``ids``, fetched on the control lines (their bytes out of
        band, read into arrays of the driver's own); None where a process has no line open or
        another thread is on the lines. A broken line raises its ConnectionError, what the
        host's ``fetch`` raised is raised as it is."""
        line_of = {id(self.actors[g[0]]): line for g, line in self._lines.items() if g[0] in self.actors}
        lines = {host: line_of.get(id(host)) for host in ids}
        if any(ln is None or ln.failed is not None for ln in lines.values()):
            return None
        with self._on_lines() as mine:
            if not mine:
                return None
            tag = next(self._run_ids)  # a fresh tag: no run or fetch shares it
            for host, i in ids.items():
                lines[host].send(tag, Request.FETCH, (i,))
            pending = {lines[host]: host for host in ids}
            got = {}
            while pending:
                for line in control_line.wait(list(pending), tag, None):
                    kind, value = line.outcome(tag)
                    if kind is not OutcomeKind.VALUE:
                        raise value
                    got[pending.pop(line)] = value
            return got

    def _args(self, devs, shards: Mapping[int, list]) -> tuple[tuple, list]:
        """The shards of devices ``devs`` as a run call's arguments: (the (position, id) of each
        array their process keeps, the other shards in order)."""
        held, args, position = [], [], 0
        for d in devs:
            for shard in shards[d]:
                if isinstance(shard, Held):
                    if shard.host is not self.actors.get(d):
                        raise ValueError(f"device {d} is given an array kept by another process (an output of a "
                                         "run on another RayMesh, or before the device was restarted): put it again")
                    held.append((position, shard.id))
                else:
                    args.append(shard)
                position += 1
        return tuple(held), args

    def _release_dropped(self) -> list:
        """Tell each host process which of its kept arrays the driver has no handle on any more:
        the calls' refs (nothing waits for them)."""
        refs = []
        while self._released:
            host, ids = self._released.popitem()
            if host in {id(h): h for h in self.actors.values()}.values():
                refs.append(host.release.remote(ids))
                self.calls["release"] += 1  # bookkeeping, not part of a run
        return refs

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
        ray = import_ray()
        shards = {d: list(inputs[d]) for d in spmd.devices}
        stored = None

        def in_object_store() -> dict:
            """The shards with each numpy array put into Ray's object store, once however many
            attempts need them (a block several devices hold goes once; a DeviceArray's shards are
            on the devices already)."""
            nonlocal stored
            if stored is None:
                put = PutOnce()
                stored = {d: [a if isinstance(a, (ray.ObjectRef, Held)) else put(a) for a in ins]
                          for d, ins in shards.items()}
                self.calls["put"] += len(put)
            return stored

        restarted: list[int] = []
        for attempt in range(retries + 1):
            last = attempt == retries
            if attempt:
                restarted += self.repair(floor=self._last_run + 1)
            try:
                ex = self._attempt(key, spmd, shards, in_object_store, trace_values, abort_wait,
                                   lost_grace if last else 0.0)
            except DeviceLostError as e:
                if last:
                    e.attempts = attempt + 1
                    raise
                continue
            object.__setattr__(ex, "controller_calls", dict(self.calls - before))
            object.__setattr__(ex, "attempts", attempt + 1)
            object.__setattr__(ex, "restarted", tuple(restarted))
            object.__setattr__(ex, "data_plane", self.data_plane)
            return ex
        raise AssertionError("unreachable")

    def _lines_for(self, shards: Mapping[int, list]) -> dict | None:
        """The control lines a run goes on (group -> line): every process it reaches has a line
        open and every shard is kept there or small enough to go by value (``INLINE_MAX``); None
        otherwise (the run is Ray calls, its shards in the object store)."""
        ray = import_ray()
        for ins in shards.values():
            for a in ins:
                if not isinstance(a, Held) and (isinstance(a, ray.ObjectRef) or getattr(a, "nbytes", 0) >= INLINE_MAX):
                    return None
        lines = {}
        for group in self.groups:
            if any(d in shards for d in group):
                line = self._lines.get(group)
                if line is None or line.failed is not None:
                    return None
                lines[group] = line
        return lines

    def _attempt(self, key, spmd, shards: Mapping[int, list], in_object_store, trace_values: bool,
                 abort_wait: float, lost_grace: float):
        """One run of the program on every device (see ``execute``): on the control lines where
        it can (``_on_lines``, ``_lines_for``), else by Ray calls with ``in_object_store()``'s
        shards."""
        with self._on_lines() as mine:
            lines = self._lines_for(shards) if mine else None
            return self._run(key, spmd, shards if lines is not None else in_object_store(), lines, trace_values,
                             abort_wait, lost_grace)

    @contextlib.contextmanager
    def _on_lines(self):
        """Whether this thread may use the control lines, held until the block ends: one thread at
        a time (another's wait would drop its answers as stale); a thread that finds them taken,
        or a mesh on the Ray data plane, goes by Ray calls."""
        mine = self.data_plane == "sockets" and self._line_lock.acquire(blocking=False)
        try:
            yield mine
        finally:
            if mine:
                self._line_lock.release()

    def _run(self, key, spmd, shards: Mapping[int, list], lines: dict | None, trace_values: bool,
             abort_wait: float, lost_grace: float):
        """``_attempt`` once its route is chosen: on ``lines`` (group -> line), or Ray calls if None."""
        from simshard.report.memory import MemoryReport

        from .executor import Span
        from .local import Execution
        from .transport import TransferLog

        ray = import_ray()
        run_id = self._last_run = next(self._run_ids)
        # every call made before any is sent: _args may refuse a shard, and then nothing has started
        made = [(group, devs, self._args(devs, shards)) for group in self.groups
                for devs in [tuple(d for d in group if d in shards)] if devs]
        calls = []  # (group, its devices, plan, shards passed)
        for group, devs, (held, args) in made:
            counts = tuple((d, len(shards[d])) for d in devs)
            released = tuple(self._released.pop(self.actors[devs[0]], ()))  # dropped arrays go with the run
            calls.append((group, devs, (key, run_id, bool(trace_values), counts, held, released), args))
        pending: dict[Any, tuple[int, ...]] = {}  # one run call per host (a line, or a ref): its devices
        for group, devs, plan, args in calls:
            if lines is not None:
                lines[group].send(run_id, Request.RUN, (plan, *args))
                self.calls["line"] += 1
                pending[lines[group]] = devs
            else:
                # the plan in one argument (Ray handles each argument on its own), the shards as
                # top-level ones, so that Ray resolves the refs among them
                pending[self.actors[devs[0]].run.remote(plan, *args)] = devs
                self.calls["remote"] += 1
        self._release_dropped()  # hosts this run does not reach
        if lines is not None:
            def wait(left):
                return control_line.wait(list(pending), run_id, left)

            def answer(line) -> Outcome:
                return line.outcome(run_id)  # DEAD: its process died, as Ray would say its actor did
        else:
            def wait(left):
                self.calls["wait"] += 1
                return ray.wait(list(pending), num_returns=1, timeout=left)[0]

            def answer(ref) -> Outcome:
                self.calls["get"] += 1
                try:
                    return Outcome(OutcomeKind.VALUE, ray.get(ref))
                except ray.exceptions.RayActorError as e:  # the host died, with all its devices
                    return Outcome(OutcomeKind.DEAD, e)
                except ray.exceptions.RayTaskError as e:
                    return Outcome(OutcomeKind.ERROR, getattr(e, "cause", e))
        results: dict[int, dict] = {}
        dead: dict[int, BaseException] = {}
        told_dead: set[int] = set()
        deadline: float | None = None  # once something failed: when to stop waiting
        aborted = False

        def abort():
            nonlocal aborted, deadline
            aborted, deadline = True, time.monotonic() + abort_wait
            for devs in pending.values():
                for d in devs:
                    self._call(d, "abort", run_id)

        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(left)
            if not ready:
                if aborted:
                    break  # aborted devices that do not answer: reported as such
                abort()  # survivors of a dead device that did not fail in the grace time
                continue
            for call in ready:
                devs = pending.pop(call)
                kind, value = answer(call)
                if kind is OutcomeKind.VALUE:  # the host's summary
                    results.update(_unpickle(value) if isinstance(value, bytes) else value)
                elif kind is OutcomeKind.DEAD:
                    dead.update((d, value) for d in devs)
                else:
                    results.update((d, {"status": "error", "error": value, "where": "unknown"}) for d in devs)
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
                for devs in pending.values():
                    for d in devs:
                        self._call(d, "peer_lost", run_id, tuple(sorted(told_dead)))
        for devs in pending.values():
            for d in devs:
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
        log = TransferLog.of_rows([row for d in spmd.devices for row in results[d]["transfers"]])
        records = tuple(row for d in spmd.devices for row in results[d]["records"])
        memory = MemoryReport(tuple(results[d]["memory"] for d in spmd.devices))
        values = {d: results[d]["values"] for d in spmd.devices} if trace_values else {}
        outputs = _Outputs({d: [Held(self.actors[d], i, self._released) for i in results[d]["outputs"]]
                            for d in spmd.devices}, self._fetch_held)
        timeline = {d: tuple(map(Span._make, results[d]["timeline"])) for d in spmd.devices}
        ex = Execution(spmd, outputs, records, memory, log, values, timeline)
        object.__setattr__(ex, "control_plane", "ray" if lines is None else "sockets")
        return ex

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
        ray = import_ray()
        refs = {self._call(d, "pid"): d for d in self.devices}
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
        """Restart every lost device (``lost``): a fresh host actor for the same device ids (the
        lost device's whole process group: they shared its process), every host given the new handles (and ``floor``: runs below it are over, their late
        messages dropped), and every program loaded so far shipped to it again (the schedules'
        msgpack bytes are kept here). Returns the devices restarted."""
        ray = import_ray()
        floor = self._last_run + 1 if floor is None else floor
        restarted: list[int] = []
        for _ in range(tries):
            gone = self.lost()
            if not gone:
                return restarted
            groups = [g for g in self.groups if set(g) & set(gone)]
            gone = sorted(d for g in groups for d in g)
            for g in groups:
                try:
                    ray.kill(self.actors[g[0]])  # one that did not answer
                except Exception:
                    pass
                self._start_host(g)
            try:
                self._connect(groups, floor)
            except ray.exceptions.RayActorError:
                pass  # another actor died meanwhile: look again
            refs = [self._call(d, "load", k, *per[d]) for k, per in self._shipped().items()
                     for d in gone if d in per]
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
            f"device {d}'s Ray actor died during the run{others}; {at}. {_said(dead[d])}: {cause}",
            device=d, position=position, instr=instr, positions=positions, lost=tuple(sorted(dead)),
        )
    errors = {d: r["error"] for d, r in results.items() if r["status"] == "error"}
    own = {d: e for d, e in errors.items() if not isinstance(e, ScheduleMismatchError)}
    pick = own or errors
    if pick:
        e = pick[min(pick)]
        return e if isinstance(e, BaseException) else ExecutionError(str(e))
    return ExecutionError(f"the run was aborted without an error (devices: {positions})")


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
    key = m.load(spmd, device_memory=device_memory, timeout=timeout, algorithm=algorithm, retries=retries)
    try:
        say(f"running on {len(spmd.devices)} Ray device actors")
        ex = m.execute(key, spmd, inputs, trace_values=trace_values, retries=retries)
        ex.outputs.fetch()
        return ex
    finally:
        if keep:
            m.unload(key)




def auto_per_process(n: int, cpus: int | None = None) -> int:
    """Devices per process on a local Ray when not given: one each while there are at most
    ``max(8, 2 * cpus)`` devices; beyond that the smallest count dividing ``n`` that keeps the
    processes within that bound (a process per device costs a worker start and context switches:
    64 of them take ~25 s to start on 2 cores)."""
    bound = max(8, 2 * (cpus or os.cpu_count() or 1))
    return next(k for k in range(1, n + 1) if n % k == 0 and n // k <= bound)


def _process_groups(devices: tuple[int, ...], per: int) -> tuple[tuple[int, ...], ...]:
    """The devices in groups of ``per`` consecutive ones in the mesh's device order, one group per
    host process: devices that differ only in the minor mesh axes share a process, as a node's
    accelerators share a host (so messages along those axes stay in the process)."""
    if not isinstance(per, int) or isinstance(per, bool) or per < 1:
        raise ValueError(f"RayMesh: devices_per_process must be a positive int, not {per!r}")
    if len(devices) % per:
        raise ValueError(f"RayMesh: devices_per_process={per} does not divide the {len(devices)} devices")
    return tuple(devices[i:i + per] for i in range(0, len(devices), per))


__all__ = ["Compiled", "RayMesh", "RayResult", "run_ray"]
