"""Manual regions (``shard_map``) inlined into the schedules.

The region's operands are resharded to its ``in_specs``; then the body, already written per
device on local shapes, runs op by op: ordinary ops as ``Compute`` with their params unchanged,
collectives as the schedule's collectives over the device groups of the named mesh axes
(``manual.groups``: ordered by coordinate, row-major in the order the axes are named):

* ``psum`` / ``pmax`` / ``pmin`` -> ``AllReduce`` (sum / max / min);
* ``all_gather`` -> ``AllGather`` (untiled: a size-1 dim is inserted first);
* ``psum_scatter`` -> ``ReduceScatter`` with even splits (untiled: the scattered dim is dropped after);
* ``ppermute`` -> ``CollectivePermute`` with the permutation applied in every group;
* ``all_to_all`` -> ``AllToAll`` (untiled: split and concatenate on the split dim, then move that
  dim to ``concat_axis``);
* ``axis_index`` -> ``Literal``, each device its own index.

The region's results are the body's outputs, laid out as the region's ``out_specs``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShardingError
from ..manual import COLLECTIVES, axes_of, groups
from ..ops import get_op
from ..ir.program import Eqn, Literal as PLiteral
from .builder import ScheduleBuilder
from .protocol import Partitioner
from .reshard import plain
from ..spmd import AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Literal, ReduceScatter

_REDUCE = {"psum": "sum", "pmax": "max", "pmin": "min"}


def inline_region(partitioner: Partitioner, e: Eqn) -> dict:
    """Append region ``e``'s instructions through ``partitioner`` (its builder and reshards);
    returns, per region result, its sharding (the ``out_specs``) and the buffer holding it."""
    kw = e.kw
    body, mesh = kw["body"], kw["mesh"]
    in_specs, out_specs = kw["in_specs"], kw["out_specs"]
    builder = partitioner.builder
    env: dict = {}
    for v, bv, spec in zip(e.inputs, body.inputs, in_specs):
        env[bv] = partitioner.get(v, plain(spec), f"shard_map {partitioner.name(e.outputs[0])}")

    def arg(i):
        if isinstance(i, PLiteral):
            return partitioner.literal(i)
        return env[i]

    for be in body.eqns:
        src = f"shard_map {partitioner.name(e.outputs[0])}: {be.op}"
        bkw = be.kw
        if be.op in COLLECTIVES:
            x = be.inputs[0]
            out = _collective(builder, be.op, arg(x), x.aval, bkw, mesh, src)
            env[be.outputs[0]] = out
        elif be.op == "axis_index":
            names = axes_of(bkw["axis_name"])
            dst = builder.buf()

            def idx(d):
                i = 0
                for n in names:
                    i = i * mesh.shape[n] + mesh.axis_index(d, n)
                return np.int32(i)

            builder.emit_by(idx, lambda d: Literal(0, src, dst=dst, value=idx(d)))
            env[be.outputs[0]] = dst
        elif be.op == "shard_map":
            raise ShardingError("nested-manual-region", "shard_map inside shard_map is not supported")
        else:
            get_op(be.op)  # an unknown op is named here
            outs = builder.bufs(len(be.outputs))
            ins = tuple(arg(i) for i in be.inputs)
            if be.op == "constant":
                builder.emit_same(Literal(0, src, dst=outs[0], value=np.array(bkw["value"], copy=True)))
            else:
                builder.emit_same(Compute(0, src, op=be.op, inputs=ins, outputs=outs, params=tuple(be.params)))
            for v, o in zip(be.outputs, outs):
                env[v] = o
    return {o: (plain(spec), arg(bo)) for o, bo, spec in zip(e.outputs, body.outputs, out_specs)}


def _collective(builder: ScheduleBuilder, op: str, x: int, aval, kw: dict, mesh, src: str) -> int:
    names = axes_of(kw["axis_name"])
    gs = groups(mesh, names)
    gof = {d: g for g in gs for d in g}
    n = len(gs[0])
    rank = len(aval.shape)
    if op in _REDUCE:
        dst = builder.buf()
        builder.emit_by(lambda d: gof[d], lambda d: AllReduce(0, src, src=x, dst=dst, group=gof[d], reduce_op=_REDUCE[op], axes=names))
        return dst
    if op == "all_gather":
        axis, tiled = kw.get("axis", 0), kw.get("tiled", False)
        if not tiled:
            x = _reshape(builder, x, aval.shape[:axis] + (1,) + aval.shape[axis:], src)
        dst = builder.buf()
        builder.emit_by(lambda d: gof[d], lambda d: AllGather(0, src, src=x, dst=dst, group=gof[d], axis=axis, axes=names))
        return dst
    if op == "psum_scatter":
        sd, tiled = kw.get("scatter_dimension", 0), kw.get("tiled", False)
        size = aval.shape[sd]
        splits = tuple([size // n] * n)
        dst = builder.buf()
        builder.emit_by(lambda d: gof[d], lambda d: ReduceScatter(0, src, src=x, dst=dst, group=gof[d], axis=sd, splits=splits,
                                                                 reduce_op="sum", axes=names))
        if not tiled:
            shape = aval.shape[:sd] + aval.shape[sd + 1:]
            dst = _reshape(builder, dst, shape, src)
        return dst
    if op == "ppermute":
        pairs = tuple(sorted(((g[s], g[t]) for g in gs for s, t in kw["perm"]), key=lambda p: p[1]))
        dst = builder.buf()
        builder.emit_same(CollectivePermute(0, src, src=x, dst=dst, pairs=pairs, shape=tuple(aval.shape),
                                            dtype=np.dtype(aval.dtype).name, axes=names))
        return dst
    if op == "all_to_all":
        sa, ca, tiled = kw["split_axis"], kw["concat_axis"], kw.get("tiled", False)
        size = aval.shape[sa]
        splits = tuple([size // n] * n)
        dst = builder.buf()
        builder.emit_by(lambda d: gof[d], lambda d: AllToAll(0, src, src=x, dst=dst, group=gof[d], split_axis=sa, splits=splits,
                                                            concat_axis=(ca if tiled else sa), axes=names))
        if not tiled and sa != ca:
            perm = list(range(rank))
            moved = perm.pop(sa)
            perm.insert(ca, moved)
            out = builder.buf()
            builder.emit_same(Compute(0, src, op="transpose", inputs=(dst,), outputs=(out,), params=(("perm", tuple(perm)),)))
            dst = out
        return dst
    raise AssertionError(op)  # pragma: no cover


def _reshape(builder: ScheduleBuilder, x: int, shape, src: str) -> int:
    out = builder.buf()
    builder.emit_same(Compute(0, src, op="reshape", inputs=(x,), outputs=(out,), params=(("new_shape", tuple(shape)),)))
    return out
