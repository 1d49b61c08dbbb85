"""Arrays kept on the device processes, seen from the driver: putting shards there, fetching them
back (on the control lines where it can, else as Ray calls; a process that died or does not answer is an
error naming its device), passing them to a run, and letting go of those the driver holds no
handle on any more."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ...wire import control_line
from ...wire.control_line import OutcomeKind, Request
from ...errors import ExecutionError
from ..start import import_ray
from .held import Held, outputs_lost
from .probe import await_calls, not_answering, silent


class HeldArrays:
    """The arrays a ``RayMesh``'s host processes keep for the driver (``mesh``: its actors,
    groups, control lines and call counts)."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.released: dict[Any, list[int]] = {}  # host handle -> ids of kept arrays nobody holds

    def put_shards(self, blocks) -> dict[int, Held]:
        """Each device's block into its host process, which keeps it (one call per process, a
        block several of its devices hold sent once): ``Held`` handles."""
        ray, mesh = import_ray(), self.mesh
        calls = []
        for group in mesh.groups:
            devs = [d for d in group if d in blocks]
            if not devs:
                continue
            unique = list({id(blocks[d]): blocks[d] for d in devs}.values())
            which = [next(k for k, u in enumerate(unique) if u is blocks[d]) for d in devs]
            calls.append((mesh.actors[devs[0]], devs, which, mesh.actors[devs[0]].hold.remote(*unique)))
        mesh.calls["hold"] += len(calls)
        mesh.calls["get"] += 1
        ids = ray.get([c[-1] for c in calls])
        return {d: Held(host, got[k], self.released)
                for (host, devs, which, _), got in zip(calls, ids) for d, k in zip(devs, which)}

    def fetch(self, handles: list) -> list:
        """Arrays of shards on the devices: ``Held`` ones from their host processes, Ray objects
        (``put``) from the object store."""
        ray = import_ray()
        self.release_dropped()
        held = [i for i, h in enumerate(handles) if isinstance(h, Held)]
        out = list(handles)
        for i, a in zip(held, self.fetch_held([handles[i] for i in held])):
            out[i] = a
        refs = [i for i, h in enumerate(handles) if not isinstance(h, Held)]
        if refs:
            self.mesh.calls["get"] += 1
            for i, a in zip(refs, ray.get([handles[i] for i in refs])):
                out[i] = a
        return out

    def fetch_held(self, handles: Sequence[Held]) -> list[np.ndarray]:
        """Every handle's array (each the caller's own copy), one call per host process: on the
        control lines where every process it reaches has one, else as Ray calls."""
        by_host: dict[Any, list[int]] = {}
        for i, h in enumerate(handles):
            by_host.setdefault(h.host, []).append(i)
        actors = self.mesh.actors
        gone = set(by_host) - {actors[g[0]] for g in self.mesh.groups if g[0] in actors}  # (a handle per process)
        if gone:  # its process was killed by the driver itself: nothing to fetch from
            raise ExecutionError(
                "the arrays asked for were kept by a device process this RayMesh no longer has: "
                + ("the mesh has been closed since their run (read a run's outputs before closing its mesh, "
                   "or fetch them to the driver first)" if not actors else
                   "its device was restarted since their run (RayMesh.repair, retries=): run the program again"))
        self.mesh.calls["fetch"] += len(by_host)  # one per host process, counted apart from the runs' calls
        ids = {host: [handles[i].id for i in idx] for host, idx in by_host.items()}
        got = self.fetch_on_lines(ids)
        if got is None:
            got = self.fetch_by_calls(ids)
        out: list = [None] * len(handles)
        for host, idx in by_host.items():
            for i, a in zip(idx, got[host]):
                out[i] = a
        return out

    def fetch_on_lines(self, ids: Mapping[Any, list[int]]) -> dict | None:
        """host -> the arrays of its ``ids``, fetched on the control lines (their bytes out of
        band, read into arrays of the driver's own); None where a process has no line open or
        another thread is on the lines. A broken line raises its ConnectionError, what the
        host's ``fetch`` raised is raised as it is."""
        mesh = self.mesh
        lines = mesh.lines.of_hosts(mesh.actors, ids)
        if lines is None:
            return None
        with mesh.lines.claim() as mine:
            if not mine:
                return None
            tag = next(mesh.run_ids)  # a fresh tag: no run or fetch shares it
            for host, i in ids.items():
                lines[host].send(tag, Request.FETCH, (i,))
            pending = {lines[host]: host for host in ids}
            got, waiter = {}, control_line.Waiter(list(pending), tag)
            while pending:
                ready = waiter.wait(list(pending), mesh.patience)
                if not ready:  # nothing heard for a while: is every process still there?
                    quiet = silent(mesh, [d for host in pending.values() for d in self.devices_of(host)],
                                   mesh.patience)
                    if quiet:
                        raise not_answering(quiet, mesh.patience, "fetching its outputs")
                for line in ready:
                    kind, value = line.outcome(tag)
                    host = pending.pop(line)
                    if kind is OutcomeKind.DEAD:
                        raise outputs_lost(min(self.devices_of(host)), value) from value
                    if kind is not OutcomeKind.VALUE:
                        raise value
                    got[host] = value
            return got

    def fetch_by_calls(self, ids: Mapping[Any, list[int]]) -> dict:
        """host -> the arrays of its ``ids``, fetched as Ray calls (copies: Ray hands out read-only
        views of its object store); a process that died is a ``DeviceLostError`` naming its device."""
        ray, mesh = import_ray(), self.mesh
        refs = {host.fetch.remote(i): host for host, i in ids.items()}
        try:
            arrays = await_calls(mesh, {ref: tuple(self.devices_of(host)) for ref, host in refs.items()},
                                 mesh.patience, "fetching its outputs")
        except ray.exceptions.RayActorError as e:  # the call that failed says whose process died
            host = next((h for ref, h in refs.items() if _failed(ray, ref)), next(iter(ids)))
            raise outputs_lost(min(self.devices_of(host)), e) from e
        return {host: [np.array(a, copy=True) for a in got] for host, got in zip(refs.values(), arrays)}

    def devices_of(self, host) -> list[int]:
        """The devices whose process ``host`` is."""
        return sorted(d for d, h in self.mesh.actors.items() if h == host)

    def run_args(self, devs, shards: Mapping[int, list]) -> tuple[tuple, list]:
        """The shards of devices ``devs`` as a run call's arguments: (the (position, id) of each
        array their process keeps, the other shards in order)."""
        held, args, position = [], [], 0
        for d in devs:
            for shard in shards[d]:
                if isinstance(shard, Held):
                    if shard.host is not self.mesh.actors.get(d):
                        raise ValueError(f"device {d} is given an array kept by another process (an output of a "
                                         "run on another RayMesh, or before the device was restarted): put it again")
                    held.append((position, shard.id))
                else:
                    args.append(shard)
                position += 1
        return tuple(held), args

    def release_dropped(self) -> list:
        """Tell each host process which of its kept arrays the driver has no handle on any more:
        the calls' refs (nothing waits for them)."""
        refs = []
        hosts = set(self.mesh.actors.values())  # a host's handle hashes as its actor
        while self.released:
            host, ids = self.released.popitem()
            if host in hosts:
                refs.append(host.release.remote(ids))
                self.mesh.calls["release"] += 1  # bookkeeping, not part of a run
        return refs


def _failed(ray, ref) -> bool:
    """Whether a Ray call has finished by raising (its process died); one still running has not."""
    if not ray.wait([ref], timeout=0)[0]:
        return False
    try:
        ray.get(ref)
    except Exception:
        return True
    return False
