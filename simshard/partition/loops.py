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

import numpy as np

from ..propagate.driver import propagate
from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from .plan import by_shape_class, layout_of, local_shapes
from .reshard import _plain
from .schedule import Compute, Literal, Loop, Switch, While


def _whole_first(s: Sharding) -> Sharding:
    """``s`` with its first dim unsharded (a scanned dim: every device reads every step)."""
    return Sharding(s.mesh, (DimSharding(()),) + tuple(s.dims[1:]), s.replicated)


def _drop_first(s: Sharding) -> Sharding:
    return Sharding(s.mesh, tuple(s.dims[1:]), s.replicated)


def _copy(b, src: str, pairs) -> None:
    """``dst = src`` for each pair: an identity kernel, the array itself (no data moves)."""
    for i, o in pairs:
        b.emit_same(Compute(0, src, op="stop_gradient", inputs=(i,), outputs=(o,)))


def _carry_back(b, src: str, new, carry_bufs) -> None:
    """The carries' new values into their buffers, in two steps: a carry may become another."""
    staged = [b.buf() for _ in new]
    _copy(b, src, zip(new, staged))
    _copy(b, src, zip(staged, carry_bufs))


def _results(P, e, src: str, outputs, bufs, specs, axes) -> None:
    """The loop's results copied out once after it (what a checkpoint records is then the final
    value), and the op's checkpoint: reassociated over ``axes`` where it computes floats."""
    for o, buf, spec in zip(outputs, bufs, specs):
        out = P.b.buf()
        _copy(P.b, src, [(buf, out)])
        P.mats[o] = [P.Mat(spec, out)]
    P.checkpoint(e, tuple(axes) if any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs) else ())


def _body_axes(program) -> tuple[str, ...]:
    return tuple(dict.fromkeys(a.name for s in program.shardings.values() for dim in s.dims for a in dim.axes))


def emit_scan(P, e) -> None:
    """Partition scan ``e`` through the partitioner ``P``: operands, one loop, results."""
    kw = e.kw
    body, length, nc, nx = kw["body"], kw["length"], kw["num_carry"], kw["num_xs"]
    src = P.source(e)
    carries, xs, consts = e.inputs[:nc], e.inputs[nc:nc + nx], e.inputs[nc + nx:]
    # carries as the scan's final carry is laid out (propagation ties the two); stacked inputs
    # and constants as they are held (the scanned dim whole), so the loop moves nothing before
    # it starts that its body would not move anyway
    carry_specs = [P.target(o) for o in e.outputs[:nc]]
    xs_specs = [_whole_first(_plain(P.primary(x))) for x in xs]
    const_specs = [_plain(P.primary(c)) for c in consts]
    used = [o in P.users or o in P.read_outputs for o in e.outputs[nc:]]  # residuals nobody reads: skipped

    # the body, propagated from the layouts it runs on; its ys stay where the body makes them
    body_in = carry_specs + [_drop_first(s) for s in xs_specs] + const_specs
    n_user = len(body.outputs) - kw.get("num_res", 0)
    body_out = carry_specs + [_drop_first(_whole_first(P.target(o))) for o in e.outputs[nc:n_user]] + \
        [None] * (len(body.outputs) - n_user)
    body = propagate(replace(body, in_shardings=tuple(body_in), out_shardings=tuple(body_out)))
    ys = [(o, v) for o, v, u in zip(e.outputs[nc:], body.outputs[nc:], used) if u]
    first_residual = len(e.outputs) - kw.get("num_res", 0)

    b = P.b
    init = [P.get(v, s, src) for v, s in zip(carries, carry_specs)]
    xs_bufs = [P.get(v, s, src) for v, s in zip(xs, xs_specs)]
    const_bufs = [P.get(v, s, src) for v, s in zip(consts, const_specs)]
    carry_bufs = list(b.bufs(nc))
    _copy(b, src, zip(init, carry_bufs))
    counter, zero = b.buf(), b.buf()
    b.emit_same(Literal(0, src, dst=zero, value=np.int32(0)))

    # the body, partitioned once by a partitioner of its own on the schedule's buffer numbers
    sub = P.sub(body)
    sub.read_outputs = set(body.outputs[:nc]) | {v for _, v in ys}  # a scan in the body writes no unread residual
    for v, buf, spec in zip(body.inputs[:nc], carry_bufs, carry_specs):
        sub.mats[v] = [P.Mat(spec, buf)]
    for v, buf, spec, x in zip(body.inputs[nc:nc + nx], xs_bufs, xs_specs, xs):
        sliced, out = sub.b.buf(), sub.b.buf()
        rest = _drop_first(spec)
        sub.b.emit(_by_local_shape(sub.b.devices, spec, x.aval.shape, lambda local, buf=buf, sliced=sliced, x=x: Compute(
            0, src, op="dynamic_slice", inputs=(buf, counter) + (zero,) * (x.aval.ndim - 1), outputs=(sliced,),
            params=(("slice_sizes", (1,) + local[1:]),))))
        sub.b.emit(_by_local_shape(sub.b.devices, rest, v.aval.shape, lambda local, sliced=sliced, out=out: Compute(
            0, src, op="reshape", inputs=(sliced,), outputs=(out,), params=(("new_shape", local),))))
        sub.mats[v] = [P.Mat(rest, out)]
    for v, buf, spec in zip(body.inputs[nc + nx:], const_bufs, const_specs):
        sub.mats[v] = [P.Mat(spec, buf)]
    for k, be in enumerate(body.eqns):
        sub.at = k
        sub.eqn(be)
    new = [sub.get(v, s, f"{src}: carry {k}") for k, (v, s) in enumerate(zip(body.outputs[:nc], carry_specs))]
    # a y is written as its users want it (a gradient reduce-scattered into its parameter's
    # layout); a residual, which only the derivative's scan reads, as the body last held it (a
    # weight broadcast after its gather stays gathered, as an unrolled loop's would)
    ys_specs = [_whole_first(P.target(o)) if e.outputs.index(o) < first_residual else
                Sharding(P.target(o).mesh, (DimSharding(()),) + tuple(sub.mats[v][-1].spec.dims)) for o, v in ys]
    ys_bufs = [sub.b.buf() for _ in ys]
    for yb, spec, (o, _) in zip(ys_bufs, ys_specs, ys):
        # zeros made on the device (the full op), not carried in the schedule as an array
        b.emit(_by_local_shape(b.devices, spec, o.aval.shape, lambda local, yb=yb, o=o: Compute(
            0, src, op="full", inputs=(), outputs=(yb,),
            params=(("shape", local), ("fill_value", 0), ("dtype", np.dtype(o.aval.dtype))))))
    for (o, v), yb, spec in zip(ys, ys_bufs, ys_specs):
        y = sub.get(v, _drop_first(spec), f"{src}: y")
        row = sub.b.buf()
        sub.b.emit(_by_local_shape(b.devices, spec, o.aval.shape, lambda local, y=y, row=row: Compute(
            0, src, op="reshape", inputs=(y,), outputs=(row,), params=(("new_shape", (1,) + local[1:]),))))
        update = Compute(0, src, op="dynamic_update_slice", inputs=(yb, row, counter) + (zero,) * (o.aval.ndim - 1),
                         outputs=(yb,))
        sub.b.emit_same(update)
    _carry_back(sub.b, src, new, carry_bufs)
    b._next_buf = sub.b._next_buf

    owned = set(carry_bufs) | set(ys_bufs) | set(xs_bufs) | set(const_bufs) | {counter, zero}
    reads = tuple(dict.fromkeys(const_bufs + xs_bufs + carry_bufs + ys_bufs + [zero]))
    loops: dict[int, Loop] = {}  # devices running one body share one Loop
    for members, instrs in sub.b.freed(owned):
        loop = Loop(0, src, length=length, reverse=bool(kw["reverse"]), counter=counter, body=instrs, reads_=reads,
                    writes_=tuple(carry_bufs + ys_bufs))
        loops.update(dict.fromkeys(members, loop))
    b.emit(loops)

    _results(P, e, src, list(e.outputs[:nc]) + [o for o, _ in ys], carry_bufs + ys_bufs, carry_specs + ys_specs,
             _body_axes(body))

def _per_device(classes: list[tuple[list[int], tuple]]) -> dict:
    """``ScheduleBuilder.freed``'s bodies by device."""
    return {d: body for members, body in classes for d in members}


def _by_local_shape(devices, spec, shape, build) -> dict:
    """For ``ScheduleBuilder.emit``: ``build(local shape)`` per device, one shared instruction
    per distinct local shape of ``shape`` laid out as ``spec``."""
    L = layout_of(spec, shape)
    shapes = local_shapes(L)
    return by_shape_class(devices, [L], lambda d: build(shapes[d]))


def _partition_program(P, program, bindings, out_specs, src: str):
    """Partition ``program`` (propagated) with its inputs bound to ``bindings`` (spec, buffer) on
    the schedule's buffer numbers; its builder, and a buffer per output laid out as asked."""
    sub = P.sub(program)
    for v, (spec, buf) in zip(program.inputs, bindings):
        sub.mats[v] = [P.Mat(spec, buf)]
    for k, e in enumerate(program.eqns):
        sub.at = k
        sub.eqn(e)
    outs = [sub.get(v, s, f"{src}: result {k}") for k, (v, s) in enumerate(zip(program.outputs, out_specs))]
    P.b._next_buf = sub.b._next_buf
    return sub.b, outs


def emit_while(P, e) -> None:
    """Partition while-loop ``e``: its condition and body partitioned once into one ``While``."""
    kw = e.kw
    cond, body, nc, ncc = kw["cond"], kw["body"], kw["num_carry"], kw["num_cond_consts"]
    src = P.source(e)
    carries, cconsts, bconsts = e.inputs[:nc], e.inputs[nc:nc + ncc], e.inputs[nc + ncc:]
    carry_specs = [P.target(o) for o in e.outputs]
    cconst_specs = [_plain(P.primary(c)) for c in cconsts]
    bconst_specs = [_plain(P.primary(c)) for c in bconsts]
    mesh = carry_specs[0].mesh if carry_specs else P.target(e.inputs[0]).mesh
    replicated = Sharding(mesh, ())  # the condition: one bool every device holds
    cond = propagate(replace(cond, in_shardings=tuple(carry_specs + cconst_specs), out_shardings=(replicated,)))
    body = propagate(replace(body, in_shardings=tuple(carry_specs + bconst_specs), out_shardings=tuple(carry_specs)))

    b = P.b
    init = [P.get(v, s, src) for v, s in zip(carries, carry_specs)]
    cconst_bufs = [P.get(v, s, src) for v, s in zip(cconsts, cconst_specs)]
    bconst_bufs = [P.get(v, s, src) for v, s in zip(bconsts, bconst_specs)]
    carry_bufs = list(b.bufs(nc))
    _copy(b, src, zip(init, carry_bufs))
    pred = b.buf()

    test, (p_buf,) = _partition_program(P, cond, list(zip(carry_specs, carry_bufs)) + list(zip(cconst_specs, cconst_bufs)),
                                        [replicated], f"{src} condition")
    _copy(test, src, [(p_buf, pred)])
    step, new = _partition_program(P, body, list(zip(carry_specs, carry_bufs)) + list(zip(bconst_specs, bconst_bufs)),
                                   carry_specs, f"{src} body")
    _carry_back(step, src, new, carry_bufs)
    P.b._next_buf = max(P.b._next_buf, step._next_buf, test._next_buf)

    owned = set(carry_bufs) | set(cconst_bufs) | set(bconst_bufs) | {pred}
    tests, steps = _per_device(test.freed(owned)), _per_device(step.freed(owned))
    reads = tuple(dict.fromkeys(carry_bufs + cconst_bufs + bconst_bufs))
    b.emit(lambda d: While(0, src, cond=tests[d].made(), pred=pred, body=steps[d].made(), reads_=reads,
                           writes_=tuple(carry_bufs)))
    _results(P, e, src, e.outputs, carry_bufs, carry_specs, _body_axes(body))


def emit_switch(P, e) -> None:
    """Partition switch ``e``: each branch partitioned once into one ``Switch`` of which every
    device runs the branch the (replicated) index names, leaving its results in shared buffers."""
    branches = e.kw["branches"]
    src = P.source(e)
    index, operands = e.inputs[0], e.inputs[1:]
    out_specs = [P.target(o) for o in e.outputs]
    mesh = P.target(index).mesh
    index_buf = P.get(index, Sharding(mesh, ()), src)  # every device holds the index
    in_specs = [_plain(P.primary(v)) for v in operands]
    in_bufs = [P.get(v, s, src) for v, s in zip(operands, in_specs)]
    results = list(P.b.bufs(len(e.outputs)))
    bodies = []
    for k, br in enumerate(branches):
        br = propagate(replace(br, in_shardings=tuple(in_specs), out_shardings=tuple(out_specs)))
        sb, outs = _partition_program(P, br, list(zip(in_specs, in_bufs)), out_specs, f"{src} branch {k}")
        _copy(sb, src, zip(outs, results))
        bodies.append(_per_device(sb.freed(set(in_bufs) | set(results) | {index_buf})))
    reads = tuple(dict.fromkeys(in_bufs))
    P.b.emit(lambda d: Switch(0, src, index=index_buf, branches=tuple(b[d] for b in bodies), reads_=reads,
                              writes_=tuple(results)))
    for o, r, spec in zip(e.outputs, results, out_specs):
        P.mats[o] = [P.Mat(spec, r)]
    P.checkpoint(e, tuple(mesh.axis_names) if any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs) else ())
