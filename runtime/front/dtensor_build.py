"""Building DTensors from what the user holds: placements on a mesh or a sub-mesh, and ``from_local``.

``spec_on`` reads a placement list (objects, text, a DTensorSpec) for a mesh; ``placed_on`` for
what torch code passes as a mesh: an ``ss.Mesh``, a ``LocalMesh`` / ``RayMesh``, or a sub-mesh
``mesh["tp"]`` (a ``MeshView``: its placements name its axes, the other axes replicate).
``build_from_local`` is ``DTensor.from_local``: every device's shard, or, inside ``with rank(r):``
(torch's per-rank view, one controller playing rank ``r``), rank r's shard alone where the
placements make it every rank's.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Mapping, Sequence

import numpy as np

from simshard.errors import ShardingError
from simshard.sharding.layout import layout
from simshard.sharding.mesh import Mesh, MeshView
from simshard.sharding.placements import DTensorSpec, Partial, Placement, Replicate, cut_dim, parse_placement
from simshard.sharding.spelling import from_spelling

from ..eager.hosts import host_of
from ..eager.rendezvous import member

_RANK: contextvars.ContextVar[int | None] = contextvars.ContextVar("simshard_dtensor_rank", default=None)


@contextlib.contextmanager
def rank(r: int):
    """Play rank ``r`` inside the block: ``from_local(x, ...)`` takes ``x`` as rank r's shard,
    ``d.to_local()`` gives rank r's shard."""
    token = _RANK.set(int(r))
    try:
        yield int(r)
    finally:
        _RANK.reset(token)


def current_rank() -> int | None:
    """The rank played now (``rank``), or None: the controller, which holds every rank's shard."""
    return _RANK.get()


def placed_on(device_mesh, placements, ndim: int, where: str):
    """The devices object and the normalized DTensorSpec for ``placements`` on ``device_mesh``
    (a sub-mesh's placements widened to its parent, Replicate on the other axes)."""
    if isinstance(device_mesh, MeshView):
        host = host_of(device_mesh.parent)
        if not isinstance(placements, DTensorSpec):
            given = _listed(placements, device_mesh, where)
            full: list[Placement] = [Replicate()] * device_mesh.parent.ndim
            for pos, p in zip(device_mesh.positions, given):
                full[pos] = p
            placements = full
        return host, spec_on(host.mesh, placements, ndim, where)
    host = host_of(device_mesh)
    return host, spec_on(host.mesh, [Replicate()] * host.mesh.ndim if placements is None else placements, ndim, where)


def _listed(placements, view: MeshView, where: str) -> list[Placement]:
    """A sub-mesh's placements as a list of objects, one per axis of the sub-mesh."""
    if placements is None:
        return [Replicate()] * view.ndim
    if isinstance(placements, Placement):
        placements = [placements]
    if isinstance(placements, str):
        spec = from_spelling(placements, Mesh(list(view.shape.items())), where)
        placements = list(spec.placements)
    listed = [parse_placement(p) if isinstance(p, str) else p for p in placements]
    if len(listed) != view.ndim:
        raise ShardingError("placement-count", f"{where}: {len(listed)} placements for sub-mesh {view} of {view.ndim} axes")
    return listed


def spec_on(mesh: Mesh, placements, ndim: int, where: str) -> DTensorSpec:
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
    if isinstance(local_tensors, np.ndarray) or np.isscalar(local_tensors) or hasattr(local_tensors, "__array__"):
        shape = np.shape(local_tensors)  # one array, even one whose first dim is the device count
        raise ShardingError(
            "missing-shards",
            f"from_local: one array of shape {shape} where every device's shard was expected: give a list of "
            f"{len(devices)} arrays in device order (or a dict device -> array), or give rank r's shard alone "
            "inside `with rank(r):`; to lay out one global array over the mesh, use distribute_tensor")
    blocks = list(local_tensors)
    if len(blocks) != len(devices):
        raise ShardingError("missing-shards", f"from_local: {len(blocks)} shards for {len(devices)} devices; give one per device")
    return dict(zip(devices, blocks))


def misfits(spec: DTensorSpec, shape: tuple[int, ...], blocks: Mapping[int, Any]) -> list[tuple]:
    """(device, its shard's shape, the shape the layout gives it) for every shard that does not fit."""
    try:
        L = layout(spec, shape)
    except ShardingError:
        return [(d, tuple(np.shape(b)), "no shard (the placements cannot cut that shape)") for d, b in blocks.items()]
    return [(d, tuple(np.shape(b)), L.local_shape(d)) for d, b in blocks.items() if tuple(np.shape(b)) != L.local_shape(d)]


def global_shape(spec: DTensorSpec, blocks: Mapping[int, Any]) -> tuple[int, ...]:
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
    if not misfits(spec, shape, blocks):
        return shape
    best = (len(misfits(spec, shape, blocks)), shape)
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
                best = min(best, (len(misfits(spec, trial, blocks)), trial))
    return best[1]


def _this_rank_only(local, devices: Sequence[int], spec: DTensorSpec, r: int, where: str) -> dict[int, Any]:
    """Rank ``r``'s shard as every rank's, where the placements say every rank holds the same."""
    if r not in devices:
        raise ShardingError("unknown-device", f"{where}: rank {r} is not in mesh @{spec.mesh.name} (devices {list(devices)})")
    if not all(isinstance(p, Replicate) for p in spec.placements):
        raise ShardingError(
            "missing-shards",
            f"{where}: inside rank({r}) one array is rank {r}'s shard, but [{', '.join(map(str, spec.placements))}] "
            "gives other ranks other shards, which one controller playing one rank does not hold: run the per-rank "
            "code for every rank with run_per_rank(fn, mesh), or give every rank's shard (a list in device order, "
            "or a dict device -> array) outside the rank block")
    return {d: local for d in devices}


def _check_replicas(spec: DTensorSpec, blocks: Mapping[int, Any], where: str) -> None:
    """``run_check``: devices that differ only along Replicate axes hold equal shards."""
    mesh = spec.mesh
    for d, b in blocks.items():
        coords = list(mesh.coords(d))
        for i, p in enumerate(spec.placements):
            if isinstance(p, (Replicate, Partial)) and not isinstance(p, Partial):
                twin = mesh.device(coords[:i] + [0] + coords[i + 1:])
                if not np.array_equal(np.asarray(blocks[twin]), np.asarray(b)):
                    raise ShardingError("replica-mismatch", f"{where}: run_check: device {d} and device {twin} are "
                                        f"replicas along mesh axis {mesh.axis_names[i]!r} but hold different shards")


def _check_stride(shape: tuple[int, ...], stride, where: str) -> None:
    want = tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))
    if stride is not None and tuple(int(s) for s in stride) != want:
        raise ShardingError("invalid-stride", f"{where}: stride {tuple(stride)} for shape {shape}: simshard's arrays are "
                            f"contiguous, stride {want}")


def build_from_local(cls, local, device_mesh, placements, *, run_check=False, shape=None, stride=None):
    """``DTensor.from_local`` (its docstring): a ``cls`` over the shards, checked."""
    where = "from_local"
    r = current_rank()
    m = member()
    if r is not None and m is not None:  # per-rank code: every rank's shard, met in one DTensor
        def every_rank(parts):
            token = _RANK.set(None)
            try:
                return build_from_local(cls, parts, device_mesh, placements, run_check=run_check, shape=shape,
                                        stride=stride)
            finally:
                _RANK.reset(token)
        return m.meet("from_local", local, every_rank)
    host = host_of(device_mesh.parent if isinstance(device_mesh, MeshView) else device_mesh)
    blocks = _per_device(local, host.devices) if r is None else None  # one array alone is named here
    ndim = np.ndim(local) if r is not None else np.ndim(blocks[host.devices[0]])
    host, spec = placed_on(device_mesh, placements, ndim, where)
    if blocks is None:
        blocks = _this_rank_only(local, host.devices, spec, r, where)
    _same_kind(blocks, host.devices[0], where)
    given = shape is not None
    shape = tuple(int(n) for n in shape) if given else global_shape(spec, blocks)
    wrong = misfits(spec, shape, blocks)
    if wrong:
        d, got, want = wrong[0]
        more = f" (and devices {[w[0] for w in wrong[1:]]})" if len(wrong) > 1 else ""
        raise ShardingError(
            "shape-mismatch",
            f"{where}: device {d} (mesh coordinates {dict(zip(spec.mesh.axis_names, spec.mesh.coords(d)))}){more} holds a "
            f"shard of shape {got}, but [{', '.join(map(str, spec.placements))}] over global shape {shape}"
            f"{'' if given else ' (the shape the other shards fit best)'} gives it {want}")
    _check_stride(shape, stride, where)
    if run_check:
        _check_replicas(spec, blocks, where)
    first = np.asarray(blocks[host.devices[0]])
    return cls(shape, first.dtype, spec, host.put_shards({d: np.asarray(blocks[d]) for d in host.devices}),
               host.fetch, host)


def _same_kind(blocks: Mapping[int, Any], first_device: int, where: str) -> None:
    dtypes = {np.asarray(b).dtype for b in blocks.values()}
    if len(dtypes) > 1:
        raise ShardingError("dtype-mismatch", f"{where}: the shards have dtypes {sorted(map(str, dtypes))}; give one dtype")
    ranks = {d: np.ndim(b) for d, b in blocks.items()}
    bad = [d for d, k in ranks.items() if k != ranks[first_device]]
    if bad:
        raise ShardingError("shape-mismatch", f"{where}: device {bad[0]} holds a rank-{ranks[bad[0]]} shard, "
                            f"device {first_device} a rank-{ranks[first_device]} one")


__all__ = ["build_from_local", "current_rank", "global_shape", "misfits", "placed_on", "rank", "spec_on"]
