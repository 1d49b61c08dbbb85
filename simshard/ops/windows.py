"""Windows: which operand positions each result position of a sliding-window op reads.

An op whose result dim is a strided window over an operand dim (a convolution's rows, a pad or
a slice along one dim) declares it with a ``Window``: result position ``o`` reads the operand
positions ``[o * stride + offset, o * stride + offset + size)``; positions outside the operand
read the op's padding (a convolution's zeros, a pad's value; a slice never leaves it).

That is all the partitioner needs to run the op on a contiguous block of result positions: the
operand rows the block reads (``reads``) and, for the rows the block reads past the operand's
edges, how much padding the local kernel adds in front and behind (``block_window``). An op
with windows also gives ``window_params(params, in_shapes, out_shapes, pads)``: its params on a
device whose windowed dims ``dim -> (lo, hi)`` carry that much padding around the local rows
(``simshard.partition.halo`` runs it; docs/planner.md, "Halo exchange").
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class BlockWindow:
    """What result block ``[o0, o1)`` of a window reads: operand rows ``[r0, r1)`` (empty when
    it reads padding only), with ``lo`` padding positions before them and ``hi`` after, so that
    the local kernel over ``lo + (r1 - r0) + hi`` positions yields exactly ``o1 - o0`` results."""

    r0: int
    r1: int
    lo: int
    hi: int


def block_window(w: Window, o0: int, o1: int, n: int) -> BlockWindow:
    """The operand rows and edge padding result positions ``[o0, o1)`` of ``w`` read, from an
    operand dim of ``n`` positions. An empty block reads nothing; its padding (``size - stride``
    when positive) makes the kernel's result count ``(lo + hi - size) // stride + 1`` zero."""
    if o1 <= o0:
        return BlockWindow(0, 0, max(0, w.size - w.stride), 0)
    g0 = o0 * w.stride + w.offset  # first position the block's windows read (padded coordinates)
    g1 = (o1 - 1) * w.stride + w.offset + w.size  # one past the last
    r0, r1 = min(max(g0, 0), n), min(max(g1, 0), n)
    if r1 <= r0:  # the block reads padding only
        return BlockWindow(0, 0, g1 - g0, 0)
    return BlockWindow(r0, r1, r0 - g0, g1 - r1)
