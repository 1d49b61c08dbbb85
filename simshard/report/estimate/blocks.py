"""Buffers as the estimate knows them: a ``Block`` is a local shape and a dtype, no data."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...spmd import SpmdProgram
from ...sharding.layout import layout_of
from ...sharding.rows import distinct_rows


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
    local shape as an array) where they have them, so an 8,192-device mesh makes a few blocks."""
    avals = [v.aval for v in spmd.program.inputs] if spmd.program is not None else None
    if avals is None:
        raise EstimateError("estimate_spmd needs input_blocks for a schedule without its program")
    devices = np.asarray(spmd.devices, dtype=np.int64)
    columns, dtypes, ranks = [], [], []
    for aval, spec in zip(avals, spmd.in_shardings):
        shape = tuple(int(n) for n in aval.shape)
        dtypes.append(np.dtype(aval.dtype))
        ranks.append(len(shape))
        lay = None if spec is None else layout_of(spec, aval.shape)
        if lay is None:
            columns.append(np.tile(np.asarray(shape, dtype=np.int64), (len(devices), 1)))
        elif lay.boxes is not None:
            columns.append(lay.boxes.sizes[lay.boxes.rows(devices)])
        else:
            columns.append(np.asarray([lay.local_shape(int(d)) for d in devices], dtype=np.int64).reshape(len(devices), -1))
    table = np.concatenate(columns, axis=1) if columns else np.zeros((len(devices), 0), dtype=np.int64)
    rows, _, codes = distinct_rows(table) if len(devices) else (table, None, np.zeros(0, dtype=np.int64))
    distinct = []
    for row in rows.tolist():
        blocks, at = [], 0
        for dtype, rank in zip(dtypes, ranks):
            blocks.append(Block(tuple(row[at:at + rank]), dtype))
            at += rank
        distinct.append(tuple(blocks))
    return codes, distinct
