"""A ``scan`` partitioned once: its body becomes one loop of the schedule, run ``length`` times.

The scan's operands are resharded to the layouts the body runs on: each carry as the scan's
final carry is laid out (propagation ties the two), the stacked inputs with their scanned dim
whole, the constants as they are. The body program is propagated on its own from those layouts
(its carries must come back as they went in) and partitioned by a partitioner of its own that
shares the schedule's buffer numbers. Inside the loop each step reads its slice of the stacked
inputs at the loop's counter (``dynamic_slice``), writes its slice of the stacked outputs
(``dynamic_update_slice``) and overwrites the carries; the body's temporaries are freed inside
it. After the loop the results are copied out once, so that what a checkpoint records is the
final value. The report multiplies by itself: every iteration's collectives run under their own
ids (``Loop.iteration``) and are recorded each time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..ir.program import Eqn, Program
from ..propagate.driver import propagate
from ..sharding.dims import DimSharding, Sharding
from ..spmd import Compute, Literal, Loop, Switch, While
from .builder import ScheduleBuilder
from .copies import Copy
from .protocol import Partitioner
from .reshard import plain
from .reshard.plan import by_shape_class, layout_of, local_shapes


def _whole_first(s: Sharding) -> Sharding:
    """``s`` with its first dim unsharded (a scanned dim: every device reads every step)."""
    return Sharding(s.mesh, (DimSharding(()),) + tuple(s.dims[1:]), s.replicated)


def _drop_first(s: Sharding) -> Sharding:
    """``s`` without its first dim (a scanned dim, as one step sees it)."""
    return Sharding(s.mesh, tuple(s.dims[1:]), s.replicated)


def _copy(builder: ScheduleBuilder, src: str, pairs) -> None:
    """``dst = src`` for each pair: an identity kernel, the array itself (no data moves)."""
    for i, o in pairs:
        builder.emit_same(Compute(0, src, op="stop_gradient", inputs=(i,), outputs=(o,)))


def _carry_back(builder: ScheduleBuilder, src: str, new, carry_bufs) -> None:
    """The carries' new values into their buffers, in two steps: a carry may become another."""
    staged = [builder.buf() for _ in new]
    _copy(builder, src, zip(new, staged))
    _copy(builder, src, zip(staged, carry_bufs))


def _results(partitioner: Partitioner, e: Eqn, src: str, outputs, bufs, specs, axes, body: tuple = ()) -> None:
    """The loop's results copied out once after it (what a checkpoint records is then the final
    value), and the op's checkpoint: reassociated over ``axes`` where it computes floats, with its
    body's checkpoints ``body``."""
    for o, buf, spec in zip(outputs, bufs, specs):
        out = partitioner.builder.buf()
        _copy(partitioner.builder, src, [(buf, out)])
        partitioner.copies[o] = [Copy(spec, out)]
    partitioner.checkpoint(e, tuple(axes) if any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs) else (), body)


def split_axes(sub: Partitioner) -> tuple[str, ...]:
    """The mesh axes a partitioned body split its float sums over (its ops' checkpoints, nested
    bodies included): where the body adds in another order than run whole. A kernel blocking
    its sums by the block shapes splits nothing (``simshard.report.opcheck``)."""
    return tuple(dict.fromkeys(a for c in sub.checkpoints for a in c.reassociated))


class _Scan(NamedTuple):
    """A scan op read for partitioning: its operands by role, the layouts its body runs on, the
    body propagated from them, and the stacked outputs someone reads (``ys``: (output, body output))."""

    e: Eqn
    src: str
    carries: list
    xs: list
    consts: list
    carry_specs: list
    xs_specs: list
    const_specs: list
    body: Program
    ys: list
    first_residual: int


class _ScanBuffers(NamedTuple):
    """The loop's buffers: stacked inputs, constants, carries, and the step counter and zero index."""

    xs: list
    consts: list
    carries: list
    counter: int
    zero: int


def emit_scan(partitioner: Partitioner, e: Eqn) -> None:
    """Partition scan ``e``: operands, one loop, results."""
    scan = _scan_layouts(partitioner, e)
    builder = partitioner.builder
    src = scan.src
    init = [partitioner.get(v, s, src) for v, s in zip(scan.carries, scan.carry_specs)]
    bufs = _ScanBuffers([partitioner.get(v, s, src) for v, s in zip(scan.xs, scan.xs_specs)],
                        [partitioner.get(v, s, src) for v, s in zip(scan.consts, scan.const_specs)],
                        list(builder.bufs(len(scan.carries))), 0, 0)
    _copy(builder, src, zip(init, bufs.carries))
    bufs = bufs._replace(counter=builder.buf(), zero=builder.buf())
    builder.emit_same(Literal(0, src, dst=bufs.zero, value=np.int32(0)))
    sub = _scan_body(partitioner, scan, bufs)
    nc = len(scan.carries)
    new = [sub.get(v, s, f"{src}: carry {k}") for k, (v, s) in enumerate(zip(scan.body.outputs[:nc], scan.carry_specs))]
    ys_bufs, ys_specs = _scan_outputs(partitioner, scan, sub, bufs)
    _carry_back(sub.builder, src, new, bufs.carries)

    owned = set(bufs.carries) | set(ys_bufs) | set(bufs.xs) | set(bufs.consts) | {bufs.counter, bufs.zero}
    reads = tuple(dict.fromkeys(bufs.consts + bufs.xs + bufs.carries + ys_bufs + [bufs.zero]))
    loops: dict[int, Loop] = {}  # devices running one body share one Loop
    for members, instrs in sub.builder.freed(owned):
        loop = Loop(0, src, length=e.kw["length"], reverse=bool(e.kw["reverse"]), counter=bufs.counter, body=instrs,
                    reads_=reads, writes_=tuple(bufs.carries + ys_bufs))
        loops.update(dict.fromkeys(members, loop))
    builder.emit(loops)

    _results(partitioner, e, src, list(e.outputs[:nc]) + [o for o, _ in scan.ys], bufs.carries + ys_bufs,
             scan.carry_specs + ys_specs, split_axes(sub), tuple(sub.checkpoints))


def _scan_layouts(partitioner: Partitioner, e: Eqn) -> _Scan:
    """The layouts ``e``'s body runs on, and the body propagated from them: carries as the scan's
    final carry is laid out (propagation ties the two); stacked inputs and constants as they are
    held (the scanned dim whole), so the loop moves nothing before it starts that its body would
    not move anyway. Its ys stay where the body makes them."""
    kw = e.kw
    body, nc, nx = kw["body"], kw["num_carry"], kw["num_xs"]
    carries, xs, consts = e.inputs[:nc], e.inputs[nc:nc + nx], e.inputs[nc + nx:]
    carry_specs = [partitioner.target(o) for o in e.outputs[:nc]]
    xs_specs = [_whole_first(plain(partitioner.primary(x))) for x in xs]
    const_specs = [plain(partitioner.primary(c)) for c in consts]
    # residuals nobody reads: skipped
    used = [o in partitioner.users or o in partitioner.read_outputs for o in e.outputs[nc:]]
    body_in = carry_specs + [_drop_first(s) for s in xs_specs] + const_specs
    n_user = len(body.outputs) - kw.get("num_res", 0)
    body_out = carry_specs + [_drop_first(_whole_first(partitioner.target(o))) for o in e.outputs[nc:n_user]] + \
        [None] * (len(body.outputs) - n_user)
    body = propagate(replace(body, in_shardings=tuple(body_in), out_shardings=tuple(body_out)))
    ys = [(o, v) for o, v, u in zip(e.outputs[nc:], body.outputs[nc:], used) if u]
    return _Scan(e, partitioner.source(e), list(carries), list(xs), list(consts), carry_specs, xs_specs, const_specs,
                 body, ys, len(e.outputs) - kw.get("num_res", 0))


def _scan_body(partitioner: Partitioner, scan: _Scan, bufs: _ScanBuffers) -> Partitioner:
    """The body, partitioned once by a partitioner of its own on the schedule's buffer numbers:
    each step reads its slice of the stacked inputs at the loop's counter."""
    body, src, nc, nx = scan.body, scan.src, len(scan.carries), len(scan.xs)
    sub = partitioner.sub(body)
    sub.read_outputs = set(body.outputs[:nc]) | {v for _, v in scan.ys}  # a scan in the body writes no unread residual
    for v, buf, spec in zip(body.inputs[:nc], bufs.carries, scan.carry_specs):
        sub.copies[v] = [Copy(spec, buf)]
    for v, buf, spec, x in zip(body.inputs[nc:nc + nx], bufs.xs, scan.xs_specs, scan.xs):
        sliced, out = sub.builder.buf(), sub.builder.buf()
        rest = _drop_first(spec)
        devices = sub.builder.devices
        sub.builder.emit(_by_local_shape(devices, spec, x.aval.shape, lambda local, buf=buf, sliced=sliced, x=x: Compute(
            0, src, op="dynamic_slice", inputs=(buf, bufs.counter) + (bufs.zero,) * (x.aval.ndim - 1), outputs=(sliced,),
            params=(("slice_sizes", (1,) + local[1:]),))))
        sub.builder.emit(_by_local_shape(devices, rest, v.aval.shape, lambda local, sliced=sliced, out=out: Compute(
            0, src, op="reshape", inputs=(sliced,), outputs=(out,), params=(("new_shape", local),))))
        sub.copies[v] = [Copy(rest, out)]
    for v, buf, spec in zip(body.inputs[nc + nx:], bufs.consts, scan.const_specs):
        sub.copies[v] = [Copy(spec, buf)]
    for k, be in enumerate(body.eqns):
        sub.eqn_index = k
        sub.eqn(be)
    return sub


def _residual_spec(partitioner: Partitioner, sub: Partitioner, o, v) -> Sharding:
    """A residual's stacked layout: the body's last copy of it with the layer dim in front, where
    that copy is a tensor-dim sharding; a copy in an exact layout no sharding states (a reshape
    that merged a minor sharded dim keeps its stripes, ``keeps_stripes``) cannot be stacked as it
    lies, so the residual is written as its users want it (the body reshards it there)."""
    held = sub.copies[v][-1].spec
    if not isinstance(held, Sharding):
        return _whole_first(partitioner.target(o))
    return Sharding(partitioner.target(o).mesh, (DimSharding(()),) + tuple(held.dims))


def _scan_outputs(partitioner: Partitioner, scan: _Scan, sub: Partitioner, bufs: _ScanBuffers) -> tuple[list[int], list]:
    """The stacked outputs' buffers (zeros made before the loop) and layouts, each step writing
    its row at the counter. A y is written as its users want it (a gradient reduce-scattered
    into its parameter's layout); a residual, which only the derivative's scan reads, as the
    body last held it (a weight broadcast after its gather stays gathered, as an unrolled loop's
    would), unless the scan's result is annotated (``ss.autoshard`` lays every stacked output
    out itself): then as annotated."""
    builder, src = partitioner.builder, scan.src
    annotated = {o for o, s in zip(scan.e.outputs, scan.e.shardings) if s is not None}
    ys_specs = [_residual_spec(partitioner, sub, o, v) if scan.e.outputs.index(o) >= scan.first_residual
                and o not in annotated else _whole_first(partitioner.target(o)) for o, v in scan.ys]
    ys_bufs = [sub.builder.buf() for _ in scan.ys]
    for yb, spec, (o, _) in zip(ys_bufs, ys_specs, scan.ys):
        # zeros made on the device (the full op), not carried in the schedule as an array
        builder.emit(_by_local_shape(builder.devices, spec, o.aval.shape, lambda local, yb=yb, o=o: Compute(
            0, src, op="full", inputs=(), outputs=(yb,),
            params=(("shape", local), ("fill_value", 0), ("dtype", np.dtype(o.aval.dtype))))))
    for (o, v), yb, spec in zip(scan.ys, ys_bufs, ys_specs):
        y = sub.get(v, _drop_first(spec), f"{src}: y")
        row = sub.builder.buf()
        sub.builder.emit(_by_local_shape(builder.devices, spec, o.aval.shape, lambda local, y=y, row=row: Compute(
            0, src, op="reshape", inputs=(y,), outputs=(row,), params=(("new_shape", (1,) + local[1:]),))))
        update = Compute(0, src, op="dynamic_update_slice",
                         inputs=(yb, row, bufs.counter) + (bufs.zero,) * (o.aval.ndim - 1), outputs=(yb,))
        sub.builder.emit_same(update)
    return ys_bufs, ys_specs


def _per_device(classes: list[tuple[list[int], tuple]]) -> dict:
    """``ScheduleBuilder.freed``'s bodies by device."""
    return {d: body for members, body in classes for d in members}


def _by_local_shape(devices, spec, shape, build) -> dict:
    """For ``ScheduleBuilder.emit``: ``build(local shape)`` per device, one shared instruction
    per distinct local shape of ``shape`` laid out as ``spec``."""
    layout = layout_of(spec, shape)
    shapes = local_shapes(layout)
    return by_shape_class(devices, [layout], lambda d: build(shapes[d]))


def _partition_program(partitioner: Partitioner, program: Program, bindings, out_specs, src: str):
    """Partition ``program`` (propagated) with its inputs bound to ``bindings`` (spec, buffer) on
    the schedule's buffer numbers; its builder, and a buffer per output laid out as asked."""
    sub = partitioner.sub(program)
    for v, (spec, buf) in zip(program.inputs, bindings):
        sub.copies[v] = [Copy(spec, buf)]
    for k, e in enumerate(program.eqns):
        sub.eqn_index = k
        sub.eqn(e)
    outs = [sub.get(v, s, f"{src}: result {k}") for k, (v, s) in enumerate(zip(program.outputs, out_specs))]
    return sub.builder, outs, split_axes(sub)


def emit_while(partitioner: Partitioner, e: Eqn) -> None:
    """Partition while-loop ``e``: its condition and body partitioned once into one ``While``."""
    kw = e.kw
    cond, body, nc, ncc = kw["cond"], kw["body"], kw["num_carry"], kw["num_cond_consts"]
    src = partitioner.source(e)
    carries, cconsts, bconsts = e.inputs[:nc], e.inputs[nc:nc + ncc], e.inputs[nc + ncc:]
    carry_specs = [partitioner.target(o) for o in e.outputs]
    cconst_specs = [plain(partitioner.primary(c)) for c in cconsts]
    bconst_specs = [plain(partitioner.primary(c)) for c in bconsts]
    mesh = carry_specs[0].mesh if carry_specs else partitioner.target(e.inputs[0]).mesh
    replicated = Sharding(mesh, ())  # the condition: one bool every device holds
    cond = propagate(replace(cond, in_shardings=tuple(carry_specs + cconst_specs), out_shardings=(replicated,)))
    body = propagate(replace(body, in_shardings=tuple(carry_specs + bconst_specs), out_shardings=tuple(carry_specs)))

    builder = partitioner.builder
    init = [partitioner.get(v, s, src) for v, s in zip(carries, carry_specs)]
    cconst_bufs = [partitioner.get(v, s, src) for v, s in zip(cconsts, cconst_specs)]
    bconst_bufs = [partitioner.get(v, s, src) for v, s in zip(bconsts, bconst_specs)]
    carry_bufs = list(builder.bufs(nc))
    _copy(builder, src, zip(init, carry_bufs))
    pred = builder.buf()

    test, (p_buf,), cond_axes = _partition_program(
        partitioner, cond, list(zip(carry_specs, carry_bufs)) + list(zip(cconst_specs, cconst_bufs)), [replicated],
        f"{src} condition")
    _copy(test, src, [(p_buf, pred)])
    step, new, body_axes = _partition_program(
        partitioner, body, list(zip(carry_specs, carry_bufs)) + list(zip(bconst_specs, bconst_bufs)), carry_specs,
        f"{src} body")
    _carry_back(step, src, new, carry_bufs)

    owned = set(carry_bufs) | set(cconst_bufs) | set(bconst_bufs) | {pred}
    tests, steps = _per_device(test.freed(owned)), _per_device(step.freed(owned))
    reads = tuple(dict.fromkeys(carry_bufs + cconst_bufs + bconst_bufs))
    builder.emit(lambda d: While(0, src, cond=tests[d].made(), pred=pred, body=steps[d].made(), reads_=reads,
                                 writes_=tuple(carry_bufs)))
    _results(partitioner, e, src, e.outputs, carry_bufs, carry_specs, dict.fromkeys(cond_axes + body_axes))


def emit_switch(partitioner: Partitioner, e: Eqn) -> None:
    """Partition switch ``e``: each branch partitioned once into one ``Switch`` of which every
    device runs the branch the (replicated) index names, leaving its results in shared buffers."""
    branches = e.kw["branches"]
    src = partitioner.source(e)
    index, operands = e.inputs[0], e.inputs[1:]
    out_specs = [partitioner.target(o) for o in e.outputs]
    mesh = partitioner.target(index).mesh
    index_buf = partitioner.get(index, Sharding(mesh, ()), src)  # every device holds the index
    in_specs = [plain(partitioner.primary(v)) for v in operands]
    in_bufs = [partitioner.get(v, s, src) for v, s in zip(operands, in_specs)]
    results = list(partitioner.builder.bufs(len(e.outputs)))
    bodies, split = [], ()
    for k, br in enumerate(branches):
        br = propagate(replace(br, in_shardings=tuple(in_specs), out_shardings=tuple(out_specs)))
        sb, outs, axes = _partition_program(partitioner, br, list(zip(in_specs, in_bufs)), out_specs, f"{src} branch {k}")
        split += axes
        _copy(sb, src, zip(outs, results))
        bodies.append(_per_device(sb.freed(set(in_bufs) | set(results) | {index_buf})))
    reads = tuple(dict.fromkeys(in_bufs))
    partitioner.builder.emit(lambda d: Switch(0, src, index=index_buf, branches=tuple(body[d] for body in bodies),
                                              reads_=reads, writes_=tuple(results)))
    for o, r, spec in zip(e.outputs, results, out_specs):
        partitioner.copies[o] = [Copy(spec, r)]
    floats = any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs)
    partitioner.checkpoint(e, tuple(dict.fromkeys(split)) if floats else ())
