"""Buffers as the estimate knows them: a ``Block`` is a local shape and a dtype, no data."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...spmd import SpmdProgram
from ...sharding.layout import layout


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
    avals = [v.aval for v in spmd.program.inputs] if spmd.program is not None else None
    if avals is None:
        raise EstimateError("estimate_spmd needs input_blocks for a schedule without its program")
    out: dict[int, list[Block]] = {d: [] for d in spmd.devices}
    for aval, spec in zip(avals, spmd.in_shardings):
        dtype = np.dtype(aval.dtype)
        lay = None if spec is None else layout(spec, aval.shape)
        for d in spmd.devices:
            out[d].append(Block(tuple(aval.shape) if lay is None else tuple(lay.local_shape(d)), dtype))
    return out
