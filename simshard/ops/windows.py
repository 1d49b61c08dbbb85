"""Windows: which operand positions each result position of a sliding-window op reads.

An op whose result dim is a strided window over an operand dim (a convolution's rows, a pad or
a slice along one dim) declares it with a ``Window``: result position ``o`` reads the operand
positions ``[o * stride + offset, o * stride + offset + size)``; positions outside the operand
read the op's padding (a convolution's zeros, a pad's value; a slice never leaves it).

That is all the partitioner needs to run the op on a contiguous block of result positions
(``block_window``): the operand rows the block reads, and how the local kernel slides over them
(``LocalWindow``: the padding it adds where the block reads past the operand's edges, and its
stride). An op with windows also gives ``window_params(params, in_shapes, out_shapes, local)``:
its params on a device whose windowed dims ``dim -> LocalWindow`` hold only the rows the block
reads (``simshard.partition.halo`` runs it; docs/planner.md, "Halo exchange").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class Window:
    """Result dim ``result_dim`` (of result 0) slides a window of ``size`` positions, ``stride``
    apart, over dim ``dim`` of operand ``operand``; result position 0 starts at ``offset``
    (negative: the op pads in front)."""

    operand: int
    dim: int
    result_dim: int
    size: int
    stride: int
    offset: int

    def __post_init__(self):
        if self.size < 1 or self.stride < 1:
            raise ValueError(f"window {self}: size and stride must be >= 1")


class LocalWindow(NamedTuple):
    """A windowed dim as one device's kernel sees it: ``lo`` / ``hi`` padding positions around its
    rows, windows ``stride`` apart."""

    lo: int
    hi: int
    stride: int


@dataclass(frozen=True, eq=False)
class BlockWindow:
    """What result block ``[o0, o1)`` of a window reads: the operand ``rows`` (ascending; empty when
    it reads padding only) and how the local kernel runs over them (``local``), so that
    ``lo + len(rows) + hi`` positions yield exactly ``o1 - o0`` results."""

    rows: np.ndarray
    local: LocalWindow


def block_window(w: Window, o0: int, o1: int, n: int) -> BlockWindow:
    """The operand rows (of ``n``) result positions ``[o0, o1)`` of ``w`` read, in order, and the
    local window over them. Windows wider than their stride overlap: the rows are one run, read
    with the same stride. Windows narrower than their stride leave gaps nobody reads: only the
    windows' own rows are kept, back to back, so the local stride is the window size. Padding
    positions (before row 0, past row n - 1) count at the edges only. An empty block reads nothing;
    its padding (``size - stride``) makes the kernel's count ``(lo + hi - size) // stride + 1`` zero."""
    step = min(w.stride, w.size)
    if o1 <= o0:
        return BlockWindow(np.arange(0), LocalWindow(w.size - step, 0, step))
    if w.stride >= w.size:  # disjoint windows: their positions, gaps left out
        pos = (np.arange(o0, o1)[:, None] * w.stride + w.offset + np.arange(w.size)[None, :]).reshape(-1)
    else:
        pos = np.arange(o0 * w.stride + w.offset, (o1 - 1) * w.stride + w.offset + w.size)
    inside = (pos >= 0) & (pos < n)
    return BlockWindow(pos[inside], LocalWindow(int((pos < 0).sum()), int((pos >= n).sum()), step))
