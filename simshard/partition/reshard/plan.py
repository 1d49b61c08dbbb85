"""Reshard plans: steps with their collective, device groups, bytes and analytic minimum.

A ``Step`` moves data from one layout (``before``) to the next (``after``). It knows, per device,
the bytes it sends and receives and the analytic minimum it has to receive:

* all-gather: what the device lacks of the group's data, ``G - own`` (``(g-1)/g`` of the group's
  data for even blocks);
* reduce-scatter: ``(g-1)/g`` of the buffer being reduced;
* all-reduce: ``2(g-1)/g`` of the buffer (a reduce-scatter plus an all-gather);
* all-to-all: what leaves the device, its block less the chunk it keeps (``(g-1)/g`` even);
* collective-permute / exchange: the elements of the new block the device does not hold;
* local steps (slice, embed, unreduce, rescale): nothing.

Byte counts are what direct algorithms move (every byte sent once, to the device that needs it);
``ratio`` compares the step's total received bytes with the total minimum. ``emit`` (its own
module) turns the steps into every device's instructions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ...sharding.axes import merge_adjacent
from ...sharding.layout import Layout, layout_of
from ...sharding.mesh import Mesh
from ...sharding.dims import Sharding
from ...sharding.rows import distinct_rows, row_of, rows_of
from ..builder import PerDevice
from .identity_cache import IdentityCache

Group = tuple[int, ...]


class IndexSpan(NamedTuple):
    """An index array's smallest and largest index, and whether it holds every index between."""

    lo: int
    hi: int
    whole_range: bool


def _index_span(a: np.ndarray) -> IndexSpan:
    lo, hi = int(a.min()), int(a.max())
    return IndexSpan(lo, hi, hi - lo + 1 == len(a))


_SPANS: IdentityCache[IndexSpan] = IdentityCache(_index_span)


def span(a: np.ndarray) -> IndexSpan:
    """A non-empty index array's ``IndexSpan``, computed once per array object while it lives:
    layouts share one array between devices, and a plan asks of each block many times."""
    return _SPANS(a)


def common_count(a: np.ndarray, b: np.ndarray) -> int:
    """How many global indices two index arrays (each without repeats) share: O(1) for the
    contiguous ranges of block layouts, a sorted intersection otherwise."""
    if not len(a) or not len(b):
        return 0
    lo_a, hi_a, range_a = span(a)
    lo_b, hi_b, range_b = span(b)
    if range_a and range_b:
        return max(0, min(hi_a, hi_b) - max(lo_a, lo_b) + 1)
    return len(np.intersect1d(a, b, assume_unique=True))


@dataclass(frozen=True, eq=False)
class Shapes:
    """A layout's local shapes as arrays, a row per device in ascending device id: what byte
    counts and shape classes are computed from, for all devices at once."""

    ids: np.ndarray  # [devices] ascending device ids
    dims: np.ndarray  # [devices, rank] local shapes
    elements: np.ndarray  # [devices] elements per block
    classes: np.ndarray  # [devices] equal local shapes, equal class

    def rows(self, devices) -> np.ndarray:
        """The rows of ``devices`` (an int array of device ids, any shape)."""
        return rows_of(self.ids, devices)

    def per_device(self, values: np.ndarray, devices=None) -> dict[int, int]:
        """``{device: value}`` from an array of values for ``devices`` (default: every row)."""
        ids = self.ids if devices is None else np.asarray(devices)
        return dict(zip(ids.reshape(-1).tolist(), np.asarray(values).reshape(-1).tolist()))


class ShapeView(Mapping):
    """device -> local shape, read off a [devices, rank] array of shapes (rows in ascending
    device id, ``ids``) when asked: callers ask for a few representative devices."""

    def __init__(self, ids: np.ndarray, dims: np.ndarray):
        self.ids, self.dims = ids, dims

    def __getitem__(self, device: int) -> tuple[int, ...]:
        return tuple(self.dims[row_of(self.ids, device)].tolist())

    def __iter__(self):
        return iter(self.ids.tolist())

    def __len__(self) -> int:
        return len(self.ids)


class LayoutShapes(NamedTuple):
    """A layout's local shapes, as arrays (``Shapes``) and as a device -> shape mapping."""

    arrays: Shapes
    by_device: ShapeView


def _layout_shapes(L: Layout) -> LayoutShapes:
    """``shapes_of(L)`` and ``local_shapes(L)``, from the boxes where the layout has them."""
    if L.boxes is not None:
        ids, dims = L.boxes.ids, L.boxes.sizes
    else:
        ids = np.array(sorted(L.devices), dtype=np.int64)
        dims = np.array([[len(ix) for ix in L.index_map[d]] for d in ids.tolist()], dtype=np.int64)
        dims = dims.reshape(len(ids), len(L.shape))
    arrays = Shapes(ids, dims, np.prod(dims, axis=1, dtype=np.int64), distinct_rows(dims)[2])
    return LayoutShapes(arrays, ShapeView(ids, dims))


# per layout object while it lives (a Layout hashes by identity: a value hash would read every
# device's index arrays)
_PER_LAYOUT: IdentityCache[LayoutShapes] = IdentityCache(_layout_shapes)


def shapes_of(L: Layout) -> Shapes:
    """``L``'s local shapes as arrays (computed once per layout object)."""
    return _PER_LAYOUT(L).arrays


def by_shape_class(devices: Sequence[int], layouts: Sequence[Layout], make) -> PerDevice:
    """``device -> make(device)`` for an instruction that depends on a device only through its
    local shapes under ``layouts``: ``make`` runs once per class of devices with equal shapes
    under all of them (found with numpy, not device by device). ``devices`` ascending."""
    ids = _device_ids(devices, [shapes_of(L) for L in layouts])
    cols = [shapes_of(L).classes for L in layouts]
    if all(int(c.max(initial=0)) == 0 for c in cols):  # one block shape everywhere: one class
        return PerDevice(ids, np.zeros(len(ids), dtype=np.int64), [make(devices[0])] if devices else [])
    _, first, inverse = distinct_rows(np.stack(cols, axis=1))
    return PerDevice(ids, inverse, [make(devices[i]) for i in first.tolist()])


def _device_ids(devices: Sequence[int], shapes: Sequence[Shapes]) -> np.ndarray:
    """``devices`` (ascending, without repeats) as an int array: a layout's own ``ids`` where
    they are the same devices, 0..n-1 (both ends and the length agree), rather than converting
    thousands of Python ints on every call."""
    n = len(devices)
    if n and devices[0] == 0 and devices[-1] == n - 1:
        for s in shapes:
            if s.ids.dtype == np.int64 and len(s.ids) == n and int(s.ids[-1]) == n - 1:
                return s.ids
    return np.asarray(devices, dtype=np.int64)


def by_block(devices: Sequence[int], L: Layout, make) -> PerDevice:
    """``device -> make(device)`` for an instruction that depends on a device only through the
    block it holds under ``L`` (a constant's or an iota's values): ``make`` runs once per
    distinct block. ``devices`` ascending."""
    ids = np.asarray(devices, dtype=np.int64)
    if L.boxes is not None and np.array_equal(L.boxes.ids, ids):
        _, first, inverse = distinct_rows(np.concatenate([L.boxes.lo, L.boxes.hi], axis=1))
        return PerDevice(ids, inverse, [make(devices[i]) for i in first.tolist()])
    # devices holding one block share its index arrays (layouts make them once per block)
    return PerDevice.by_key(devices, lambda d: tuple(map(id, L.indices(d))), make)


def local_shapes(L: Layout) -> ShapeView:
    """Every device's local shape (computed once per layout object)."""
    return _PER_LAYOUT(L).by_device


def largest_block(L: Layout) -> int:
    """Elements of the largest block any device holds (computed once per layout object)."""
    return int(shapes_of(L).elements.max(initial=0))


def block_size(L: Layout, d: int) -> int:
    return math.prod(len(ix) for ix in L.index_map[d])


@dataclass(frozen=True, eq=False)
class Step:
    """One step of a reshard plan (see the module doc for the byte conventions)."""

    kind: str  # slice | all_gather | reduce_scatter | all_reduce | all_to_all | collective_permute | exchange | embed | unreduce | rescale
    before: Any  # Sharding or Layout
    after: Any
    shape: tuple[int, ...]
    itemsize: int
    groups: tuple[Group, ...] = ()
    axes: tuple[str, ...] = ()  # mesh axes / sub-axes it runs over
    dim: Any = None  # the dim gathered / scattered / embedded (all_to_all: the dim the atoms leave)
    tgt_dim: int | None = None  # all_to_all: the dim the atoms join
    reduce_op: str = "sum"
    pairs: tuple[tuple[int, int], ...] = ()  # collective_permute: (source, target); self pairs keep data
    sent: Mapping[int, int] = field(default_factory=dict)
    received: Mapping[int, int] = field(default_factory=dict)
    minimum: Mapping[int, float] = field(default_factory=dict)
    data: Any = field(default=None, repr=False)  # per-device emission data (positions, splits, exchange)

    @property
    def collective(self) -> str | None:
        """The collective the step runs (None for local steps)."""
        if self.kind in ("slice", "embed", "unreduce", "rescale"):
            return None
        return "collective_permute" if self.kind == "exchange" else self.kind

    @property
    def rounds(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Point-to-point steps: per round, its (source, target) pairs (a permute has one round,
        self pairs included; an exchange one per round of transfers)."""
        if self.kind == "exchange":
            return tuple(tuple(sorted(rnd.pairs)) for rnd in self.data.rounds)
        if self.kind == "collective_permute":
            return (self.pairs,)
        return ()

    @property
    def round_count(self) -> int:
        """How many rounds ``rounds`` has (an exchange's counted without planning them)."""
        if self.kind == "exchange":
            return self.data.round_count
        return 1 if self.kind == "collective_permute" else 0

    @property
    def pair_devices(self) -> tuple[int, ...]:
        """The devices named in the pairs of ``rounds``, sorted (an exchange's without planning them)."""
        if self.kind == "exchange":
            return self.data.pair_devices
        return tuple(sorted({d for pair in self.pairs for d in pair})) if self.kind == "collective_permute" else ()

    @functools.cached_property
    def bytes(self) -> int:
        """Total bytes received over all devices (summed once: the partitioner prices a step
        several times, and its per-device mappings hold thousands of devices)."""
        return int(sum(self.received.values()))

    @functools.cached_property
    def minimum_bytes(self) -> float:
        return float(sum(self.minimum.values()))

    @property
    def ratio(self) -> float:
        m = self.minimum_bytes
        return 1.0 if m == 0 and self.bytes == 0 else (self.bytes / m if m else float("inf"))

    @property
    def max_bytes(self) -> int:
        return max(self.received.values(), default=0)

    def before_layout(self) -> Layout:
        return layout_of(self.before, self.shape)

    def after_layout(self) -> Layout:
        return layout_of(self.after, self.shape)

    def describe(self) -> str:
        where = ""
        if self.kind == "all_to_all":
            where = f" dim {self.dim} -> dim {self.tgt_dim}"
        elif self.dim is not None:
            where = f" dim {self.dim}"
        over = f" over {','.join(self.axes)}" if self.axes else ""
        g = f" groups of {len(self.groups[0])}" if self.groups else ""
        if self.kind == "exchange":
            g = f" in {self.round_count} rounds"
        cost = f": {self.bytes} B received (minimum {self.minimum_bytes:.0f}, ratio {self.ratio:.2f})" if self.collective else " (local)"
        return f"{self.kind}{where}{over}{g}{cost} -> {_spec_str(self.after)}"


def _spec_str(spec) -> str:
    if isinstance(spec, Sharding):
        return str(spec)
    return repr(spec)


class Route(NamedTuple):
    """A plan's steps between two layouts on one mesh, and the total bytes of each path tried
    (``alts``: "structured", "exchange", ...; None where a path failed)."""

    steps: list
    alts: dict


class Planned(NamedTuple):
    """A plan's steps, the layout they end in (the target as asked) and ``alts`` (``Route``)."""

    steps: list
    final: Any
    alts: dict


@dataclass(frozen=True, eq=False)
class ReshardPlan:
    """How to move a tensor from ``src`` to ``dst``: the steps, in order."""

    src: Any
    dst: Any
    shape: tuple[int, ...]
    dtype: np.dtype
    steps: tuple[Step, ...]
    final: Any  # the spec the data ends in (layout-equal to dst)
    alternatives: Mapping[str, int] = field(default_factory=dict, compare=False)  # strategy -> total bytes considered

    @property
    def bytes(self) -> int:
        """Total bytes received over all devices and steps."""
        return sum(s.bytes for s in self.steps)

    @property
    def minimum_bytes(self) -> float:
        return sum(s.minimum_bytes for s in self.steps)

    def bytes_received(self, device: int) -> int:
        return sum(s.received.get(device, 0) for s in self.steps)

    def bytes_sent(self, device: int) -> int:
        return sum(s.sent.get(device, 0) for s in self.steps)

    @property
    def max_bytes_per_device(self) -> int:
        devs = set().union(*[set(s.received) for s in self.steps]) if self.steps else set()
        return max((self.bytes_received(d) for d in devs), default=0)

    @property
    def collectives(self) -> tuple[str, ...]:
        return tuple(s.collective for s in self.steps if s.collective)

    def __str__(self) -> str:
        head = f"reshard {self.dtype.name}{list(self.shape)}: {_spec_str(self.src)} -> {_spec_str(self.dst)}"
        if not self.steps:
            return head + "\n  (nothing to do)"
        lines = [head] + [f"  {i}. {s.describe()}" for i, s in enumerate(self.steps)]
        lines.append(f"  total {self.bytes} B received over all devices (minimum {self.minimum_bytes:.0f})")
        return "\n".join(lines)


def axes_label(mesh: Mesh, atoms) -> tuple[str, ...]:
    """Atoms merged back into the axes / sub-axes they form, short names."""
    order = {n: i for i, n in enumerate(mesh.axis_names)}
    atoms = sorted(atoms, key=lambda a: (order[a.name], a.pre_size()))
    return tuple(r.short() for r in merge_adjacent(atoms, mesh.shape))


def split_even(n: int, g: int) -> list[int]:
    base, extra = divmod(n, g)
    return [base + (1 if i < extra else 0) for i in range(g)]
