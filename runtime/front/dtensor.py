"""PyTorch DTensor's vocabulary over simshard's device arrays (``ss.dtensor``).

    from simshard.dtensor import distribute_tensor, DTensor, Shard, Replicate
    d = distribute_tensor(x, mesh, [Shard(0), Replicate()])     # a DTensor: a DeviceArray
    d.placements, d.device_mesh, d.to_local(3), d.full_tensor()
    e = d.redistribute(placements=[Replicate(), Shard(1)])      # planned and run on the devices
    f = DTensor.from_local({dev: block, ...}, mesh, "[S(0), R]")

A ``DTensor`` is a ``DeviceArray`` whose sharding is a ``DTensorSpec``: any layout the placement
model states (nested uneven chunks, ``StridedShard``, user placements, user reductions), laid
out by ``simshard.sharding.layout`` exactly as DTensor lays it out. ``redistribute`` plans the
move with the reshard planner (``plan_reshard``: the structured collectives or the exchange)
and runs it on the devices holding the shards, so its values are moved, not recomputed, and
its communication is recorded (``last_comm``, and ``CommDebugMode``). Arithmetic on DTensors
(``d + d``, ``d @ w``, ``d.sum()``, ``d.softmax(0)``) runs on the devices with DTensor's output
placements (``dtensor_ops``); ``mesh["tp"]`` is a sub-mesh (``MeshView``) whose placement lists
name its axes only; ``with rank(r):`` plays rank r for ``from_local`` / ``to_local``
(``dtensor_build``); ``dtensor_parallel`` shards ``simshard.nn`` modules (``parallelize_module``); ``dtensor_api`` is
the public ``simshard.dtensor``, all of these together.

Differences from torch, on purpose: ``distribute_tensor`` of a ``Partial(sum)`` puts the value
on the first device of each reduce group and the identity elsewhere (torch divides by n, which
rounds); redistributing *to* Partial is allowed (torch refuses it publicly); ``to_local`` takes
the device whose shard you want (a driver holds every device's). A plain ``ss.Mesh`` runs on a
``LocalMesh`` (one per mesh, made on first use); pass a ``RayMesh`` for Ray device actors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from simshard.errors import ShardingError
from simshard.sharding.mesh import Mesh, MeshView
from simshard.sharding.placements import DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard
from simshard.sharding.reduce_ops import ReduceOp, register_reduce_op

from ..calls.comm_debug import CommDebugMode
from ..calls.device_array import DeviceArray, place
from ..eager.hosts import host_of
from .dtensor_build import build_from_local, current_rank, placed_on, spec_on
from .dtensor_ops import DTensorOps
from .redistribute import redistribute_shards


@dataclass(frozen=True, eq=False)
class DTensor(DTensorOps, DeviceArray):
    """A global array laid out by a placement list, each device's shard on its device.

    ``host`` is the devices object holding the shards (a ``LocalMesh`` or a ``RayMesh``);
    ``last_comm`` the ``CommReport`` of the redistribute that made it (None otherwise)."""

    host: Any = None
    last_comm: Any = None

    # -- what it is -------------------------------------------------------------------------
    @property
    def spec(self) -> DTensorSpec:
        return self.sharding

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self.sharding.placements

    @property
    def device_mesh(self) -> Mesh:
        return self.sharding.mesh

    def __repr__(self) -> str:
        return (f"DTensor({np.dtype(self.dtype).name}{list(self.shape)}, "
                f"placements=[{', '.join(map(str, self.placements))}], mesh=@{self.device_mesh.name})")

    # -- reading it ---------------------------------------------------------------------------
    def to_local(self, device: int | None = None):
        """The shard ``device`` holds (read-only); without a device, every device's, as a dict
        device -> shard (what each rank's ``to_local()`` would return); inside ``with rank(r):``
        rank r's, as torch's ``to_local()``."""
        device = current_rank() if device is None else device  # inside ``with rank(r):`` rank r's
        if device is None:
            got = self.fetch([self.shards[d] for d in self.devices])
            return {d: np.asarray(a) for d, a in zip(self.devices, got)}
        if device not in self.shards:
            raise ShardingError("unknown-device", f"device {device} is not in mesh @{self.device_mesh.name} "
                                f"(devices {list(self.devices)})")
        return self.shard(device)

    def full_tensor(self) -> np.ndarray:
        """The global array, as torch gets it: redistributed to Replicate on every mesh axis (the
        collectives run and are recorded), then one device's copy."""
        whole = self.redistribute(placements=[Replicate()] * self.device_mesh.ndim)
        return np.array(whole.to_local(whole.devices[0]), copy=True)

    # -- moving it ----------------------------------------------------------------------------
    def redistribute(self, device_mesh=None, placements=None) -> "DTensor":
        """The same global array laid out by ``placements`` (a list, or text such as
        ``"[R, S(1)]"``), moved by the reshard planner's collectives on the devices."""
        if isinstance(device_mesh, MeshView):  # placements on a sub-mesh: widened to the whole mesh
            dst = placed_on(device_mesh, placements, len(self.shape), "redistribute")[1]
            shards, comm = redistribute_shards(self, dst)
            return DTensor(self.shape, self.dtype, dst, shards, self.fetch, self.host, comm)
        if device_mesh is not None and _mesh_of(device_mesh) != self.device_mesh:
            raise ShardingError("mesh-mismatch", f"redistribute to mesh {_mesh_of(device_mesh)}: the DTensor lives on "
                                f"{self.device_mesh}; redistributing across meshes is not supported")
        if placements is None:
            placements = self.placements
        dst = spec_on(self.device_mesh, placements, len(self.shape), "redistribute")
        shards, comm = redistribute_shards(self, dst)
        return DTensor(self.shape, self.dtype, dst, shards, self.fetch, self.host, comm)

    # -- building one from shards ------------------------------------------------------------
    @staticmethod
    def from_local(local_tensor, device_mesh, placements=None, *, run_check: bool = False,
                   shape: Sequence[int] | None = None, stride: Sequence[int] | None = None) -> "DTensor":
        """torch's ``DTensor.from_local``: every device's shard (a dict device -> array, or a
        sequence in device order), or under ``with rank(r):`` rank r's shard alone (where the
        placements make it every rank's: Replicate). The global ``shape`` is read off the shards
        unless given; ``stride`` must be ``shape``'s contiguous strides; ``run_check`` checks that
        replicas agree. A shard the placements do not give its device is refused, naming it."""
        return build_from_local(DTensor, local_tensor, device_mesh, placements, run_check=run_check, shape=shape,
                                stride=stride)


def distribute_tensor(tensor, device_mesh, placements=None) -> DTensor:
    """``tensor`` laid out by ``placements`` (default: Replicate on every mesh axis) over
    ``device_mesh`` (an ``ss.Mesh``, a ``LocalMesh`` or a ``RayMesh``): each device gets its
    shard, cut by ``simshard.sharding.layout`` as DTensor cuts it."""
    x = np.asarray(tensor)
    host, spec = placed_on(device_mesh, placements, x.ndim, "distribute_tensor")
    arr = place(x, spec, host.devices, host.put_shards, host.fetch)
    return DTensor(arr.shape, arr.dtype, spec, arr.shards, arr.fetch, host)


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *, mesh_dim_names: Sequence[str] | None = None) -> Mesh:
    """torch's ``init_device_mesh`` spelling: an ``ss.Mesh`` of ``mesh_shape`` (axes named
    ``mesh_dim_names``, default ``dim0``, ``dim1``, ...); ``device_type`` is ignored (all simulated)."""
    names = tuple(mesh_dim_names) if mesh_dim_names is not None else tuple(f"dim{i}" for i in range(len(mesh_shape)))
    if len(names) != len(mesh_shape):
        raise ShardingError("invalid-mesh", f"{len(names)} mesh_dim_names for a mesh of {len(mesh_shape)} dims")
    return Mesh(list(zip(names, (int(n) for n in mesh_shape))))


def NormPartial(norm_type: float = 2) -> Partial:
    """torch's ``NormPartial``: each device holds the ``norm_type``-norm of its part, the value is
    the norm of those norms (combine: ``(|a|^p + |b|^p)^(1/p)``; 1: ``|a| + |b|``, 2: ``sqrt(a^2 +
    b^2)``, inf: ``max``), identity 0. A user reduce op, registered as ``norm<p>``."""
    p = float(norm_type)
    if p <= 0:
        raise ShardingError("unknown-reduce-op", f"NormPartial({norm_type}): the norm type must be positive")
    name = "norm_inf" if p == math.inf else f"norm{int(p) if p.is_integer() else str(p).replace('.', '_')}"
    if p == math.inf:
        combine = _norm_inf
    elif p == 1:
        combine = _norm1
    elif p == 2:
        combine = _norm2
    else:
        combine = _NormP(p)
    return Partial(ReduceOp(name, combine, idempotent=(p == math.inf), identity_value=0))


def _norm1(a, b):
    return np.abs(a) + np.abs(b)


def _norm2(a, b):
    return np.sqrt(a * a + b * b)


def _norm_inf(a, b):
    return np.maximum(np.abs(a), np.abs(b))


@dataclass(frozen=True)
class _NormP:
    p: float

    def __call__(self, a, b):
        return (np.abs(a) ** self.p + np.abs(b) ** self.p) ** (1.0 / self.p)


def redistribute(dtensor: DTensor, placements) -> DTensor:
    """``dtensor.redistribute(placements=placements)``."""
    return dtensor.redistribute(placements=placements)


# -- helpers ---------------------------------------------------------------------------------------
def _mesh_of(device_mesh) -> Mesh:
    return device_mesh if isinstance(device_mesh, Mesh) else host_of(device_mesh).mesh


__all__ = [
    "CommDebugMode", "DTensor", "DTensorSpec", "NormPartial", "Partial", "Placement", "ReduceOp", "Replicate", "Shard",
    "StridedShard", "distribute_tensor", "init_device_mesh", "redistribute", "register_reduce_op",
]
