"""What a layout is: per device, the global indices it holds along every dimension (in local
order), and the axes along which devices hold pending reduction contributions; and what is read
off one (local shapes, padding, shard / assemble, equivalence). ``layout`` builds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping, Sequence

import numpy as np

from .axes import AxisRef
from ..dtypes import bit_equal
from ..errors import ReplicaMismatchError, ShardingError
from .mesh import Mesh
from .reduce_ops import REDUCE_OPS
from .rows import rows_of


@dataclass(frozen=True, eq=False)
class Layout:
    """Per device id, the global indices held along each dimension; plus pending-reduction axes."""

    mesh: Mesh
    shape: tuple[int, ...]
    index_map: Mapping[int, tuple[np.ndarray, ...]]
    unreduced: tuple[AxisRef, ...] = ()
    reduce_op: str = "sum"
    boxes: Boxes | None = field(default=None, repr=False)  # the same blocks as ranges, where flat_layout made them

    # -- what each device holds --------------------------------------------------------------
    @property
    def devices(self) -> tuple[int, ...]:
        return self.mesh.device_ids

    def indices(self, device: int) -> tuple[np.ndarray, ...]:
        """Per dimension, the global indices ``device`` holds, in its local order."""
        try:
            return self.index_map[device]
        except KeyError:
            raise ShardingError("unknown-device", f"device {device} is not in mesh @{self.mesh.name}") from None

    def local_shape(self, device: int) -> tuple[int, ...]:
        return tuple(len(i) for i in self.indices(device))

    @property
    def block_shape(self) -> tuple[int, ...]:
        """The padded local shape: per dim the largest block any device holds (ceil(d/n) for the flat rule)."""
        if self.boxes is not None:
            sizes = self.boxes.sizes  # per dim a column's max (numpy reduces axis 0 of [n, k] slowly)
            return tuple(int(sizes[:, k].max(initial=0)) for k in range(sizes.shape[1]))
        return tuple(
            max((len(self.index_map[d][k]) for d in self.devices), default=0) for k in range(len(self.shape))
        )

    def padding(self, device: int) -> tuple[int, ...]:
        """Per dim, how many padding elements ``device``'s block carries beyond its real data."""
        return tuple(b - n for b, n in zip(self.block_shape, self.local_shape(device)))

    def is_contiguous(self) -> bool:
        """True when every device holds one ascending contiguous range per dim."""
        return all(_is_range(ix) for d in self.devices for ix in self.index_map[d])

    def holder_count(self) -> np.ndarray:
        """For each element, how many devices hold it (contributions to a pending reduction count too)."""
        count = np.zeros(self.shape, dtype=np.int64)
        for d in self.devices:
            np.add.at(count, np.ix_(*self.index_map[d]) if self.shape else (), 1)
        return count

    def distinct_blocks(self) -> list[tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]]:
        """Distinct index blocks in device order, each with the devices holding it."""
        blocks: dict[tuple, list[int]] = {}
        for d in self.devices:
            key = tuple(tuple(int(i) for i in ix) for ix in self.index_map[d])
            blocks.setdefault(key, []).append(d)
        return [(k, tuple(v)) for k, v in blocks.items()]

    # -- pending reductions ------------------------------------------------------------------
    def reduce_groups(self) -> list[tuple[int, ...]]:
        """Devices whose contributions combine into one block, each group in canonical order
        (ascending coordinate along the unreduced axes). Singletons when nothing is pending."""
        return list(self.mesh.groups_over(self.unreduced))

    def contributes_value(self, device: int) -> bool:
        """For sum/prod, only the first device of each reduce group holds the value; others the identity."""
        if not self.unreduced or REDUCE_OPS[self.reduce_op].idempotent:
            return True
        return all(self.mesh.axis_index(device, r) == 0 for r in self.unreduced)

    # -- data ------------------------------------------------------------------------------
    def shard(self, array) -> dict[int, np.ndarray]:
        """Split a global array into each device's local shard (read-only; devices holding the
        same block share one array)."""
        array = np.asarray(array)
        if tuple(array.shape) != self.shape:
            raise ShardingError("shape-mismatch", f"array of shape {array.shape} given to a layout of shape {self.shape}")
        out = {}
        for _, holders in self.distinct_blocks():
            block = None
            for d in holders:
                if not self.contributes_value(d):
                    out[d] = np.full(self.local_shape(d), REDUCE_OPS[self.reduce_op].identity(array.dtype),
                                     dtype=array.dtype)
                    continue
                if block is None:
                    block = _take_block(array, self.index_map[d])
                    block.flags.writeable = False  # shared by its holders: nobody writes into it
                out[d] = block
        return {d: out[d] for d in self.devices}

    def assemble(self, shards: Mapping[int, np.ndarray]) -> np.ndarray:
        """Rebuild the global array; replicas must agree bit for bit, pending reductions are
        combined in canonical order."""
        missing = [d for d in self.devices if d not in shards]
        if missing:
            raise ShardingError("missing-shards", f"no shard for devices {missing}")
        for d in self.devices:
            if tuple(np.shape(shards[d])) != self.local_shape(d):
                raise ShardingError(
                    "shape-mismatch",
                    f"device {d} holds a shard of shape {np.shape(shards[d])}, its layout says {self.local_shape(d)}",
                )
        dtype = np.asarray(shards[self.devices[0]]).dtype
        if self.shape and not self.unreduced:
            out = self._assemble_blocks(shards, dtype)
            if out is not None:
                return out
        out = np.zeros(self.shape, dtype=dtype)
        written = np.zeros(self.shape, dtype=bool)
        owner = np.full(self.shape, -1, dtype=np.int64)
        op = REDUCE_OPS[self.reduce_op]
        for group in self.reduce_groups():
            parts = [np.asarray(shards[d], dtype=dtype) for d in group]
            block = op.reduce(parts) if len(parts) > 1 else parts[0]
            ix = np.ix_(*self.index_map[group[0]]) if self.shape else ()
            clash = written[ix] & ~bit_equal(out[ix], block)
            if clash.any():
                pos = tuple(int(i) for i in np.argwhere(clash)[0]) if self.shape else ()
                gidx = tuple(int(self.index_map[group[0]][k][p]) for k, p in enumerate(pos))
                raise ReplicaMismatchError(
                    f"replicas disagree at global index {gidx}: device {int(owner[gidx])} holds "
                    f"{out[gidx].item()!r}, device {group[0]} holds {np.asarray(block)[pos].item()!r}"
                )
            owner[ix] = np.where(written[ix], owner[ix], group[0])  # first writer stays the owner
            out[ix] = block
            written[ix] = True
        if not written.all():
            raise ShardingError("incomplete-layout", f"no device holds global index {tuple(np.argwhere(~written)[0])}")
        return out

    def _assemble_blocks(self, shards: Mapping[int, np.ndarray], dtype) -> np.ndarray | None:
        """``assemble`` without pending reductions, when every block is a range per dim and the
        distinct blocks do not overlap (every Shardy / DTensor layout): each replica compared
        with its block's first holder, each block written once by slicing. None otherwise."""
        blocks = self.distinct_blocks()
        cuts = [_as_slices(key) for key, _ in blocks]
        if any(cut is None for cut in cuts):
            return None
        out = np.empty(self.shape, dtype=dtype)
        written = np.zeros(self.shape, dtype=bool)
        for (key, holders), cut in zip(blocks, cuts):
            if written[cut].any():
                return None  # overlapping blocks: the general path says who disagrees
            first = np.asarray(shards[holders[0]], dtype=dtype)
            for d in holders[1:]:
                same = bit_equal(np.asarray(shards[d], dtype=dtype), first)
                if not same.all():
                    pos = tuple(int(i) for i in np.argwhere(~same)[0])
                    gidx = tuple(int(key[k][p]) for k, p in enumerate(pos))
                    raise ReplicaMismatchError(
                        f"replicas disagree at global index {gidx}: device {holders[0]} holds "
                        f"{first[pos].item()!r}, device {d} holds {np.asarray(shards[d])[pos].item()!r}"
                    )
            out[cut] = first
            written[cut] = True
        if not written.all():
            raise ShardingError("incomplete-layout", f"no device holds global index {tuple(np.argwhere(~written)[0])}")
        return out

    # -- comparison --------------------------------------------------------------------------
    def same_as(self, other: "Layout") -> bool:
        """Do both layouts put the same data on every device (same indices, same local order,
        same pending reductions)?"""
        if self.shape != other.shape or set(self.devices) != set(other.devices):
            return False
        if not self.same_blocks(other):
            return False
        if bool(self.unreduced) != bool(other.unreduced):
            return False
        if self.unreduced:
            if self.reduce_op != other.reduce_op:
                return False
            if {frozenset(g) for g in self.reduce_groups()} != {frozenset(g) for g in other.reduce_groups()}:
                return False
        return True

    def same_blocks(self, other: "Layout") -> bool:
        """Does every device hold the same indices in the same local order under both (pending
        reductions aside)? On the boxes where both have equal ones, else on the index arrays."""
        if self.boxes is not None and other.boxes is not None and self.boxes.same_as(other.boxes):
            return True
        # by identity within this call (both layouts hold the tuples): devices holding one block share
        # its tuple of index arrays
        seen: set[tuple[int, int]] = set()
        for d in self.devices:
            a, b = self.index_map[d], other.index_map[d]
            if a is b or (id(a), id(b)) in seen:
                continue
            if any(x is not y and not np.array_equal(x, y) for x, y in zip(a, b)):
                return False
            seen.add((id(a), id(b)))
        return True

    def without_pending(self) -> "Layout":
        """The same blocks, every device holding its values (no pending reduction)."""
        return replace(self, unreduced=(), reduce_op="sum")

    __eq__ = same_as  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Layout(@{self.mesh.name}, shape={self.shape}, block={self.block_shape}, distinct_blocks={len(self.distinct_blocks())})"


@dataclass(frozen=True, eq=False)
class Boxes:
    """Every device's block as a range per dim: ``lo`` and ``hi`` (exclusive), int64 arrays of
    shape [devices, rank], a row per device in ascending device id (``ids``); an empty block is
    ``lo == hi``. The planner checks moves and counts bytes on these with numpy, for all devices
    at once, instead of comparing index arrays device by device."""

    ids: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def rows(self, devices) -> np.ndarray:
        """The rows of ``devices`` (an int array of device ids, any shape)."""
        return rows_of(self.ids, devices)

    @property
    def sizes(self) -> np.ndarray:
        """[devices, rank]: each device's local shape."""
        return self.hi - self.lo

    def same_as(self, other: "Boxes") -> bool:
        """Equal boxes hold equal blocks (unequal ones may still, where blocks are empty)."""
        return bool(np.array_equal(self.ids, other.ids) and np.array_equal(self.lo, other.lo)
                    and np.array_equal(self.hi, other.hi))


class FlatIndexMap(Mapping):
    """device -> its index arrays, for a flat layout: made on first use per distinct block (the
    planner mostly reads the boxes), the devices holding one block sharing its tuple and the
    blocks sharing equal ranges. The device -> block table is made on first lookup too: a layout
    of 8,192 devices that only its boxes are read of makes none."""

    def __init__(self, devices: Sequence[int], rows: Sequence[int], lo: np.ndarray, hi: np.ndarray):
        self._devices, self._rows = devices, rows
        self._row: dict[int, int] | None = None
        self._lo, self._hi = lo, hi  # [distinct blocks, rank]
        self._made: dict[int, tuple[np.ndarray, ...]] = {}
        self._ranges: dict[tuple[int, int], np.ndarray] = {}

    def _table(self) -> dict[int, int]:
        """device -> its block's row (made once)."""
        if self._row is None:
            self._row = dict(zip(self._devices, np.asarray(self._rows).tolist()))
        return self._row

    def __getitem__(self, device: int) -> tuple[np.ndarray, ...]:
        r = (self._row or self._table())[device]
        hit = self._made.get(r)
        if hit is None:
            hit = self._made[r] = tuple(self._range(lo, hi) for lo, hi in zip(self._lo[r].tolist(), self._hi[r].tolist()))
        return hit

    def _range(self, lo: int, hi: int) -> np.ndarray:
        r = self._ranges.get((lo, hi))
        if r is None:
            r = self._ranges[(lo, hi)] = frozen_indices(np.arange(lo, hi))
        return r

    def __iter__(self) -> Iterator[int]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._devices)


def _is_range(ix: np.ndarray) -> bool:
    """An ascending run of consecutive indices (or empty)."""
    return len(ix) == 0 or (int(ix[-1]) - int(ix[0]) == len(ix) - 1 and bool(np.all(np.diff(ix) == 1)))


def _as_slices(index: Sequence) -> tuple[slice, ...] | None:
    """A block's per-dim global positions as slices, or None when some dim is not a range."""
    if not all(_is_range(np.asarray(ix)) for ix in index):
        return None
    return tuple(slice(int(ix[0]), int(ix[0]) + len(ix)) if len(ix) else slice(0, 0) for ix in index)


def _take_block(array: np.ndarray, index: Sequence[np.ndarray]) -> np.ndarray:
    """``array[np.ix_(*index)]`` as a new array; by slicing where every dim is a range (a block
    copy, much faster than a gather)."""
    if not array.shape:
        return array.copy()
    cut = _as_slices(index)
    if cut is not None:
        return np.array(array[cut], copy=True, order="C")
    return array[np.ix_(*index)]


def frozen_indices(a) -> np.ndarray:
    """``a`` as a read-only index array (layouts share them between devices)."""
    a = np.asarray(a, dtype=np.intp)
    a.flags.writeable = False
    return a
