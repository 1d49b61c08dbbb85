"""Buffers as the estimate knows them: a ``Block`` is a local shape and a dtype, no data."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...spmd import SpmdProgram
from ...sharding.layout import layout_of
from ...sharding.rows import distinct_columns


class EstimateError(ValueError):
    """A schedule the estimate cannot walk without data (named: the instruction and its op)."""


@dataclass(frozen=True)
class Block:
    """A buffer as the estimate knows it: its local shape and dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int = field(init=False, compare=False, repr=False)  # computed once: the walk asks often

    def __post_init__(self):
        object.__setattr__(self, "nbytes", math.prod(self.shape) * self.dtype.itemsize)

    def per_index(self, axis: int) -> int:
        """Bytes of one index along dim ``axis`` (a slice of the block one element thick)."""
        return self.nbytes // self.shape[axis] if self.shape[axis] else 0

    def along(self, axis: int, length: int) -> "Block":
        """This block with dim ``axis`` cut (or grown) to ``length``."""
        return Block(self.shape[:axis] + (int(length),) + self.shape[axis + 1:], self.dtype)


COUNTER = Block((), np.dtype(np.int32))  # a loop's step number, written before each iteration


def input_blocks(spmd: SpmdProgram) -> dict[int, list[Block]]:
    """Each device's input blocks: the local shapes of the program's inputs under
    ``spmd.in_shardings``."""
    codes, distinct = input_block_codes(spmd)
    return {d: list(distinct[k]) for d, k in zip(spmd.devices, codes.tolist())}


def input_block_codes(spmd: SpmdProgram) -> tuple[np.ndarray, list[tuple[Block, ...]]]:
    """Each device's inputs as a number (devices with equal input blocks share it, in device
    order) and the distinct input blocks by number: read from the layouts' boxes (every device's
    local shape as an array) where they have them, dim by dim (a dim every device holds the same
    length of is that length), so an 8,192-device mesh makes a few blocks."""
    avals = [v.aval for v in spmd.program.inputs] if spmd.program is not None else None
    if avals is None:
        raise EstimateError("estimate_spmd needs input_blocks for a schedule without its program")
    devices = spmd.schedules.device_ids()
    if not len(devices):
        return np.zeros(0, dtype=np.int64), []
    dims = [_dim_lengths(aval.shape, None if spec is None else layout_of(spec, aval.shape), devices)
            for aval, spec in zip(avals, spmd.in_shardings)]
    varying = [n for lengths in dims for n in lengths if not isinstance(n, int)]
    if varying:
        first, codes = distinct_columns(varying)
        firsts = first.tolist()
    else:
        firsts, codes = [0], np.zeros(len(devices), dtype=np.int64)
    distinct = [tuple(Block(tuple(n if isinstance(n, int) else int(n[f]) for n in lengths), np.dtype(aval.dtype))
                      for lengths, aval in zip(dims, avals)) for f in firsts]
    return codes, distinct


def _dim_lengths(shape, lay, devices: np.ndarray) -> list:
    """An input's local length per dim: an int where every device of ``devices`` holds the same,
    else an array of each device's (read from the layout's boxes where it has them)."""
    if lay is None:
        return [int(n) for n in shape]
    if lay.boxes is None:
        table = np.asarray([lay.local_shape(int(d)) for d in devices], dtype=np.int64).reshape(len(devices), -1)
        columns = list(table.T)
    else:
        boxes = lay.boxes
        columns = [boxes.hi[:, j] - boxes.lo[:, j] for j in range(len(shape))]
        if not np.array_equal(boxes.ids, devices):
            rows = boxes.rows(devices)
            columns = [c[rows] for c in columns]
    return [int(c[0]) if len(c) and c.min() == c.max() else c for c in columns]
