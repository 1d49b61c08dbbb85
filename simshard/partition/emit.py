"""A reshard plan as instructions: every step of a ``ReshardPlan`` appended, for every device, to
a schedule builder (one emitter per step kind; the exchange path emits its own rounds).
"""

from __future__ import annotations

import numpy as np

from ..sharding.reduce_ops import REDUCE_OPS
from .reshard.exchange_emit import emit_exchange
from .reshard.plan import ReshardPlan, Step
from ..spmd import AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Literal, Pad, ReduceScatter, Slice, field_of


def emit_plan(plan: ReshardPlan, builder, src: int, source: str = "reshard") -> int:
    """Append every step's instructions to ``builder``; returns the buffer holding the result."""
    buf = src
    for step in plan.steps:
        buf = emit_step(step, builder, buf, plan.dtype, source)
    return buf


def emit_step(step: Step, builder, src: int, dtype: np.dtype, source: str = "reshard") -> int:
    """Append one step's instructions for every device; returns the buffer holding the result."""
    return _EMIT[step.kind](step, builder, src, np.dtype(dtype), source)


def _emit_slice(step: Step, builder, src, dtype, source):
    dst = builder.buf()
    builder.emit_varying(step.data, lambda pos: Slice(0, source, src=src, dst=dst, index=pos))  # each device's positions
    return dst


# A collective is one instruction for the whole mesh: where its groups (or their splits) differ,
# the field is a ``Varying`` table each device indexes (``ScheduleBuilder.emit_varying``), so the
# groups of an axis do not split the devices into classes (a 2-D strategy's x and y groups would
# make every device its own).


def _emit_all_gather(step: Step, builder, src, dtype, source):
    dst = builder.buf()
    builder.emit_varying(step.data, lambda group: AllGather(0, source, src=src, dst=dst, group=group, axis=step.dim,
                                                            axes=step.axes))
    return dst


def _emit_reduce_scatter(step: Step, builder, src, dtype, source):
    dst = builder.buf()
    builder.emit_varying(step.data, lambda g: ReduceScatter(  # (group, splits, reduce order) per group
        0, source, src=src, dst=dst, group=field_of(g, lambda v: v[0]), axis=step.dim, splits=field_of(g, lambda v: v[1]),
        reduce_op=step.reduce_op, axes=step.axes, reduce_order=field_of(g, lambda v: v[2])))
    return dst


def _emit_all_reduce(step: Step, builder, src, dtype, source):
    dst = builder.buf()
    builder.emit_varying(step.data, lambda group: AllReduce(0, source, src=src, dst=dst, group=group, reduce_op=step.reduce_op,
                                                            axes=step.axes))
    return dst


def _emit_all_to_all(step: Step, builder, src, dtype, source):
    dst = builder.buf()
    builder.emit_varying(step.data, lambda g: AllToAll(  # (group, splits) per group
        0, source, src=src, dst=dst, group=field_of(g, lambda v: v[0]), split_axis=step.tgt_dim,
        splits=field_of(g, lambda v: v[1]), concat_axis=step.dim, axes=step.axes))
    return dst


def _emit_permute(step: Step, builder, src, dtype, source):
    dst = builder.buf()
    shapes = step.data
    builder.emit_by(lambda d: shapes[d], lambda d: CollectivePermute(0, source, src=src, dst=dst, pairs=step.pairs, shape=shapes[d],
                                             dtype=dtype.name, axes=step.axes))
    return dst


def _emit_embed(step: Step, builder, src, dtype, source):
    dst = builder.buf()
    widths = step.data
    ident = REDUCE_OPS[step.reduce_op].identity(dtype)
    builder.emit_by(lambda d: widths[d], lambda d: Compute(0, source, op="pad", inputs=(src,), outputs=(dst,),
                                                           params=(("padding_value", ident), ("widths", widths[d]))))
    return dst


def _emit_unreduce(step: Step, builder, src, dtype, source):
    if all(keep for keep, _ in step.data.values):  # (keep, local shape) per class of devices
        return src
    ident = REDUCE_OPS[step.reduce_op].identity(dtype)
    tmp, dst = builder.buf(), builder.buf()
    builder.emit(step.data.map(lambda ks: Slice(0, source, src=src, dst=tmp,
                                                index=tuple(range(n if ks[0] else 0) for n in ks[1]))))
    builder.emit(step.data.map(lambda ks: Pad(0, source, src=tmp, dst=dst, shape=ks[1], value=ident)))
    return dst


def _emit_rescale(step: Step, builder, src, dtype, source):
    """Pending sum <-> pending average: every contribution times g (or 1/g)."""
    lit, dst = builder.buf(), builder.buf()
    builder.emit_same(Literal(0, source, dst=lit, value=dtype.type(step.data)))
    builder.emit_same(Compute(0, source, op="mul", inputs=(src, lit), outputs=(dst,)))
    return dst


_EMIT = {
    "slice": _emit_slice,
    "all_gather": _emit_all_gather,
    "reduce_scatter": _emit_reduce_scatter,
    "all_reduce": _emit_all_reduce,
    "all_to_all": _emit_all_to_all,
    "collective_permute": _emit_permute,
    "embed": _emit_embed,
    "unreduce": _emit_unreduce,
    "exchange": emit_exchange,
    "rescale": _emit_rescale,
}
