"""The mesh of device actors (``RayMesh``) and the controller that runs programs on it.

The controller makes one call per device process per run, for the process's devices, and reads
their summaries back: on its control line to the process (``wire/control_line.py``: the plan, small
input shards by value) or, where a shard is large, an input is a Ray object, the process is on
another node or the data plane is "ray", as a Ray ``run`` call after a ``ray.put`` per distinct
input block (``routes.py``). Outputs stay on the devices until asked for (``Execution.outputs[device]`` fetches one device's, ``assemble``
all of them). ``RayMesh.calls`` counts every call the controller made.

    with RayMesh(mesh) as devices:                     # actors kept alive across runs
        compiled = devices.compile(f, x, w, in_shardings=(P("x", None), None))
        res = compiled(x, w)                           # run again and again
        res.outputs, res.shards(3), res.comm, res.controller_calls

On a cluster: ``RayMesh(mesh, address="<head>:6379", node_axes=("host",))`` plans the devices
onto nodes (``runtime/ray/nodes.py``: devices sharing every coordinate of ``node_axes`` share a node),
reserves one placement-group bundle per node and pins each device actor to its node's bundle;
``close`` removes the group. ``device_nodes()`` says which Ray node each device is on, and
``routes(device)`` how its messages reach each other device.

Failures (``attempt.py``, ``failures.py``): a device whose actor dies gives a ``DeviceLostError``
naming it and the instruction its peers were waiting for; the others are stopped at once. With
``retries=N`` the lost devices are restarted (``repair``: fresh actors, schedules shipped again
from the bytes kept here) and the program runs again under a new run id.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

from simshard.report.memory import capacity_of

from ...core.collectives import check_algorithm
from ...errors import DeviceLostError
from ...calls.compiled import Compiled, compile_on, put as put_arrays
from ...wire.polling import SPIN_SECONDS, answer_spin, driver_should_spin
from ...wire.shared_memory import remove_orphans, remove_shared, shared_memory_prefix
from ..host import HOST_MODULES
from ..host.device_host import DeviceHost
from ..nodes import actor_options, device_nodes, node_plan, placement_group_for, remove
from ..protocol import PROBE_GROUP, Connected, LoadArgs, processes_on
from ..start import RUNTIME_DIR, ensure_ray, import_ray
from ..user_entries import user_entries
from .arrays import HeldArrays
from .connected import heard
from .retries import run_with_retries
from .failures import lost_at_load
from .groups import auto_per_process, default_actor_cpus, process_groups
from .held import Held
from .lines import ControlLines
from .repair import find_lost, restart_lost
from .probe import await_calls

# How messages between device processes travel: "sockets" (a frame on a socket: a Unix socket
# between processes of one node, an array from SHM_BYTES up in a shared-memory file the frame
# names; TCP between nodes) or "ray" (every message a Ray actor call): runtime/wire/.
DATA_PLANES = ("sockets", "ray")


class RayMesh:
    """Device actors for ``mesh`` (or the ``devices`` ids), alive until ``close`` / the end of
    the ``with`` block. ``calls`` counts the controller's Ray calls (kind -> count).
    ``devices_per_process=k``: ``k`` consecutive devices share one actor process (``groups``),
    messages between them staying in it (see ``ray/host/device_host.py``); by default as few per
    process as keep the processes within the machine's cores (``auto_per_process``: 1 for 8
    devices on 16 cores, 4 on 2), and one per process on a cluster (``address=`` or ``node_axes=``). ``data_plane``: how
    messages between processes travel (``DATA_PLANES``). ``busy_poll``: whether a waiting device
    process polls for its message before it sleeps (``runtime/wire/polling.py``); by default on the
    sockets data plane where a node has a core for each of its device processes (``polls``).
    ``patience``: seconds of silence after which a fetch probes the processes it waits on (a run
    uses its program's ``timeout``; ``probe.py``): one that does not answer is lost. ``runtime_env``:
    Ray's runtime environment for the device processes (``{"env_vars": {"RAY_USE_UVLOOP": "0"}}``
    runs them on asyncio's event loop where uvloop is installed, say)."""

    keys = itertools.count()  # program keys, unique across meshes
    last_run = -1  # the latest run id (set per mesh by each run)

    def __init__(self, mesh=None, address: str | None = None, node_axes: Sequence[str] | str | None = None, *,
                 devices: Sequence[int] | None = None, actor_cpus: float | None = None,
                 node_strategy: str = "STRICT_SPREAD", placement_timeout: float = 60.0,
                 start_timeout: float = 60.0, devices_per_process: int | None = None, data_plane: str = "sockets",
                 busy_poll: bool | None = None, patience: float | None = 10.0, runtime_env: dict | None = None):
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
        self.groups = process_groups(self.devices, devices_per_process)
        if data_plane not in DATA_PLANES:
            raise ValueError(f"RayMesh: data_plane must be one of {', '.join(DATA_PLANES)}, not {data_plane!r}")
        self.data_plane = data_plane
        self.busy_poll = busy_poll
        self.runtime_env = runtime_env
        self.patience = patience  # seconds of silence before a fetch probes the processes it waits on
        self._processes: dict[int, Connected] = {}  # device -> its process's ``Connected`` answer (set on connect)
        self._spin = 0.0  # driver_spin (set on connect)
        self.run_seconds: dict = {}  # program key -> its last run's seconds on the control lines (``answer_spin``)
        self.routes_among: dict[tuple, dict[str, int]] = {}  # devices -> the routes joining them (``RunAttempt.result``)
        self.peer_routes: dict[int, dict[int, str]] = {}  # device -> peer -> route (set on connect)
        self.secret = os.urandom(16)  # a socket connection must start with it
        self.sockets: dict[int, tuple] = {}  # device -> (node id, address, TCP address) of its process
        self.lines = ControlLines(self.secret, enabled=data_plane == "sockets")  # to its node's processes
        self.arrays = HeldArrays(self)  # the arrays its processes keep for the driver
        self.address = address
        self.node_axes = node_axes
        self.node_strategy = node_strategy
        self.placement_timeout = placement_timeout
        self.actor_cpus = actor_cpus
        self.plan = None  # the NodePlan when node_axes is given (ray/nodes.py)
        self.placement_group = None
        self._options: dict[int, dict] = {}  # each device's actor options, set by start()
        self.start_timeout = float(start_timeout)
        self.actors: dict[int, Any] = {}  # device -> the handle of its host actor (shared by its group)
        self.calls: Counter = Counter()
        self.run_ids = itertools.count()  # run ids and fetch tags: no two share one
        self.shipped: dict[Any, dict[int, tuple]] = {}  # program key -> device -> its load arguments

    # -- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> "RayMesh":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "RayMesh":
        if self.actors:
            return self
        remove_orphans()  # what processes killed with an earlier driver left in this node's shared memory
        ray = ensure_ray(self.address)
        cpus = self.actor_cpus if self.actor_cpus is not None else default_actor_cpus(
            ray, self.mesh, len(self.devices), self.node_axes, self.node_strategy)
        options = {d: dict(num_cpus=cpus, max_concurrency=1000, name=None) for d in self.devices}
        if self.runtime_env is not None:
            for d in self.devices:
                options[d]["runtime_env"] = self.runtime_env
        if self.node_axes is not None:
            self.plan = node_plan(self.mesh, self.node_axes, cpus_per_device=cpus, strategy=self.node_strategy)
            self.placement_group = placement_group_for(self.plan, timeout=self.placement_timeout)
            self.calls["remote"] += 1
            for d in self.devices:
                options[d].update(actor_options(self.plan, self.placement_group, d))
        self._options = options  # a restarted device gets the same options (and bundle)
        self._check_groups()
        # the actor class travels by value, with the modules it runs on: a worker must not import
        # another checkout's runtime before ``bootstrap`` has bound the driver's
        for module in HOST_MODULES:
            ray.cloudpickle.register_pickle_by_value(module)
        try:
            for group in self.groups:
                self.start_host(group)
            try:
                self.connect(self.groups, None, timeout=self.start_timeout)
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

    def start_host(self, group: tuple[int, ...]) -> None:
        """A fresh host actor for the devices ``group`` (their options, CPUs summed)."""
        ray = import_ray()
        opts = dict(self._options[group[0]])  # a restarted device gets the options start() gave it
        opts["num_cpus"] = opts.get("num_cpus", 0) * len(group)
        # the liveness probe on a thread of its own (probe.py)
        handle = ray.remote(concurrency_groups={PROBE_GROUP: 1})(DeviceHost).options(**opts).remote(group, RUNTIME_DIR)
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

    def connect(self, new_groups, floor: int | None, timeout: float | None = None) -> None:
        """Tell every host process where every device is: its handle and, on the sockets data plane,
        the socket address of its process (``new_groups`` have just started and open theirs)."""
        ray = import_ray()
        here = ray.get_runtime_context().get_node_id()  # (the driver's node)
        if self.data_plane == "sockets":
            got = ray.get([self.actors[g[0]].listen.remote(self.secret) for g in new_groups], timeout=timeout)
            self.calls["remote"] += len(new_groups)
            self.calls["get"] += 1
            for g, where in zip(new_groups, got):
                self.sockets.update((d, tuple(where[:3])) for d in g)
                self.lines.open(g, where[3] if where[0] == here else None, timeout)
        sockets = self.sockets if self.data_plane == "sockets" else None
        answers = ray.get([self.actors[g[0]].connect.remote(self.actors, floor, sockets, self.secret, self.busy_poll)
                           for g in self.groups], timeout=timeout)
        self._processes, self.peer_routes = heard(self.groups, answers)  # (warns of a peer reached by Ray calls)
        polls = any(c.polls for c in self._processes.values())
        self._spin = SPIN_SECONDS if polls and driver_should_spin(processes_on(here, self.sockets)) else 0.0
        self.routes_among = {}  # devices -> routes_used(peer_routes, devices), made once per set of devices
        self.calls["remote"] += len(self.groups)
        self.calls["get"] += 1

    def call(self, device: int, method: str, *args):
        """``method`` of ``device``, on its host actor."""
        self.calls["remote"] += 1
        return getattr(self.actors[device], method).remote(device, *args)

    def device_nodes(self) -> dict[int, str]:
        """Each device to the Ray node id its actor was placed on (with ``node_axes``; ``start``
        first). Without ``node_axes``, asks each actor where it runs."""
        ray = import_ray()
        self.start()
        if self.plan is not None:
            return device_nodes(self.plan, self.placement_group)
        ids = ray.get([self.call(d, "node_id") for d in self.devices])
        self.calls["get"] += 1
        return dict(zip(self.devices, ids))

    def close(self) -> None:
        ray = import_ray()
        for a in set(self.actors.values()):
            try:
                ray.kill(a)
            except Exception:
                pass
        self.actors = {}
        self.lines.close()
        prefix = shared_memory_prefix(self.secret)
        if prefix:
            remove_shared(prefix)  # what processes killed mid-run left in this node's shared memory
        if self.placement_group is not None:
            try:
                remove(self.placement_group)
            except Exception:
                pass
            self.placement_group = None

    def pid(self, device: int) -> int:
        return import_ray().get(self.call(device, "pid"))

    def routes(self, device: int) -> dict[int, str]:
        """How ``device``'s messages reach each other device (``ray/host/peers.route``)."""
        return import_ray().get(self.call(device, "routes"))

    def polls(self, device: int) -> bool:
        """Whether ``device``'s process busy-polls for messages (``busy_poll``) or sleeps in wait."""
        return self._processes[device].polls

    @property
    def driver_spin(self) -> float:
        """Seconds the driver polls for each answer of a run before it sleeps, at least:
        ``SPIN_SECONDS`` where its device processes poll and a core is left over beside those of
        its node (``polling.driver_should_spin``), else 0. An answer that comes within it costs no
        wakeup; ``answer_spin`` stretches it to cover a program's runs, within a bound that keeps
        the driver's other threads (a user's data loader) waiting for the interpreter lock no
        longer than its switch interval would anyway."""
        return self._spin

    def answer_spin(self, key) -> float:
        """Seconds the driver polls for each answer of a run of program ``key``
        (``polling.answer_spin``: ``driver_spin`` stretched to cover the program's last run, up to
        ``ANSWER_SPIN_MAX``)."""
        return answer_spin(self._spin, self.run_seconds.get(key))

    def polling(self, device: int) -> str:
        """How ``device``'s process polls: "selector" (asyncio's loop), "turns" (uvloop's) or "off"."""
        return self._processes[device].polling

    def event_loop(self, device: int) -> str:
        """The event loop Ray runs ``device``'s process on: "uvloop" (wherever Ray can import it,
        unless ``RAY_USE_UVLOOP=0`` in its environment) or "asyncio"."""
        return self._processes[device].loop

    # -- programs ------------------------------------------------------------------------------
    def load(self, spmd, *, device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct",
             retries: int = 0):
        """Ship each device its schedule (once); returns the key runs refer to. A device whose actor
        is dead, or dies while loading, is a ``DeviceLostError`` naming it; with ``retries=N`` it is
        restarted (``repair``, which ships it every loaded program again) up to N times instead."""
        check_algorithm(algorithm)  # here, not on every device at its first collective
        ray = import_ray()
        self.start()
        missing = [d for d in spmd.devices if d not in self.actors]
        if missing:
            raise ValueError(f"the program has schedules for devices {missing}, which this RayMesh does not hold")
        key = next(self.keys)
        trace = tuple(sorted(spmd.checkpoint_buffers))
        extras = user_entries(spmd)  # ops / reduce ops the user registered in this process
        refs = {}
        shipped = self.shipped[key] = {}  # device -> load arguments, to load a restarted device again
        for s in spmd.schedules:
            shipped[s.device] = LoadArgs(s.to_bytes(), capacity_of(device_memory, s.device), algorithm, trace,
                                         timeout, extras)
            refs[self.call(s.device, "load", key, *shipped[s.device])] = (s.device,)
        for attempt in range(retries + 1):
            try:
                await_calls(self, refs, timeout, "loading a program")
                break
            except ray.exceptions.RayActorError as e:
                gone = self.lost()
                if attempt == retries or not gone:
                    raise lost_at_load(gone or spmd.devices, e, attempt + 1) from None
            except DeviceLostError as e:  # a process that does not answer
                if attempt == retries:
                    e.attempts = attempt + 1
                    raise
            self.repair()  # fresh actors, every loaded program (this one too) shipped again
            refs = {}
        return key

    def unload(self, key) -> None:
        """Drop a loaded program from every device (and from what a restart would ship again)."""
        ray = import_ray()
        per = self.shipped.pop(key, {})
        self.run_seconds.pop(key, None)
        refs = [self.call(d, "unload", key) for d in per if d in self.actors]
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
        return run_with_retries(self, key, spmd, inputs, trace_values=trace_values, abort_wait=abort_wait,
                                lost_grace=lost_grace, retries=retries)

    def run_spmd(self, spmd, inputs, *, device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct",
                 trace_values: bool = False, retries: int = 0):
        """Load and run an ``SpmdProgram`` once (``run_local``'s arguments)."""
        key = self.load(spmd, device_memory=device_memory, timeout=timeout, algorithm=algorithm)
        return self.execute(key, spmd, inputs, trace_values=trace_values, retries=retries)

    # -- arrays on the devices (``HeldArrays``) ------------------------------------------------
    def put(self, x, sharding=None):
        """``x`` (an array or a pytree) sharded onto the devices: DeviceArrays, each device's shard
        kept by its host process (``put_shards``), where a compiled program uses it as it is."""
        self.start()
        return put_arrays(self, x, sharding)

    def put_shards(self, blocks) -> dict[int, Held]:
        return self.arrays.put_shards(blocks)

    def fetch(self, handles: list) -> list:
        return self.arrays.fetch(handles)

    # -- lost devices (``repair.py``) --------------------------------------------------------
    def lost(self, timeout: float = 5.0) -> list[int]:
        """The devices whose actor is dead or does not answer within ``timeout`` seconds."""
        return find_lost(self, timeout)

    def repair(self, floor: int | None = None, tries: int = 3) -> list[int]:
        """Restart every lost device (``repair.restart_lost``); returns the devices restarted."""
        return restart_lost(self, floor, tries)
