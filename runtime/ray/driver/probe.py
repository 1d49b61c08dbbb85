"""Is a device process alive? A process that has died is reported by Ray or its control line; one
that is alive but does not answer (stopped by a signal or a debugger, stuck in a system call or in
a C extension that holds the interpreter) is reported by nothing. So whenever the driver has heard
nothing for ``patience`` seconds, it asks each process it waits for: ``DeviceHost.alive`` runs in
a concurrency group of its own, on a thread of its own, and answers while the process's devices
compute (their kernels release the interpreter); a process that does not answer within
``patience`` seconds more (``PROBE_SECONDS`` at least) is taken for lost, as a dead one is.
"""

from __future__ import annotations

from typing import Iterable

from ...errors import DeviceLostError
from ..start import import_ray

# the least a probe waits for its answer, however short the patience: a process on a loaded
# machine may take a while to be scheduled, and a false alarm would restart a working device
PROBE_SECONDS = 2.0


class NotAnswering(Exception):
    """A device process that is alive as far as Ray knows, but answers nothing."""

    def __init__(self, patience: float):
        super().__init__(f"its process did not answer for {patience + max(patience, PROBE_SECONDS):g} s, nor a probe "
                         "on a thread of its own (stopped, or stuck holding the interpreter)")


def silent(mesh, devices: Iterable[int], patience: float) -> list[int]:
    """The devices among ``devices`` whose process does not answer a probe within ``patience``
    seconds (``PROBE_SECONDS`` at least; a dead one answers at once, with Ray's error: it is not
    silent)."""
    ray = import_ray()
    by_host: dict = {}
    for d in devices:
        by_host.setdefault(mesh.actors[d], []).append(d)
    refs = {host.alive.remote(): devs for host, devs in by_host.items()}
    mesh.calls["probe"] += len(refs)
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=max(patience, PROBE_SECONDS))
    return sorted(d for ref, devs in refs.items() if ref not in ready for d in devs)


def which_devices(devices: tuple[int, ...]) -> str:
    """``device 3`` or ``devices [2, 3]``: the devices an error names, in ascending order."""
    return f"device {devices[0]}" if len(devices) == 1 else f"devices {list(devices)}"


def not_answering(devices: Iterable[int], patience: float, doing: str) -> DeviceLostError:
    """The error for devices whose process stopped answering while the driver waited on ``doing``."""
    devices = tuple(sorted(devices))
    return DeviceLostError(
        f"{which_devices(devices)}: the process does not answer ({doing}): {NotAnswering(patience)}. RayMesh.repair() "
        "restarts it; retries= does it for you",
        device=devices[0], lost=devices,
    )


def await_calls(mesh, refs: dict, patience: float | None, doing: str) -> list:
    """The results of Ray calls ``refs`` (ref -> the devices it is for), in order; every
    ``patience`` seconds of waiting the processes still owing an answer are probed, and those that
    do not answer are a ``DeviceLostError`` naming them. A dead process raises Ray's error, as
    ``ray.get`` does."""
    ray = import_ray()
    waiting = list(refs)
    while patience is not None and waiting:
        ready, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=patience)
        if waiting:
            quiet = silent(mesh, {d for ref in waiting for d in refs[ref]}, patience)
            if quiet:
                raise not_answering(quiet, patience, doing)
    mesh.calls["get"] += 1
    return ray.get(list(refs))
