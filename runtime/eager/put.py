"""``ss.device_put``: an array committed to the devices of a mesh, sharded as asked.

    x = ss.device_put(np.arange(128.).reshape(8, 16), NamedSharding(mesh, P("X", None)))
    with ss.set_mesh(mesh): y = ss.device_put(a, P(None, "Y"))     # a bare P: the current mesh
    ss.typeof(x)  # float32[8@X,16] on a mesh of Explicit axes

The array goes to the mesh's devices object (``hosts.host_of``: its ``LocalMesh``, or the
``RayMesh`` given as ``device=`` or set with ``use_devices``). ``reshard`` outside a trace takes
numpy arrays too (committed by it, as JAX's eager ``reshard`` does); on Arrays it is the eager op.
A numpy array put gets JAX's dtype (``simshard.numpy.asarray``: 64-bit types disabled, as JAX's
default), so ``ss.device_put(np.arange(8), ...)`` is ``int32[8]`` as in JAX.
"""

from __future__ import annotations

import numpy as np
import optree

import simshard.numpy as snp

from simshard.errors import ShardingError
from simshard.sharding.dims import NamedSharding, Sharding
from simshard.sharding.partition_spec import P
from simshard.sharding.placements import DTensorSpec
from simshard.tracing import committed
from simshard.tracing.context import get_mesh
from simshard.tracing.explicit import api as explicit_api

from ..calls.device_array import place
from .array import Array
from .hosts import host_of, is_devices


def _mesh_of(spec, device):
    """The mesh a sharding spelling is on: its own, the ``device`` object's, or the current one."""
    if isinstance(spec, (NamedSharding, Sharding, DTensorSpec)):
        return spec.mesh
    if device is not None:
        return host_of(device).mesh
    mesh = get_mesh()
    if mesh is None:
        raise ValueError(
            "Using PartitionSpec when you are not under a mesh context is not allowed. Please pass a "
            f"NamedSharding instance or enter into a mesh context via `ss.set_mesh`. Got {spec!r}")
    return mesh


def _one(x, spec, device) -> Array:
    """One leaf put: a numpy array (or anything ``np.asarray`` reads, an Array gathered) laid out by ``spec``."""
    from simshard.tracing.tracer import resolve_sharding

    if spec is None:
        if isinstance(x, Array):
            return x
        spec = P()
    mesh = _mesh_of(spec, device)
    host = host_of(device) if is_devices(device) else host_of(mesh)
    if host.mesh != mesh and not host.mesh.same_axes(mesh):
        raise ShardingError("mesh-mismatch", f"device_put: the sharding is on mesh {mesh}, the devices object "
                            f"{type(host).__name__} holds {host.mesh}")
    a = np.asarray(x) if isinstance(x, Array) else snp.asarray(x)  # JAX's dtypes, 64-bit types off
    sharding = resolve_sharding(spec, committed_aval(a), "device_put", mesh)
    if isinstance(x, Array) and x.committed_sharding == sharding and x.host is host:
        return x
    return Array(place(a, sharding, host.devices, host.put_shards, host.fetch), host)


def committed_aval(a: np.ndarray):
    from simshard.ir.program import Aval

    return Aval(a.shape, a.dtype)


def device_put(x, device=None, *, src=None, donate: bool = False, may_alias=None):
    """``x`` (an array or a pytree of them) committed to devices: ``device`` is a NamedSharding,
    a P (on the current mesh, ``ss.set_mesh``), a Sharding or DTensorSpec, a pytree prefix of them,
    or a ``LocalMesh`` / ``RayMesh`` (replicated over its devices). An Array put again with
    another sharding is gathered and laid out anew."""
    if is_devices(device):
        return optree.tree_map(lambda a: _one(a, P(), device), x, none_is_leaf=False, is_leaf=_is_array_leaf)
    from simshard.tracing.tracer import broadcast_prefix

    leaves, tree = optree.tree_flatten(x, none_is_leaf=False, is_leaf=_is_array_leaf)
    specs = broadcast_prefix(device, x, "device_put sharding")
    return optree.tree_unflatten(tree, [_one(a, s, None) for a, s in zip(leaves, specs)])


def _is_array_leaf(x) -> bool:
    return isinstance(x, Array)


def reshard(xs, out_shardings):
    """``ss.reshard`` outside a trace: numpy leaves are first committed replicated on the mesh of
    the target sharding, then every leaf is resharded on its devices by the eager op."""
    def commit(a, spec):
        if committed.is_committed(a):
            return a
        mesh = _mesh_of(spec, None)
        return _one(a, NamedSharding(mesh, P()), None)

    from simshard.tracing.tracer import broadcast_prefix

    leaves, tree = optree.tree_flatten(xs, none_is_leaf=False, is_leaf=_is_array_leaf)
    specs = broadcast_prefix(out_shardings, xs, "reshard out_shardings")
    placed = optree.tree_unflatten(tree, [commit(a, s) for a, s in zip(leaves, specs)])
    return explicit_api.reshard(placed, out_shardings)


__all__ = ["device_put", "reshard"]
