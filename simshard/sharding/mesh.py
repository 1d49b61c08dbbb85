"""Logical device meshes: ordered named axes over an ordering of device ids.

Several logical meshes may view the same devices (different axes, or a different device order);
each has a name, which is how Shardy text refers to it (``<@mesh_xy, ...>``).
"""

from __future__ import annotations

import enum
import math
import numbers
import operator
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .axes import AxisRef
from ..errors import ShardingError
from . import physical, syntax
from .mesh_view import MeshSize, MeshView

# A mesh holds every device id; far beyond this it could be neither stored nor simulated, and
# building it would exhaust memory (a 30-character mesh text can name 10**12 devices).
MAX_DEVICES = 1 << 20


class AxisType(enum.Enum):
    """How a mesh axis is sharded (JAX's ``jax.sharding.AxisType``).

    ``Auto``: the compiler (propagation) decides; ``Explicit``: shardings over the axis are part of
    each value's type and computed at trace time; ``Manual``: per-device code (shard_map)."""

    Auto = "Auto"
    Explicit = "Explicit"
    Manual = "Manual"

    def __repr__(self) -> str:
        return self.name


def _axis_types(types, n: int) -> tuple[AxisType, ...]:
    if types is None:
        return (AxisType.Auto,) * n
    if isinstance(types, (AxisType, str)):
        types = (types,) * n
    out = tuple(t if isinstance(t, AxisType) else AxisType[str(t)] for t in types)
    if len(out) != n:
        raise ShardingError("invalid-mesh", f"axis_types has {len(out)} entries for a mesh of {n} axes")
    return out


def _axis_size(name: str, size) -> int:
    """An axis size as an int: an integer (numpy's too), or a float holding a whole number; a
    fraction, text or anything else is refused naming the axis (``int(2.5)`` would quietly make it 2)."""
    try:
        return operator.index(size)
    except TypeError:
        pass
    if isinstance(size, numbers.Real) and not isinstance(size, bool) and math.isfinite(size) and size == int(size):
        return int(size)
    raise ShardingError("invalid-mesh", f'axis "{name}" has size {size!r}; sizes are whole numbers of devices', axis=name)


@dataclass(frozen=True, init=False)
class Mesh:
    """Named axes with sizes (major to minor) and the device id at each row-major position.

    ``axis_types`` gives each axis an ``AxisType`` (default ``Auto``); it is part of the mesh's
    identity, as in JAX, but not of its Shardy text."""

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    device_ids: tuple[int, ...]
    name: str
    axis_types: tuple[AxisType, ...]

    def __init__(
        self,
        axes: Mapping[str, int] | Sequence[tuple[str, int]],
        device_ids: Sequence[int] | None = None,
        name: str = "mesh",
        axis_types: Sequence[AxisType] | AxisType | None = None,
    ):
        items = list(axes.items()) if isinstance(axes, Mapping) else [tuple(a) for a in axes]
        names = tuple(str(n) for n, _ in items)
        sizes = tuple(_axis_size(n, s) for n, (_, s) in zip(names, items))
        for n, s in zip(names, sizes):
            if not n:
                raise ShardingError("invalid-mesh", "mesh axis names must be non-empty")
            if s < 1:
                raise ShardingError("invalid-mesh", f'axis "{n}" has size {s}; sizes must be >= 1', axis=n)
        dup = [n for n in set(names) if names.count(n) > 1]
        if dup:
            raise ShardingError("invalid-mesh", f'axis "{dup[0]}" appears twice in the mesh', axis=dup[0])
        size = math.prod(sizes)
        if size > MAX_DEVICES:
            raise ShardingError(
                "invalid-mesh", f"mesh {dict(zip(names, sizes))} has {size} devices; at most {MAX_DEVICES} are supported"
            )
        ids = tuple(range(size)) if device_ids is None else tuple(int(d) for d in device_ids)
        if device_ids is None:  # 0..n-1 in order: no check, and its order known (no sort of 8,192 ids)
            object.__setattr__(self, "_order_key", ("iota", size))
        elif len(ids) != size or sorted(ids) != list(range(size)):
            raise ShardingError(
                "invalid-mesh",
                f"device_ids must be a permutation of 0..{size - 1} for a mesh of {size} devices, got {list(ids)}",
            )
        object.__setattr__(self, "axis_names", names)
        object.__setattr__(self, "axis_sizes", sizes)
        object.__setattr__(self, "device_ids", ids)
        object.__setattr__(self, "name", str(name))
        object.__setattr__(self, "axis_types", _axis_types(axis_types, len(names)))

    def __hash__(self) -> int:
        # meshes key many caches (layouts, reshard plans) and may list thousands of device ids:
        # hash them once (not pickled: another process hashes strings differently)
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.axis_names, self.axis_sizes, self.device_ids, self.name, self.axis_types))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    # -- axis types ------------------------------------------------------------------------
    def axes_of_type(self, axis_type: AxisType) -> tuple[str, ...]:
        return tuple(n for n, t in zip(self.axis_names, self.axis_types) if t == axis_type)

    @property
    def explicit_axes(self) -> tuple[str, ...]:
        return self.axes_of_type(AxisType.Explicit)

    @property
    def auto_axes(self) -> tuple[str, ...]:
        return self.axes_of_type(AxisType.Auto)

    @property
    def manual_axes(self) -> tuple[str, ...]:
        return self.axes_of_type(AxisType.Manual)

    def update_axis_types(self, types: Mapping[str, AxisType]) -> "Mesh":
        """A copy with some axes' types changed (``{"X": AxisType.Auto}``)."""
        for n in types:
            self.axis_size(n)  # unknown axis -> ShardingError
        new = tuple(types.get(n, t) for n, t in zip(self.axis_names, self.axis_types))
        return Mesh(list(zip(self.axis_names, self.axis_sizes)), self.device_ids, self.name, new)

    # -- shape -----------------------------------------------------------------------------
    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.axis_sizes))

    @property
    def ndim(self) -> int:
        return len(self.axis_names)

    @property
    def size(self) -> "MeshSize":
        """The number of devices: an int, also callable as torch's ``DeviceMesh.size(mesh_dim=None)``."""
        return MeshSize(self.axis_sizes)

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """torch's name for the axis names."""
        return self.axis_names

    def __getitem__(self, names: str | Sequence[str]) -> "MeshView":
        """torch's ``mesh["tp"]`` / ``mesh["dp", "tp"]``: the mesh seen over those axes only
        (``MeshView``: a placement list on it names those axes, the others replicate)."""
        names = (names,) if isinstance(names, str) else tuple(names)
        for n in names:
            self.axis_size(n)  # unknown axes named here
        if len(set(names)) != len(names):
            raise ShardingError("invalid-mesh", f"mesh[{', '.join(map(repr, names))}]: an axis is named twice")
        return MeshView(self, names)

    def axis_size(self, axis: str | AxisRef) -> int:
        """Size of a full axis (by name) or of a sub-axis."""
        ref = axis if isinstance(axis, AxisRef) else AxisRef(axis)
        if ref.name not in self.axis_names:
            raise ShardingError(
                "unknown-axis",
                f'axis "{ref.name}" does not exist in mesh @{self.name} (axes: {", ".join(self.axis_names)})',
                axis=ref.name,
            )
        return ref.size(self.shape[ref.name])

    # -- devices and coordinates -------------------------------------------------------------
    def coords(self, device: int) -> tuple[int, ...]:
        """Mesh coordinate of a device id (one entry per axis, mesh order)."""
        try:
            flat = self._position[device]
        except KeyError:
            raise ShardingError("unknown-device", f"device {device} is not in mesh @{self.name}") from None
        out = []
        for s in reversed(self.axis_sizes):
            out.append(flat % s)
            flat //= s
        return tuple(reversed(out))

    def device(self, coords: Sequence[int]) -> int:
        """Device id at a mesh coordinate."""
        if len(coords) != self.ndim or any(not 0 <= c < s for c, s in zip(coords, self.axis_sizes)):
            raise ShardingError("unknown-device", f"coordinate {tuple(coords)} is outside mesh {self.shape}")
        flat = 0
        for c, s in zip(coords, self.axis_sizes):
            flat = flat * s + c
        return self.device_ids[flat]

    def axis_index(self, device: int, axis: str | AxisRef) -> int:
        """Coordinate of ``device`` along a full axis or a sub-axis ``"x":(m)k``."""
        ref = axis if isinstance(axis, AxisRef) else AxisRef(axis)
        n = self.axis_size(ref.name)
        c = self.coords(device)[self.axis_names.index(ref.name)]
        if ref.sub is None:
            return c
        pre, k = ref.sub
        return (c // (n // (pre * k))) % k

    def axis_indices(self, axis: str | AxisRef) -> np.ndarray:
        """Every device's coordinate along a full axis or a sub-axis, in ``device_ids`` order
        (``axis_index`` for all devices at once; read-only, computed once per axis)."""
        ref = axis if isinstance(axis, AxisRef) else AxisRef(axis)
        cache = self.__dict__.setdefault("_axis_indices", {})
        out = cache.get(ref)
        if out is None:
            n = self.axis_size(ref.name)
            k = self.axis_names.index(ref.name)
            inner = int(np.prod(self.axis_sizes[k + 1:], dtype=np.int64))
            c = (np.arange(self.size, dtype=np.int64) // inner) % n
            if ref.sub is not None:
                pre, size = ref.sub
                c = (c // (n // (pre * size))) % size
            c.setflags(write=False)
            out = cache[ref] = c
        return out

    def groups_over(self, axes: Sequence[str | AxisRef]) -> tuple[tuple[int, ...], ...]:
        """The devices that differ only in their coordinates along ``axes`` (full axes or
        sub-axes), group by group in the order their first devices appear in ``device_ids``;
        each group ordered by the axes' digits read as one number, the first axis most
        significant. (Computed on coordinate arrays, once per mesh and axes.)"""
        refs = tuple(a if isinstance(a, AxisRef) else AxisRef(a) for a in axes)
        cache = self.__dict__.setdefault("_groups_over", {})
        hit = cache.get(refs)
        if hit is not None:
            return hit
        if not refs:
            hit = cache[refs] = tuple((d,) for d in self.device_ids)
            return hit
        coords = np.stack([self.axis_indices(n) for n in self.axis_names], axis=1).copy()
        pos = np.zeros(self.size, dtype=np.int64)
        for r in refs:
            n, k = self.axis_size(r.name), self.axis_size(r)
            digit = self.axis_indices(r)
            pos = pos * k + digit
            coords[:, self.axis_names.index(r.name)] -= digit * (n // (r.pre_size() * k))
        _, first, group = np.unique(coords, axis=0, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # groups by first appearance
        order = np.lexsort((pos, rank[group]))
        ids = np.asarray(self.device_ids, dtype=np.int64)[order]
        bounds = np.cumsum(np.bincount(rank[group], minlength=len(first)))[:-1]
        hit = cache[refs] = tuple(tuple(g.tolist()) for g in np.split(ids, bounds))
        return hit

    def positions(self, devices) -> np.ndarray:
        """Where each of ``devices`` (an int array of ids, any shape) sits in ``device_ids``."""
        table = self.__dict__.get("_positions")
        if table is None:
            ids = np.asarray(self.device_ids, dtype=np.int64)
            table = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
            table[ids] = np.arange(len(ids))
            object.__setattr__(self, "_positions", table)
        return table[np.asarray(devices, dtype=np.int64)]

    @property
    def _position(self) -> dict[int, int]:
        # Cached inverse of device_ids (a frozen dataclass can still memoise in __dict__).
        pos = self.__dict__.get("_pos")
        if pos is None:
            pos = {d: i for i, d in enumerate(self.device_ids)}
            object.__setattr__(self, "_pos", pos)
        return pos

    def __eq__(self, other: object) -> bool:
        """Mesh equality: same axes, sizes, device order, name and axis types (a mesh is
        usually compared with itself, so identity answers first). The two weaker relations
        code needs are named, here and nowhere else: :meth:`same_layout` (name and axis types
        aside) and :meth:`same_axes` (device order aside too)."""
        if self is other:
            return True
        if not isinstance(other, Mesh):
            return NotImplemented
        return self.same_layout(other) and (self.name, self.axis_types) == (other.name, other.axis_types)

    def same_layout(self, other: "Mesh") -> bool:
        """Whether ``other`` lays devices out as this mesh does: the same axes with the same
        sizes over the same device order, whatever the names of the meshes and the types of
        their axes (a sharding on one means the same placement on the other)."""
        return self.same_axes(other) and (self.device_ids is other.device_ids or self._order == other._order)

    @property
    def in_order(self) -> bool:
        """Whether ``device_ids`` are 0..n-1 in order (the usual mesh: its ids are sorted)."""
        return self._order[0] == "iota"

    @property
    def _order(self):
        """The device order compared cheaply: ``("iota", n)`` for devices 0..n-1 in order (the
        usual case: an 8,192-device mesh compares in O(1), not by its tuple), else the ids."""
        order = self.__dict__.get("_order_key")
        if order is None:
            ids = self.device_ids
            iota = len(ids) == 0 or (ids[0] == 0 and ids[-1] == len(ids) - 1 and ids == tuple(range(len(ids))))
            order = ("iota", len(ids)) if iota else ids
            object.__setattr__(self, "_order_key", order)
        return order

    def same_axes(self, other: "Mesh") -> bool:
        """Whether ``other`` has the same axes with the same sizes, in the same order, whatever
        its device order, name and axis types (a sharding written for one fits the other)."""
        return self is other or (self.axis_names, self.axis_sizes) == (other.axis_names, other.axis_sizes)

    # -- text ------------------------------------------------------------------------------
    def __str__(self) -> str:
        axes = ", ".join(f'"{n}"={s}' for n, s in zip(self.axis_names, self.axis_sizes))
        if self.device_ids == tuple(range(self.size)):
            return f"@{self.name} = <[{axes}]>"
        return f"@{self.name} = <[{axes}], device_ids=[{', '.join(map(str, self.device_ids))}]>"

    def __repr__(self) -> str:
        ids = "" if self.device_ids == tuple(range(self.size)) else f", device_ids={list(self.device_ids)}"
        types = ""
        if any(t != AxisType.Auto for t in self.axis_types):
            types = f", axis_types=({', '.join(t.name for t in self.axis_types)}{',' if self.ndim == 1 else ''})"
        return f"Mesh({self.shape}{ids}, name={self.name!r}{types})"

    @staticmethod
    def parse(text: str) -> "Mesh":
        """Parse Shardy's mesh text, ``@name = <["x"=2, "y"=4], device_ids=[...]>``."""
        name, axes, ids = syntax.parse_mesh(text)
        if not axes and ids is not None and len(ids) == 1 and ids[0] != 0:
            raise ShardingError(
                "unsupported-mesh",
                f"mesh @{name} is Shardy's maximal mesh on device {ids[0]} (no axes, device_ids=[{ids[0]}]); "
                "a simshard mesh numbers its devices from 0: write <[], device_ids=[0]> (or <[]>)",
            )
        return Mesh(axes, ids or None, name=name)

    def renamed(self, name: str) -> "Mesh":
        return Mesh(list(zip(self.axis_names, self.axis_sizes)), self.device_ids, name, self.axis_types)


def make_mesh(
    axis_dims: Sequence[int],
    axis_names: Sequence[str],
    devices: int | Sequence[int] | None = None,
    physical_shape: Sequence[int] | None = None,
    mesh_axis_splitting: bool = False,
    name: str = "mesh",
    axis_types: Sequence[AxisType] | AxisType | None = None,
) -> Mesh:
    """Build a mesh the scalax way: one ``-1`` in ``axis_dims`` is inferred from the device count.

    ``devices`` is a count or a list of device ids (default: the product of ``physical_shape``,
    or of ``axis_dims`` when no dim is -1). With ``physical_shape``, each logical axis is made from
    whole physical dimensions when possible (device order follows that assignment); a logical
    axis that would need a physical dimension split is refused unless ``mesh_axis_splitting``.
    ``axis_types`` (one ``AxisType`` per axis, or one for all) defaults to ``Auto`` everywhere.
    """
    dims = [int(d) for d in axis_dims]
    if len(dims) != len(axis_names):
        raise ShardingError(
            "invalid-mesh", f"axis_dims {tuple(dims)} and axis_names {tuple(axis_names)} differ in length"
        )
    count, ids, counted_from = physical.device_count(devices, physical_shape)
    dims = physical.infer_dims(dims, count, counted_from)
    if physical_shape is not None:
        perm = physical.device_order(dims, [int(p) for p in physical_shape], mesh_axis_splitting)
        ids = [ids[p] for p in perm] if ids is not None else perm
    return Mesh(list(zip(axis_names, dims)), ids, name=name, axis_types=axis_types)

