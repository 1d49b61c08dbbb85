"""Which devices hold an eager array: the devices object (``LocalMesh`` or ``RayMesh``) of a mesh.

A plain ``ss.Mesh`` runs on one ``LocalMesh`` per mesh, made on first use and kept for the
process (arrays put on it stay valid); ``use_devices(ray_mesh)`` makes a ``RayMesh`` (or any
devices object) the one its mesh's arrays go to while the block runs, and passing a devices
object where a mesh is asked for (``ss.device_put(x, s, device=ray_mesh)``, ``distribute_tensor(x,
ray_mesh, ...)``) uses it for that array.
"""

from __future__ import annotations

import contextlib
import threading

from simshard.errors import ShardingError
from simshard.sharding.mesh import Mesh

from ..local.mesh import LocalMesh

_LOCAL: dict[Mesh, LocalMesh] = {}  # Mesh -> its LocalMesh, for the life of the process
_chosen = threading.local()  # a stack of devices objects set by use_devices
_PROTOCOL = ("mesh", "put_shards", "fetch", "load", "execute")


def is_devices(obj) -> bool:
    """A devices object: a ``LocalMesh``, a ``RayMesh``, or anything with their methods."""
    return all(hasattr(obj, a) for a in _PROTOCOL)


def host_of(device_mesh):
    """The devices object for ``device_mesh``: itself for a devices object; for a plain mesh the
    one ``use_devices`` set for it, else its own ``LocalMesh``."""
    if isinstance(device_mesh, Mesh):
        for host in reversed(getattr(_chosen, "stack", [])):
            if host.mesh == device_mesh:
                return host
        if device_mesh not in _LOCAL:
            _LOCAL[device_mesh] = LocalMesh(device_mesh)
        return _LOCAL[device_mesh]
    if is_devices(device_mesh):
        return device_mesh
    raise ShardingError("invalid-mesh", f"expected an ss.Mesh, a LocalMesh or a RayMesh, got {type(device_mesh).__name__}")


@contextlib.contextmanager
def use_devices(devices):
    """Arrays put on ``devices.mesh`` (by ``ss.device_put`` or ``distribute_tensor``) go to
    ``devices`` (a ``RayMesh``, say) inside the block."""
    if not is_devices(devices):
        raise TypeError(f"use_devices takes a LocalMesh or a RayMesh, got {type(devices).__name__}")
    stack = getattr(_chosen, "stack", None)
    if stack is None:
        stack = _chosen.stack = []
    stack.append(devices)
    try:
        yield devices
    finally:
        stack.remove(devices)


__all__ = ["host_of", "is_devices", "use_devices"]
