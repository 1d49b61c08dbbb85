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
its communication is recorded (``last_comm``, and ``CommDebugMode``).

Differences from torch, on purpose: ``distribute_tensor`` of a ``Partial(sum)`` puts the value
on the first device of each reduce group and the identity elsewhere (torch divides by n, which
rounds); redistributing *to* Partial is allowed (torch refuses it publicly); ``to_local`` takes
the device whose shard you want (a driver holds every device's). A plain ``ss.Mesh`` runs on a
``LocalMesh`` (one per mesh, made on first use); pass a ``RayMesh`` for Ray device actors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from simshard.errors import ShardingError
from simshard.sharding.layout import layout
from simshard.sharding.mesh import Mesh
from simshard.sharding.placements import (
    DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard, cut_dim,
    parse_placement,
)
from simshard.sharding.reduce_ops import ReduceOp, register_reduce_op
from simshard.sharding.spelling import from_spelling

from ..calls.comm_debug import CommDebugMode
from ..calls.device_array import DeviceArray, place
from ..eager.hosts import host_of
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
        device -> shard (what each rank's ``to_local()`` would return)."""
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
        if device_mesh is not None and _mesh_of(device_mesh) != self.device_mesh:
            raise ShardingError("mesh-mismatch", f"redistribute to mesh {_mesh_of(device_mesh)}: the DTensor lives on "
                                f"{self.device_mesh}; redistributing across meshes is not supported")
        if placements is None:
            placements = self.placements
        dst = _spec(self.device_mesh, placements, len(self.shape), "redistribute")
        shards, comm = redistribute_shards(self, dst)
        return DTensor(self.shape, self.dtype, dst, shards, self.fetch, self.host, comm)

    # -- building one from shards ------------------------------------------------------------
    @staticmethod
    def from_local(local_tensors, device_mesh, placements, *, shape: Sequence[int] | None = None) -> "DTensor":
        """A DTensor from each device's shard (a dict device -> array, or a sequence in device
        order). The global ``shape`` is read off the shards unless given; a shard whose shape the
        placements do not give its device is refused, naming the device."""
        host = _host(device_mesh)
        mesh = host.mesh
        blocks = _per_device(local_tensors, host.devices)
        first = blocks[host.devices[0]]
        dtypes = {np.asarray(b).dtype for b in blocks.values()}
        if len(dtypes) > 1:
            raise ShardingError("dtype-mismatch", f"from_local: the shards have dtypes {sorted(map(str, dtypes))}; give one dtype")
        ranks = {d: np.ndim(b) for d, b in blocks.items()}
        bad = [d for d, r in ranks.items() if r != np.ndim(first)]
        if bad:
            raise ShardingError("shape-mismatch", f"from_local: device {bad[0]} holds a rank-{ranks[bad[0]]} shard, "
                                f"device {host.devices[0]} a rank-{np.ndim(first)} one")
        spec = _spec(mesh, placements, np.ndim(first), "from_local")
        given = shape is not None
        shape = tuple(int(n) for n in shape) if given else _global_shape(spec, blocks)
        wrong = _misfits(spec, shape, blocks)
        if wrong:
            d, got, want = wrong[0]
            more = f" (and devices {[w[0] for w in wrong[1:]]})" if len(wrong) > 1 else ""
            raise ShardingError(
                "shape-mismatch",
                f"from_local: device {d} (mesh coordinates {dict(zip(mesh.axis_names, mesh.coords(d)))}){more} holds a "
                f"shard of shape {got}, but [{', '.join(map(str, spec.placements))}] over global shape {shape}"
                f"{'' if given else ' (the shape the other shards fit best)'} gives it {want}")
        arr = np.asarray(first)
        return DTensor(shape, arr.dtype, spec, host.put_shards({d: np.asarray(blocks[d]) for d in host.devices}),
                       host.fetch, host)


def distribute_tensor(tensor, device_mesh, placements=None) -> DTensor:
    """``tensor`` laid out by ``placements`` (default: Replicate on every mesh axis) over
    ``device_mesh`` (an ``ss.Mesh``, a ``LocalMesh`` or a ``RayMesh``): each device gets its
    shard, cut by ``simshard.sharding.layout`` as DTensor cuts it."""
    host = _host(device_mesh)
    x = np.asarray(tensor)
    if placements is None:
        placements = [Replicate()] * host.mesh.ndim
    spec = _spec(host.mesh, placements, x.ndim, "distribute_tensor")
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
def _host(device_mesh):
    """The devices object for ``device_mesh`` (``eager.hosts.host_of``: one LocalMesh per plain
    mesh, shared with ``ss.device_put``'s arrays, or the RayMesh given or set with ``use_devices``)."""
    return host_of(device_mesh)


def _mesh_of(device_mesh) -> Mesh:
    return device_mesh if isinstance(device_mesh, Mesh) else _host(device_mesh).mesh


def _spec(mesh: Mesh, placements, ndim: int, where: str) -> DTensorSpec:
    """Placements (a list, a DTensorSpec, or text) as the normalized DTensorSpec of a rank-``ndim`` value."""
    if isinstance(placements, DTensorSpec):
        if placements.mesh != mesh:
            raise ShardingError("mesh-mismatch", f"{where}: {placements} is on another mesh than {mesh}")
        spec = placements
    else:
        if isinstance(placements, Placement):
            placements = [placements]
        if type(placements) in (list, tuple):  # items may be text too: ["Shard(0)", "Replicate()"]
            placements = [parse_placement(p) if isinstance(p, str) else p for p in placements]
        if type(placements) in (list, tuple) and not placements:
            raise ShardingError("placement-count", f"{where}: no placements; give one per mesh axis of {mesh}")
        spec = from_spelling(placements if isinstance(placements, str) else tuple(placements), mesh, where)
        if not isinstance(spec, DTensorSpec):
            raise ShardingError("invalid-spec", f"{where}: {placements!r} is not a placement list")
    try:
        return spec.normalized(ndim)
    except ShardingError as e:
        raise ShardingError(e.rule, f"{where}: {e.detail}", axis=e.axis, dim=e.dim) from None


def _per_device(local_tensors, devices: Sequence[int]) -> dict[int, Any]:
    if isinstance(local_tensors, Mapping):
        missing = [d for d in devices if d not in local_tensors]
        extra = [d for d in local_tensors if d not in devices]
        if missing or extra:
            raise ShardingError("missing-shards", f"from_local: no shard for devices {missing}" if missing else
                                f"from_local: shards for devices {extra}, which are not in the mesh")
        return {d: local_tensors[d] for d in devices}
    if isinstance(local_tensors, np.ndarray) or np.isscalar(local_tensors):
        shape = np.shape(local_tensors)
        if not shape or shape[0] != len(devices):  # a global array, or one device's shard, passed alone
            raise ShardingError(
                "missing-shards",
                f"from_local: one array of shape {shape} where every device's shard was expected: give a list of "
                f"{len(devices)} arrays in device order (or a dict device -> array); to lay out one global array "
                "over the mesh, use distribute_tensor")
    blocks = list(local_tensors)
    if len(blocks) != len(devices):
        raise ShardingError("missing-shards", f"from_local: {len(blocks)} shards for {len(devices)} devices; give one per device")
    return dict(zip(devices, blocks))


def _misfits(spec: DTensorSpec, shape: tuple[int, ...], blocks: Mapping[int, Any]) -> list[tuple]:
    """(device, its shard's shape, the shape the layout gives it) for every shard that does not fit."""
    try:
        L = layout(spec, shape)
    except ShardingError:
        return [(d, tuple(np.shape(b)), "no shard (the placements cannot cut that shape)") for d, b in blocks.items()]
    return [(d, tuple(np.shape(b)), L.local_shape(d)) for d, b in blocks.items() if tuple(np.shape(b)) != L.local_shape(d)]


def _global_shape(spec: DTensorSpec, blocks: Mapping[int, Any]) -> tuple[int, ...]:
    """The global shape the shards make. Per dim, the devices along the mesh axes that cut it (the
    other axes at coordinate 0) hold pieces that partition it, so their sizes add up to it; when
    one shard is wrong, the size with one shard's size swapped for another's that the most shards
    fit is taken instead, so that the error names the shard that does not fit."""
    mesh = spec.mesh
    ndim = np.ndim(next(iter(blocks.values())))
    shape = []
    for k in range(ndim):
        cutting = [i for i, p in enumerate(spec.placements) if cut_dim(p) == k]
        sizes = [np.shape(blocks[d])[k] for d in mesh.device_ids
                 if all(c == 0 for i, c in enumerate(mesh.coords(d)) if i not in cutting)]
        shape.append(sum(sizes))
    shape = tuple(shape)
    if not _misfits(spec, shape, blocks):
        return shape
    best = (len(_misfits(spec, shape, blocks)), shape)
    for k in range(ndim):
        sizes = sorted({np.shape(b)[k] for b in blocks.values()})
        tried = 0
        for a in sizes:
            for b in sizes:
                n = shape[k] - a + b
                if a == b or n < 0 or tried >= 64:
                    continue
                tried += 1
                trial = shape[:k] + (n,) + shape[k + 1:]
                best = min(best, (len(_misfits(spec, trial, blocks)), trial))
    return best[1]


__all__ = [
    "CommDebugMode", "DTensor", "DTensorSpec", "NormPartial", "Partial", "Placement", "ReduceOp", "Replicate", "Shard",
    "StridedShard", "distribute_tensor", "init_device_mesh", "redistribute", "register_reduce_op",
]
