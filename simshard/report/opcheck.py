"""Op-by-op verification of a partitioned run.

``check_ops(spmd, values, args)`` walks the program's top-level ops in order. For each op it runs
the op whole (its registry kernel) on the *assembled* inputs: the global values the run itself
produced (each checkpoint assembled with ``simshard.sharding.layout``), the program's arguments for its
inputs. It compares the result, bit for bit, with what the devices hold right after the op ran
(``SpmdProgram.checkpoints``: the buffer and its layout, pending reductions included; the
executor's copies in ``Execution.values``). Using the run's own inputs keeps one wrong op from
making every later op look wrong: each op answers only for itself (its operand reshards
included). Where a value could not be assembled (replicas that disagree) later ops see the
reference value (the op run whole on its inputs) instead.

Each device block (for a pending value: each reduce group's combined block, canonical order) is
compared with the same elements of the reference, so a difference names the op, a device and the
global index; padding never counts (checkpoint buffers hold the layout's local blocks, and a
buffer of another shape is reported as such).

An op whose kernel orders its float sums by its operands' shapes (``shape_dependent_sums``: a
BLAS matmul, numpy's sums) and that splits no sum over mesh axes is compared with itself run on
each device's own block of its inputs (``local_reference``: the same local shapes, so the same
kernel blocking), bit for bit. A kernel's blocking is never a licence. A device's operands are
taken as the partitioner held them (``Checkpoint.operands``: their exact layouts, strided ones
included, and their padding), never derived again from the op's factors.

Only a float op whose sum-like reduction the partition split over mesh axes
(``Checkpoint.reassociated``, recorded by the partitioner) adds in another order than the op run
whole; when such an op's values differ (all finite, within what reordering a sum can change) the
check says so and gives the ULP distance: ``Check.legitimate``, not a wrong partition. Where the
devices hold its partial sums pending, each partial must moreover be bitwise the op on that
device's own operands (``check_partials``), so only the order the partials are added in is
excused; every partial is so checked, also where their sum came out bitwise (a wrong partial's
few ULP can round away in the sum). With exact inputs (``exact_inputs``: integers, exact sums) those ops compare bitwise too.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from ..sharding.layout import layout
from ..ops import get_op
from ..ir.program import Literal
from ..sharding.reduce_ops import REDUCE_OPS
from .verify import Check, bit_equal, compare, plain_value, ulp_distance


def check_ops(spmd, values: Mapping[int, Mapping[int, np.ndarray]], args: Sequence) -> tuple[Check, ...]:
    """One ``Check`` per checkpointed op result of ``spmd`` (program order); see the module doc.

    ``values``: device -> buffer -> array, as ``Execution.values`` of a run with
    ``trace_values=True``; ``args``: the program's global inputs."""
    program = spmd.program
    if len(args) != len(program.inputs):
        raise TypeError(f"program takes {len(program.inputs)} inputs, got {len(args)}")
    env = {v: np.asarray(a) for v, a in zip(program.inputs, args)}
    by_eqn: dict[int, dict[int, object]] = {}
    for c in spmd.checkpoints:
        by_eqn.setdefault(c.eqn, {})[c.output] = c
    checks: list[Check] = []
    pending: dict = {}  # value -> mesh axes its checkpoint left it pending over
    for k, e in enumerate(program.eqns):
        ins = [i.value if isinstance(i, Literal) else env[i] for i in e.inputs]
        inherited = {a for i in e.inputs if not isinstance(i, Literal) for a in pending.get(i, ())}
        expected = get_op(e.op).kernel(*ins, **e.kw)
        for j, o in enumerate(e.outputs):
            exp = np.asarray(expected[j])
            env[o] = exp
            cp = by_eqn.get(k, {}).get(j)
            if cp is None:
                continue
            pending[o] = tuple(a if isinstance(a, str) else str(a).replace(chr(34), "") for a in cp.sharding.unreduced)
            shards = {d: values.get(d, {}).get(cp.buf) for d in spmd.devices}
            if any(s is None for s in shards.values()):
                continue  # not traced
            what = f"op {cp.source}" + (f" (result {j})" if len(e.outputs) > 1 else "")
            ref = _reference(e, ins, j, cp, exp)
            check, actual = _check_value(what, cp, ref, shards, lambda j=j, e=e, ins=ins: _scale(e, ins, j))
            if check.legitimate and not inherited & set(cp.reassociated):
                # every device's partial, even where their sum came out bitwise (a wrong partial's
                # few ULP can round away in the sum). A partial over an axis its operand was itself
                # pending over is no kernel of the op on assembled operands: the ULP bound stands
                check = check_partials(check, e, ins, j, cp, exp, shards)
            checks.append(check)
            if actual is not None:
                env[o] = actual
    return tuple(checks)


def _reference(e, ins: Sequence, j: int, cp, exp: np.ndarray) -> np.ndarray:
    """What the devices' blocks of result ``j`` must equal bit for bit: the op on each block's own
    operands (``local_reference``) where its kernel sums by shape and no sum is split or pending
    over mesh axes; else the op run whole (``exp``), also where no block maps to operand slices."""
    op = get_op(e.op)
    if e.op == "scan" and cp.body and not cp.reassociated:
        try:
            return np.asarray(loop_reference(e, ins, cp)[j])
        except (ValueError, TypeError, IndexError, KeyError):
            return exp
    if not op.shape_dependent_sums or op.structured or cp.reassociated:
        return exp
    if layout(cp.sharding, exp.shape).unreduced:
        return exp
    try:
        return local_reference(e, ins, j, cp)
    except (ValueError, TypeError, IndexError):
        return exp


def loop_reference(e, ins: Sequence, cp) -> tuple[np.ndarray, ...]:
    """A scan's results as the devices should hold them when its body splits no sum over mesh
    axes: the scan run step by step, each body op whose kernel sums by shape computed per device
    on its own block (``local_reference``, under the body's checkpoint of it), the others whole.
    A row-split matmul in the body so gets the device's own kernel blocking, as outside loops."""
    kw = e.kw
    body, nc, nx, length = kw["body"], kw["num_carry"], kw["num_xs"], kw["length"]
    where = {(c.eqn, c.output): c for c in cp.body}
    carry, xs, consts = list(ins[:nc]), [np.asarray(x) for x in ins[nc:nc + nx]], list(ins[nc + nx:])
    ys = [[None] * length for _ in body.outputs[nc:]]
    for k in range(length):
        step = length - 1 - k if kw["reverse"] else k
        env = dict(zip(body.inputs, carry + [x[step] for x in xs] + consts))
        for n, be in enumerate(body.eqns):
            args = [i.value if isinstance(i, Literal) else env[i] for i in be.inputs]
            outs = get_op(be.op).kernel(*args, **be.kw)
            for m, o in enumerate(be.outputs):
                inner = where.get((n, m))
                env[o] = np.asarray(outs[m]) if inner is None else _reference(be, args, m, inner, np.asarray(outs[m]))
        outs = [env[v] for v in body.outputs]
        carry = outs[:nc]
        for t, y in enumerate(outs[nc:]):
            ys[t][step] = y
    return tuple(np.asarray(c) for c in carry) + tuple(np.stack(y) for y in ys)


def local_reference(e, ins: Sequence, j: int, cp) -> np.ndarray:
    """Result ``j`` of ``e`` as each device's block should hold it when no sum of ``e`` is split
    over mesh axes: per device, the op's kernel run on that device's own operands as it held them
    (``device_references``), so the same local shapes and the same kernel blocking as the
    device's, and bitwise equal to it when the partition is right. A kernel that orders its sums
    by the block shapes (``shape_dependent_sums``) may differ from the op run whole; that
    difference is no licence. Raises ValueError where the checkpoint has no record of them."""
    shape = tuple(e.outputs[j].aval.shape)
    out = np.zeros(shape, dtype=np.dtype(e.outputs[j].aval.dtype))
    for d, block, got in device_references(e, ins, j, cp):
        if shape:
            out[np.ix_(*block)] = got
        else:
            out[()] = got
    return out


def device_references(e, ins: Sequence, j: int, cp):
    """Per device of checkpoint ``cp``'s layout: (device, its block's global indices, the op's
    kernel on the device's own operands). Each operand is taken as the partitioner held it when
    the op ran (``cp.operands``: its exact layout, a strided one's index sets included, and its
    padding), never derived again from the op's factors, so a device whose reduction runs over
    its part of the operands (a partial sum, pending in ``cp``) gets its partial. Raises
    ValueError where the checkpoint has no such record or an operand was itself pending (a
    device's partial of it is no slice of the assembled operand)."""
    held = cp.operands
    if len(held) != len(ins):
        raise ValueError(f"op {e.op}: no record of how its operands were held")
    if any(h.layout is not None and h.layout.unreduced for h in held):
        raise ValueError(f"op {e.op}: an operand was pending")
    op = get_op(e.op)
    lay = layout(cp.sharding, tuple(e.outputs[j].aval.shape))
    for d in lay.devices:
        block = lay.indices(d)
        operands = [_held_block(np.asarray(a), h, d) for a, h in zip(ins, held)]
        outs = [tuple(len(ix) for ix in block) if k == j else tuple(o.aval.shape) for k, o in enumerate(e.outputs)]
        params = op.local_params(dict(e.kw), [a.shape for a in operands], outs)
        yield d, block, np.asarray(op.kernel(*operands, **params)[j])


def _held_block(operand: np.ndarray, held, device: int) -> np.ndarray:
    """``device``'s block of ``operand`` as ``held`` (a ``HeldOperand``) says it held it: the
    layout's index sets, the padded dims filled up to the block size with the padding value."""
    if held.layout is None or not operand.shape:
        return operand
    block = operand[np.ix_(*held.layout.indices(device))]
    widths = [(0, 0)] * block.ndim
    for dim in held.padded:
        widths[dim] = (0, held.layout.block_shape[dim] - block.shape[dim])
    return np.pad(block, widths, constant_values=held.pad) if held.padded else block


def check_partials(check: Check, e, ins: Sequence, j: int, cp, exp: np.ndarray, shards) -> Check:
    """``check`` of a reassociated op, or where a device's partial sum is not the op's kernel on
    that device's own operands (bit for bit), a wrong check naming the device: a reassociation
    holds only where every partial is exact. Where the partials are not left pending in the
    checkpoint, or it has no record of the operands they were computed on, ``check``."""
    lay = layout(cp.sharding, exp.shape)
    names = tuple(a if isinstance(a, str) else str(a).replace(chr(34), "") for a in lay.unreduced)
    if not lay.unreduced or names != tuple(cp.reassociated):
        return check
    try:
        refs = list(device_references(e, ins, j, cp))
    except (ValueError, TypeError, IndexError):
        return check
    for d, block, ref in refs:
        got = compare(shards[d], ref, check.what, device=d,
                      note=f"device {d}'s partial sum against the op on its own operands")
        if not got.bitwise:  # the first index in global coordinates
            first = got.first_index
            at = tuple(int(ix[i]) for ix, i in zip(block, first)) if got.problem == "values" else first
            return dataclasses.replace(got, first_index=at)
    return check


class _Assembled(NamedTuple):
    """A checkpoint's blocks assembled (each reduce group combined) against its reference: the
    value, where it was written, where replicas clash, and the first wrong device and value per
    element (``bad``)."""

    actual: np.ndarray
    written: np.ndarray
    clash: np.ndarray
    bad: np.ndarray
    bad_dev: np.ndarray
    bad_val: np.ndarray
    groups: dict


def _assemble(lay, shards: Mapping[int, np.ndarray], exp: np.ndarray) -> _Assembled:
    rop = REDUCE_OPS[lay.reduce_op]
    shape = exp.shape
    out = _Assembled(np.zeros(shape, dtype=exp.dtype), np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool),
                     np.zeros(shape, dtype=bool), np.full(shape, -1, dtype=np.int64), np.zeros(shape, dtype=exp.dtype),
                     {})
    for g in lay.reduce_groups():
        parts = [np.asarray(shards[d]) for d in g]
        block = rop.reduce(parts) if len(parts) > 1 else parts[0]
        ix = np.ix_(*lay.index_map[g[0]]) if shape else ()
        new = ~_same(block, exp[ix]) & ~out.bad[ix]
        out.bad_dev[ix] = np.where(new, g[0], out.bad_dev[ix])
        out.bad_val[ix] = np.where(new, block, out.bad_val[ix])
        out.bad[ix] = out.bad[ix] | new
        out.clash[ix] = out.clash[ix] | (out.written[ix] & ~_same(out.actual[ix], block))
        out.actual[ix] = np.where(out.written[ix], out.actual[ix], block)
        out.written[ix] = True
        out.groups[g[0]] = g
    return out


def _check_value(what: str, cp, exp: np.ndarray, shards: Mapping[int, np.ndarray], scale=None):
    """The check of one checkpoint against its reference, and the assembled value (None when its
    replicas disagree or a block has the wrong shape / dtype)."""
    lay = layout(cp.sharding, exp.shape)
    pend = f"pending over {', '.join(str(a).replace(chr(34), '') for a in lay.unreduced)}" if lay.unreduced else ""
    for d in lay.devices:
        a = np.asarray(shards[d])
        if a.shape != lay.local_shape(d) or a.dtype != exp.dtype:
            ref = exp[np.ix_(*lay.index_map[d])] if exp.shape else exp
            return compare(a, ref, what, device=d, note=f"device {d}'s block of {cp.sharding}"), None
    got = _assemble(lay, shards, exp)
    base = dict(what=what, expected_shape=tuple(exp.shape), actual_shape=tuple(exp.shape),
                expected_dtype=str(exp.dtype), actual_dtype=str(exp.dtype))
    value = None if got.clash.any() or not got.written.all() else got.actual
    bad, bad_val = got.bad, got.bad_val
    if not bad.any():
        return Check(bitwise=True, problem="", note=pend, **base), value
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if exp.shape else ()
    dev = int(got.bad_dev[first])
    ulps = ulp_distance(bad_val[bad], exp[bad])
    max_ulp = None
    if ulps is not None and np.isfinite(bad_val[bad]).all() and np.isfinite(exp[bad]).all():
        max_ulp = int(ulps.max())
    notes = []
    if len(got.groups.get(dev, ())) > 1:
        notes.append(f"{pend}: devices {got.groups[dev]} combine into this block")
    if got.clash.any():
        notes.append("replicas disagree")
    reassoc = tuple(cp.reassociated) if exp.dtype.kind in "fc" else ()
    if reassoc and max_ulp is not None and scale is not None:
        beyond = _beyond_reordering(exp, bad, bad_val, scale())
        if beyond:
            notes.append(beyond)
            reassoc = ()
    return Check(
        bitwise=False, problem="values", mismatches=int(bad.sum()), first_index=first,
        expected_value=plain_value(exp[first]), actual_value=plain_value(bad_val[first]), max_ulp=max_ulp, device=dev,
        note="; ".join(notes), reassociated=reassoc, **base,
    ), value


def _beyond_reordering(exp: np.ndarray, bad: np.ndarray, bad_val: np.ndarray, scale) -> str:
    """Why the wrong elements are more than a reassociated sum explains, or "": a reassociated
    sum of n terms moves by at most ~n eps sum|terms| (``scale``: ``_scale``'s pair)."""
    n = max(scale[1], 2)
    eps = float(np.finfo(exp.dtype).eps)
    err = np.abs(bad_val[bad].astype(np.complex128 if exp.dtype.kind == "c" else np.float64) - exp[bad])
    mag = np.maximum(np.abs(exp[bad]), np.abs(bad_val[bad])).astype(np.float64)
    if scale[0] is not None:
        mag = np.maximum(mag, scale[0][bad])
    limit = 4.0 * n * eps * mag
    if not (err > limit).any():
        return ""
    k = int(np.flatnonzero(err > limit)[0])
    return f"beyond what reordering a sum of {n} terms can change (|error| {err[k]:.3g} > {limit[k]:.3g})"


def _scale(e, ins, j):
    """(|terms| summed as the op would, or None; the number of terms a reduction may add at most)
    for the bound of a reassociated result: the op run on absolute values (``sub`` as ``add``)."""
    n = max((int(np.size(a)) for a in ins), default=1)
    try:
        op = get_op("add" if e.op == "sub" else e.op)
        out = op.kernel(*[np.abs(np.asarray(a)) for a in ins], **e.kw)
        m = np.abs(np.asarray(out[j])).astype(np.float64)
        return (m if m.shape == tuple(e.outputs[j].aval.shape) else None), n
    except Exception:
        return None, n


def _same(a, b) -> np.ndarray:
    a = np.asarray(a)
    return np.asarray(bit_equal(a, np.asarray(b, dtype=a.dtype))).reshape(a.shape)


def program_bytes(program) -> int:
    """Bytes of every value of ``program`` (what tracing all of them would hold, per copy)."""
    return sum(int(np.prod(v.aval.shape, dtype=np.int64)) * np.dtype(v.aval.dtype).itemsize for v in program.values())
