"""Draw how an array is laid out over the devices (rich).

Rank 1 and 2 layouts whose blocks are contiguous draw as a grid of the tensor: one cell per
block, naming the devices that hold it. Anything else (rank > 2, strided or ragged blocks) is a
table with each device's mesh coordinate, local shape and the global indices it holds.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from .layout import layout, pieces_per_dim
from .layout_model import Layout
from .placements import DTensorSpec

_COLORS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta",
           "bright_green", "bright_yellow", "bright_blue", "bright_red"]


def _ranges(ix: np.ndarray) -> str:
    """Compact spelling of an index list: ``0:4``, ``[0, 4, 8]`` or ``-`` for none."""
    if len(ix) == 0:
        return "-"
    if np.array_equal(ix, np.arange(ix[0], ix[0] + len(ix))):
        return f"{ix[0]}:{ix[0] + len(ix)}" if len(ix) > 1 else str(ix[0])
    return "[" + ", ".join(map(str, ix.tolist())) + "]"


def _title(spec, lay: Layout) -> str:
    return f"{spec}  shape={lay.shape}  block={lay.block_shape}"


def _grid(lay: Layout) -> Table | None:
    spans: dict[tuple, list[int]] = {}
    for d in lay.devices:
        ix = lay.indices(d)
        ix2 = ix if len(ix) == 2 else (np.arange(1),) + tuple(ix)
        if any(len(i) == 0 for i in ix2):
            continue
        spans.setdefault(tuple((int(i[0]), int(i[-1]) + 1) for i in ix2), []).append(d)
    rows = sorted({s[0] for s in spans})
    cols = sorted({s[1] for s in spans})
    for axis in (rows, cols):
        if any(a[1] > b[0] for a, b in zip(axis, axis[1:])):
            return None  # overlapping ranges: not a grid
    table = Table(show_header=True, show_lines=True, header_style="dim")
    table.add_column("", style="dim", justify="right")
    for c in cols:
        table.add_column(f"{c[0]}:{c[1]}", justify="center", min_width=6)
    for r_i, r in enumerate(rows):
        cells = []
        for c_i, c in enumerate(cols):
            devs = spans.get((r, c))
            if devs is None:
                cells.append(Text("?", style="red"))
                continue
            color = _COLORS[(r_i * len(cols) + c_i) % len(_COLORS)]
            label = " ".join(map(str, devs))
            cells.append(Text(label, style=f"bold {color}"))
        table.add_row(f"{r[0]}:{r[1]}" if len(lay.shape) == 2 else "", *cells)
    return table


def _device_table(lay: Layout) -> Table:
    table = Table(show_header=True, header_style="bold")
    table.add_column("device", justify="right")
    table.add_column("coord (" + ",".join(lay.mesh.axis_names) + ")")
    table.add_column("local shape")
    for k in range(len(lay.shape)):
        table.add_column(f"dim {k} indices")
    for d in lay.devices:
        table.add_row(str(d), str(lay.mesh.coords(d)), str(lay.local_shape(d)), *(_ranges(i) for i in lay.indices(d)))
    return table


MAX_DRAWN_DEVICES = 256  # a larger mesh is summarised: its drawing would be thousands of lines


def _blocks(spec, shape: Sequence[int]) -> list[tuple[int, int]] | None:
    """Per dim (blocks, block size), read off the spec without laying it out (None: unknown)."""
    to_sharding = getattr(spec, "to_sharding", None)
    if callable(to_sharding):
        spec = to_sharding(len(shape))
    if isinstance(spec, DTensorSpec):
        ways = pieces_per_dim(spec, len(shape))
    elif hasattr(spec, "shard_count"):
        spec.check_rank(shape)
        ways = [spec.shard_count(k) for k in range(len(shape))]
    else:
        return None
    return [(n, -(-d // n)) for d, n in zip(shape, ways)]


def _summary(spec, shape: Sequence[int], mesh) -> Group:
    lines = [Text(f"{spec}  shape={tuple(shape)}", style="bold"),
             Text(f"{mesh.size:,} devices: more than the {MAX_DRAWN_DEVICES} drawn; per dimension:")]
    for k, (n, b) in enumerate(_blocks(spec, shape) or []):
        lines.append(Text(f"  dim {k}: {n:,} blocks of {b:,}" if n > 1 else f"  dim {k}: whole ({shape[k]:,})"))
    lines.append(Text("a mesh of at most 256 devices draws every device", style="dim"))
    return Group(*lines)


def render(spec, shape: Sequence[int]):
    """A rich renderable drawing the layout of ``spec`` over its mesh for ``shape`` (a summary of
    blocks per dimension past ``MAX_DRAWN_DEVICES`` devices, without laying the devices out)."""
    mesh = getattr(spec, "mesh", None)
    if mesh is not None and mesh.size > MAX_DRAWN_DEVICES:
        return _summary(spec, shape, mesh)
    lay = spec if isinstance(spec, Layout) else layout(spec, shape)
    parts = [Text(_title(spec, lay), style="bold")]
    grid = _grid(lay) if len(lay.shape) in (1, 2) and lay.is_contiguous() else None
    parts.append(grid if grid is not None else _device_table(lay))
    empty = [d for d in lay.devices if 0 in lay.local_shape(d) and lay.shape]
    if empty:
        parts.append(Text(f"devices holding nothing (padding only): {', '.join(map(str, empty))}", style="dim"))
    if lay.unreduced:
        axes = ", ".join(a.short() for a in lay.unreduced)
        parts.append(Text(f"pending {lay.reduce_op} over {axes}: each cell is the {lay.reduce_op} of its devices' contributions", style="dim"))
    return Group(*parts)


def show(spec, shape: Sequence[int], console: Console | None = None) -> str:
    """Print the layout drawing and return it as plain text."""
    from ..units import plain_text

    console = console or Console()
    drawing = render(spec, shape)
    console.print(drawing)
    return plain_text(drawing, width=console.width)
