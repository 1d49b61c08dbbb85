"""The exchange's instructions: every device assembles its target block from the cells it holds
and those it receives, round by round.

The block is assembled with ``dynamic_update_slice`` into a zero block of the target's local
shape. Every device emits the same instructions (devices with fewer cells slice empty pieces),
so schedules stay SPMD; a round's cuts and offsets are ``Varying`` fields, so devices that differ
only there stay one class.
"""

from __future__ import annotations

import numpy as np

from ...spmd import CollectivePermute, Compute, Literal, Slice, field_of
from .exchange import ExchangeData, Round
from .plan import Step


def emit_exchange(step: Step, builder, src: int, dtype: np.dtype, source: str) -> int:
    """Append the exchange ``step`` to ``builder``, moving buffer ``src``; the buffer the new
    block is assembled in."""
    data: ExchangeData = step.data
    view, rank = data.view, data.rank
    if view is not None:  # every source block reshaped into the view (element for element: ``exchange_view``)
        src = _reshaped(builder, src, view.source_shapes, source)
    empty = (range(0),) * rank
    acc = builder.buf()
    zero = dtype.type(0)
    # devices share an instruction wherever theirs would be equal (its key): the estimate then
    # walks them as one class
    builder.emit_by(lambda d: tuple(data.shapes[d]), lambda d: Compute(
        0, source, op="full", inputs=(), outputs=(acc,), params=(("shape", tuple(data.shapes[d])), ("fill_value", zero),
                                                                ("dtype", dtype))))

    def update(acc: int, piece: int, devices: np.ndarray, starts: np.ndarray) -> int:
        """Write ``piece`` into ``acc`` at each listed device's ``starts`` (a row per device;
        zeros for devices not listed)."""
        sbufs = builder.bufs(rank)
        for k in range(rank):
            values, codes = np.unique(starts[:, k], return_inverse=True)
            builder.emit_at(devices, codes.reshape(-1), [np.int32(v) for v in values.tolist()], np.int32(0),
                            lambda v, k=k: Literal(0, source, dst=sbufs[k], value=v), varying=True)
        out = builder.buf()
        builder.emit_same(Compute(0, source, op="dynamic_update_slice", inputs=(acc, piece) + sbufs, outputs=(out,)))
        return out

    nlocal = max((len(v) for v in data.local.values()), default=0)
    for slot in range(nlocal):
        piece = builder.buf()
        cells = {d: c[slot] for d, c in data.local.items() if slot < len(c)}  # (positions, starts)
        builder.emit_keyed({d: pos for d, (pos, _) in cells.items()}, empty, lambda pos: Slice(0, source, src=src, dst=piece, index=pos),
                           varying=True)
        starts = np.array([starts for _, starts in cells.values()], dtype=np.int64).reshape(len(cells), rank)
        acc = update(acc, piece, np.fromiter(cells, np.int64, len(cells)), starts)
    mesh = step.after_layout().mesh
    for rnd in data.rounds:
        pairs = rnd.pairs
        out, inb = builder.buf(), builder.buf()
        # a relay cuts its piece from the block it assembles, an original holder from its own
        builder.emit_at(rnd.sources, rnd.piece, rnd.pieces, (False, empty),
                        lambda key, held=acc: Slice(0, source, src=field_of(key, lambda k: held if k[0] else src), dst=out,
                                                    index=field_of(key, lambda k: k[1])), varying=True)
        builder.emit_same(CollectivePermute(0, source, src=out, dst=inb, pairs=pairs, shape=(0,) * rank, dtype=dtype.name,
                                            axes=_round_axes(mesh, rnd)))
        acc = update(acc, inb, rnd.targets, rnd.starts)
    return acc if view is None else _reshaped(builder, acc, view.target_shapes, source)


def _reshaped(builder, buf: int, shapes: dict, source: str) -> int:
    """A new buffer holding each device's ``buf`` reshaped to its ``shapes[device]``."""
    out = builder.buf()
    builder.emit_by(lambda d: tuple(shapes[d]), lambda d: Compute(
        0, source, op="reshape", inputs=(buf,), outputs=(out,), params=(("new_shape", tuple(shapes[d])),)))
    return out


def _round_axes(mesh, r: Round) -> tuple[str, ...]:
    """The mesh axes a round's transfers cross: those along which some pair's coordinates differ
    (what the communication report and the time estimate charge the round to)."""
    if not len(r.sources):
        return ()
    s, t = mesh.positions(r.sources), mesh.positions(r.targets)
    return tuple(n for n in mesh.axis_names if bool(np.any(mesh.axis_indices(n)[s] != mesh.axis_indices(n)[t])))
