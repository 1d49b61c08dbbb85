"""Local instructions on blocks: a compute's result from its op's ``abstract_eval`` on the
operand blocks, a literal's, slice's or pad's block from its fields, a free's release; and the
copies of an instruction whose ``Varying`` fields set a class's members apart."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir.program import Aval
from ...ops.registry import OPS
from ...spmd import VARYING_FIELDS, Instr, Varying, resolved, updates_in_place
from ...sharding.rows import distinct_rows, rows_of
from ..compute import op_work
from .blocks import Block, EstimateError
from .memo import ComputeResult, Memo, value_key
from .state import Classes, Device, DeviceState, Devices, Lists, member_ids, regroup


def run_local(dev: Device, ins: Instr, memo: Memo) -> None:
    """A local instruction on one class's state."""
    run = LOCAL_RUNS.get(ins.kind)
    if run is None:
        raise EstimateError(f"[{ins.id}] {ins.kind} from {ins.source!r}: no estimate for this instruction kind")
    run(dev.state, dev.device, ins, memo)


def compute_result(ins: Instr, blocks: tuple[Block, ...], memo: Memo) -> ComputeResult:
    """``ins``'s result blocks and work on operand ``blocks``, evaluated once per distinct op,
    parameters and operand blocks (a mesh of thousands evaluates each local shape once)."""
    key = (ins.op, ins.params, blocks)
    try:
        out = memo.results.get(key)
    except TypeError:  # a parameter that does not hash (an array): by its value's stand-in
        key = (ins.op, value_key(ins.params), blocks)
        out = memo.results.get(key)
    if out is None:
        params = dict(ins.params)
        avals = OPS[ins.op].abstract_eval(*(Aval(b.shape, b.dtype) for b in blocks), **params)
        blocks_out = tuple(Block(tuple(a.shape), np.dtype(a.dtype)) for a in avals)
        out_bytes = sum(b.nbytes for b in blocks_out)
        work = op_work(ins.op, [b.shape for b in blocks], [b.shape for b in blocks_out], params,
                       blocks_out[0].dtype.name if blocks_out else "float32", sum(b.nbytes for b in blocks),
                       out_bytes)
        out = memo.results[key] = ComputeResult(blocks_out, work)
    return out


def _compute(st: DeviceState, me: int, ins: Instr, memo: Memo) -> None:
    blocks_out, work = compute_result(ins, tuple(st.read(k, ins, me) for k in ins.inputs), memo)
    st.ops[work] += 1
    if not updates_in_place(ins):  # in place: the buffer keeps its block, no new bytes
        if len(blocks_out) == 1:
            st.write_one(ins.outputs[0], blocks_out[0])
        else:
            st.write(list(zip(ins.outputs, blocks_out)))


def _literal(st: DeviceState, me: int, ins: Instr, memo: Memo) -> None:
    v = np.asarray(ins.value)
    st.write_one(ins.dst, memo.block(v.shape, v.dtype))


def _slice(st: DeviceState, me: int, ins: Instr, memo: Memo) -> None:
    src = st.read(ins.src, ins, me)
    st.write_one(ins.dst, memo.block(tuple(len(ix) for ix in ins.index), src.dtype))


def _pad(st: DeviceState, me: int, ins: Instr, memo: Memo) -> None:
    st.write_one(ins.dst, memo.block(tuple(int(s) for s in ins.shape), st.read(ins.src, ins, me).dtype))


def _free(st: DeviceState, me: int, ins: Instr, memo: Memo) -> None:
    st.free(ins.bufs)


# each local instruction kind on a state: (state, device, instruction, memo) -> None
LOCAL_RUNS = {"compute": _compute, "literal": _literal, "slice": _slice, "pad": _pad, "free": _free}


def tables(ins: Instr) -> tuple[Varying, ...]:
    """An instruction's ``Varying`` fields (a collective's groups, a slice's positions, ...), as
    ``varying_fields`` finds them, looking only at the fields its class has that may vary (a
    compute has none: the walk asks for every local step of every class)."""
    names = _MAY_VARY.get(type(ins))
    if names is None:
        own_fields = {f.name for f in dataclasses.fields(ins)}
        names = _MAY_VARY[type(ins)] = tuple(n for n in VARYING_FIELDS if n in own_fields or hasattr(type(ins), n))
    found = ()
    for name in names:
        value = getattr(ins, name)
        if isinstance(value, Varying):
            found += (value,)
    return found


_MAY_VARY: dict[type, tuple[str, ...]] = {}  # instruction class -> its fields that may be Varying


def own(ins: Instr, codes: tuple, device: int, memo: Memo) -> Instr:
    """The copy of ``ins`` the devices with ``codes`` in its Varying fields run (made once)."""
    key = (ins, codes)
    try:
        hit = memo.copies.get(key)
    except TypeError:  # a field that does not hash (an array): by its value's stand-in
        key = (value_key(ins), codes)
        hit = memo.copies.get(key)
    if hit is None:
        hit = memo.copies[key] = _resolved(ins, codes, device)
    return hit


def _resolved(ins: Instr, codes: tuple, device: int) -> Instr:
    """``resolved(ins, device)`` from the codes already read: each Varying field its value for
    ``codes`` (in ``tables``' order), set on a copy without the constructor (a walk of 65,536
    devices resolves tens of thousands of groups; the fields are the table's own values)."""
    if ins.kind in ("loop", "while", "switch"):  # Varying fields in their blocks: resolve them there
        return resolved(ins, int(device))
    names = [n for n in _MAY_VARY[type(ins)] if isinstance(getattr(ins, n), Varying)]
    out = object.__new__(type(ins))
    out.__dict__.update(ins.__dict__)
    out.__dict__.update({n: getattr(ins, n).values[code] for n, code in zip(names, codes)})
    return out


def made_block(ins: Instr) -> tuple:
    """What decides the block a slice or literal writes (its shape and, for a literal, dtype)."""
    if ins.kind == "slice":
        return tuple(len(ix) for ix in ins.index)
    if ins.kind == "literal":
        v = np.asarray(ins.value)
        return v.shape, v.dtype.str
    raise EstimateError(f"[{ins.id}] {ins.kind} from {ins.source!r}: no estimate for a per-device {ins.kind}")


def copies(ins: Instr, c: list[int], memo: Memo) -> list[tuple[Instr, list[int]]]:
    """The copies of ``ins`` (its ``Varying`` fields resolved) that class ``c``'s members run,
    each with its members in ``c``'s order: one per distinct row of codes."""
    fields = tables(ins)
    if not fields:
        return [(ins, list(c))]
    if len(c) == 1:  # a class of one (a strategy that sets every device apart): its own copy
        d = c[0]
        return [(own(ins, tuple(t.code(d) for t in fields), d, memo), [d])]
    members = member_ids(c)
    codes = np.stack([t.codes[rows_of(t.ids, members)] for t in fields], axis=1)  # [members, tables]
    distinct, first, inverse = distinct_rows(codes)  # np.unique(axis=0)'s, without its slow row sort
    order = np.argsort(inverse, kind="stable")  # members by copy, each copy's in c's order
    bounds = np.searchsorted(inverse[order], np.arange(len(distinct) + 1)).tolist()
    ordered = members[order].tolist()
    return [(own(ins, tuple(row), int(members[i]), memo), ordered[bounds[k]:bounds[k + 1]])
            for k, (row, i) in enumerate(zip(distinct.tolist(), first.tolist()))]


def local_varying(devices: Devices, classes: Classes, lists: Lists, c: list[int], ins: Instr, memo: Memo) -> None:
    """A local instruction with ``Varying`` fields on class ``c``: each member runs its own copy;
    members whose copies make equal blocks keep sharing a state, and the class splits where they
    do not (as a collective splits it)."""
    shares = copies(ins, c, memo)
    if len(shares) == 1:
        run_local(devices[c[0]], shares[0][0], memo)
        return
    copy_of = {d: copy for copy, members in shares for d in members}
    for part in regroup(devices, classes, lists, c, lambda d: made_block(copy_of[d])):
        run_local(devices[part[0]], copy_of[part[0]], memo)


def run_locals(devices: Devices, classes: Classes, here: dict[int, Instr], lists: Lists, memo: Memo) -> None:
    """A local SPMD step: once per class (per member where a ``Varying`` field sets them apart)."""
    for c in list(classes):
        ins = here[c[0]]
        if tables(ins):  # a slice's or literal's Varying field: members may get different blocks
            local_varying(devices, classes, lists, c, ins, memo)
        else:
            run_local(devices[c[0]], ins, memo)


__all__ = ["LOCAL_RUNS", "compute_result", "copies", "local_varying", "made_block", "own", "run_local", "run_locals", "tables"]
