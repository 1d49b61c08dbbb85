"""Running an op as chosen: operands resharded, reduction dims padded, the local kernel emitted.

``emit_op`` runs a ``choose.Candidate``: each operand is resharded to its chosen sharding
(``copies.ValueCopies.get``); operand dims carrying a sharded reduction factor are padded to the
layout's block size with the reduction's identity, so uneven or empty blocks reduce correctly
(padding never reaches a result: reduced dims are not in it); then one ``Compute`` per class of
devices with equal local shapes (nullary ops: per block, with ``out_index``). ``functorial`` runs
an op where its operands lie when an exact layout holds one of them (``exact``). Each records the
op's checkpoint, with the mesh axes over which its float sums reassociate.
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Eqn, Value
from ..ops import get_op
from ..ops.factors import REDUCTION
from ..sharding.dims import Sharding
from ..sharding.layout import Layout
from ..sharding.reduce_ops import REDUCE_OPS
from ..spmd import Compute, HeldOperand, Literal, Pad
from .builder import PerDevice
from .choose import Candidate
from .copies import Copy
from .exact import functorial_layouts
from .linear import LAYOUT
from .reshard.plan import ShapeView, by_block, by_shape_class, layout_of, local_shapes, shapes_of


class OpEmitter:
    """Emitting an op's instructions: a part of the partitioner (``partition._Partitioner``), on
    its ``builder``, ``copies``, ``devices`` and value methods (``ValueCopies``)."""

    def emit_op(self, e: Eqn, chosen: Candidate) -> None:
        """Run ``e`` as ``chosen``: operands resharded and padded, the local kernel, the checkpoint."""
        src = self.source(e)
        bufs, combined = self.operand_buffers(e, chosen, src)
        in_lay = [layout_of(s, i.aval.shape) if isinstance(i, Value) else None
                  for s, i in zip(chosen.in_shardings, e.inputs)]
        in_shapes = [local_shapes(L) if L is not None else None for L in in_lay]  # per operand: device -> shape
        held = held_operands(e, chosen, in_lay)
        self.pad_reductions(held, bufs, in_shapes, src)
        out_lay = [layout_of(s, o.aval.shape) for s, o in zip(chosen.out_shardings, e.outputs)]
        outs = self.builder.bufs(len(e.outputs))
        self.emit_kernel(e, bufs, outs, in_lay, in_shapes, out_lay, chosen.halo, src)
        for o, s, buf in zip(e.outputs, chosen.out_shardings, outs):
            self.copies[o] = [Copy(s, buf)]
        # a row block (halo) reads rows its layout does not hold: no record of its operands
        self.checkpoint(e, reassociated(e, chosen.rule, chosen.assignment, chosen.in_shardings, combined),
                        operands=held if chosen.halo is None else ())

    def operand_buffers(self, e: Eqn, chosen: Candidate, src: str) -> tuple[list[int], list[str]]:
        """Each operand's buffer laid out as chosen, and the pending sums these reshards combine
        (in steps, per axis)."""
        halo = chosen.halo
        bufs = []
        combined: list[str] = []
        for t, i in enumerate(e.inputs):
            if isinstance(i, Value):
                held = self.copies[i][0].spec if i in self.copies else None
                if held is not None and held.reduce_op in ("sum", "avg", "prod"):
                    combined += [axis_name(a) for a in held.unreduced if a not in chosen.in_shardings[t].unreduced]
                bufs.append(self.get(i, chosen.in_shardings[t], src, keep=halo is None or t != halo.windows[0].operand))
            else:
                bufs.append(self.literal(i))
        return bufs, combined

    def pad_reductions(self, held: tuple[HeldOperand, ...], bufs: list[int], in_shapes: list, src: str) -> None:
        """Pad operand dims that carry a sharded reduction factor up to the block size with the
        reduction's identity, as ``held`` says (``bufs`` and ``in_shapes`` updated in place)."""
        for t, h in enumerate(held):
            if not h.padded:
                continue
            dims = list(h.padded)
            sh = shapes_of(h.layout)
            padded = sh.dims.copy()
            padded[:, dims] = np.asarray(h.layout.block_shape, dtype=np.int64)[dims]
            if np.array_equal(padded, sh.dims):
                continue
            new = self.builder.buf()
            self.builder.emit(PerDevice.of_table(sh.ids, padded, lambda row, t=t, new=new, val=h.pad: Pad(
                0, src, src=bufs[t], dst=new, shape=row, value=val)))
            bufs[t] = new
            in_shapes[t] = ShapeView(sh.ids, padded)

    def emit_kernel(self, e: Eqn, bufs, outs, in_lay, in_shapes, out_lay, halo, src: str) -> None:
        """The op's local kernel, one instruction per class of devices that runs the same one."""
        op = get_op(e.op)
        kw = e.kw
        if not e.inputs and e.op == "constant":  # devices holding one block share its Literal
            self.builder.emit(by_block(self.devices, out_lay[0], lambda d: Literal(
                0, src, dst=outs[0], value=op.kernel(**kw, out_index=out_lay[0].indices(d))[0])))
            return
        out_shapes = [local_shapes(L) for L in out_lay]
        seen: dict = {}

        def make(d):
            ins = tuple(s[d] if s is not None else () for s in in_shapes)
            outs_d = tuple(s[d] for s in out_shapes)
            # a nullary op's block is where it sits: devices holding one block (one shared
            # index array per dim) share its instruction; a row block (halo) also by its window
            win = halo.local[d] if halo is not None else ()
            key = (ins, outs_d, win) if e.inputs else tuple(map(id, out_lay[0].indices(d)))
            if key not in seen:
                params = op.local_params(dict(kw), list(ins), list(outs_d))
                if halo is not None:  # a row block: the rows it reads, its edge padding and stride
                    params = op.window_params(params, list(ins), list(outs_d), dict(win))
                if not e.inputs:
                    params = {**params, "out_index": out_lay[0].indices(d)}
                seen[key] = Compute(0, src, op=e.op, inputs=tuple(bufs), outputs=outs, params=tuple(params.items()))
            return seen[key]

        if e.inputs and halo is None:  # the instruction depends on a device only through its local shapes
            laid = [L for L in in_lay if L is not None] + out_lay
            self.builder.emit(by_shape_class(self.devices, laid, make))
        elif not e.inputs:  # a nullary op's block is where it sits: one instruction per block
            self.builder.emit(by_block(self.devices, out_lay[0], make))
        else:
            self.builder.emit(make)

    def functorial(self, e: Eqn) -> bool:
        """Run ``e`` where its operands lie when one of them (or a result wanted so) has an exact
        layout no Sharding states and the op is functorial over what each device holds
        (``exact``): no communication, results keep their exact layouts. False otherwise."""
        ins = [self.copies[i][0].spec if isinstance(i, Value) else None for i in e.inputs]
        wanted = [self.exact_want.get(o) for o in e.outputs]
        if not e.inputs or not (any(isinstance(s, Layout) for s in ins) or any(w is not None for w in wanted)
                                or self.keeps_stripes(e, ins)):
            return False
        op = get_op(e.op)
        in_avals, out_avals = [i.aval for i in e.inputs], [o.aval for o in e.outputs]
        try:
            rules = op.rules(in_avals, out_avals, **e.kw)
        except Exception:
            return False
        lays = [layout_of(s, i.aval.shape) if s is not None else None for s, i in zip(ins, e.inputs)]
        for rule in rules:
            got = functorial_layouts(rule, lays, [a.shape for a in in_avals], [a.shape for a in out_avals])
            if got is None or any(w is not None and not L.same_as(w) for L, w in zip(got, wanted)):
                continue
            bufs = [self.copies[i][0].buf if isinstance(i, Value) else self.literal(i) for i in e.inputs]
            self.run_local(e, op, bufs, lays, got)
            return True
        return False

    def keeps_stripes(self, e: Eqn, ins) -> bool:
        """A reshape whose operand holds mesh axes its propagated result lost: a merge of dims
        sharded on a minor factor (seed 002), which no tensor-dim sharding states. Run where it
        lies (``functorial``), the result keeps the strided layout and the ops after it run on it
        where they are functorial, rather than gathering the merged dim here."""
        if e.op != "reshape" or not isinstance(ins[0], Sharding) or ins[0].unreduced:
            return False
        if not merges_sharded_dim(ins[0], e.inputs[0].aval.shape, e.outputs[0].aval.shape):
            return False  # every sharded dim survives whole: a Sharding states the result
        return mesh_axes(self.want(e.outputs[0])) < mesh_axes(ins[0])

    def run_local(self, e: Eqn, op, bufs, in_lay, out_lay) -> None:
        """``e``'s kernel on the blocks each device holds (layouts ``in_lay`` to ``out_lay``)."""
        src = self.source(e)
        in_shapes = [local_shapes(L) if L is not None else None for L in in_lay]
        out_shapes = [local_shapes(L) for L in out_lay]
        outs = self.builder.bufs(len(e.outputs))

        def make(d):  # once per class of devices with equal local shapes (by_shape_class)
            ins = tuple(s[d] if s is not None else tuple(i.aval.shape) for s, i in zip(in_shapes, e.inputs))
            outs_d = tuple(s[d] for s in out_shapes)
            params = op.local_params(dict(e.kw), list(ins), list(outs_d))
            return Compute(0, src, op=e.op, inputs=tuple(bufs), outputs=outs, params=tuple(params.items()))

        self.builder.emit(by_shape_class(self.devices, [L for L in in_lay if L is not None] + out_lay, make))
        for o, L, buf in zip(e.outputs, out_lay, outs):
            self.copies[o] = [Copy(L, buf)]
        # a kernel that blocks its sums by the block shapes is checked against itself run on each
        # block's operands (simshard.report.opcheck); a sum split over mesh axes (results left
        # pending over them) reassociates over those axes
        split = [axis_name(a) for L in out_lay if L.reduce_op in ("sum", "prod") for a in L.unreduced]
        floats = any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs)
        self.checkpoint(e, tuple(dict.fromkeys(split)) if floats else (), operands=tuple(HeldOperand(L) for L in in_lay))


def held_operands(e: Eqn, chosen: Candidate, in_lay) -> tuple[HeldOperand, ...]:
    """How each operand of ``e`` run as ``chosen`` is held when its kernel runs: laid out as
    chosen (``in_lay``, None for a literal), its dims that carry a sharded reduction factor padded
    to the block size with the reduction's identity (uneven or empty blocks then reduce right;
    padding never reaches a result, reduced dims are not in it)."""
    rule = chosen.rule
    red = {f for f in rule.of_kind(REDUCTION) if chosen.assignment.get(f)} if rule is not None else set()
    held = []
    for t, (i, L) in enumerate(zip(e.inputs, in_lay)):
        dims = tuple(k for k, fs in enumerate(rule.operands[t]) if set(fs) & red) if red and L is not None else ()
        held.append(HeldOperand(L, dims, REDUCE_OPS[rule.reduce_op].identity(i.aval.dtype) if dims else None))
    return tuple(held)


def reassociated(e: Eqn, rule, assignment, in_sh, combined=()) -> tuple[str, ...]:
    """Mesh axes over which ``e`` as partitioned adds (or multiplies) in another order than the op
    run whole: its sharded sum-like reduction factors, pending operands it computes on (a layout op
    on contributions moves elements only), and pending sums its operand reshards combine
    (``combined``: a sum over two axes may run as a reduce-scatter then an all-reduce, grouped
    otherwise than the contributions assembled in device order). Empty for max / min and for
    exact dtypes."""
    if not any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs):
        return ()
    axes: list[str] = list(combined)
    if rule is not None and rule.reduce_op in ("sum", "avg", "prod"):
        for f in rule.of_kind(REDUCTION):
            axes += [axis_name(a) for a in (assignment or {}).get(f, ())]
    if e.op not in LAYOUT and e.op not in ("pad", "dynamic_slice", "select", "concatenate"):
        for s in in_sh:
            if s is not None and s.unreduced and s.reduce_op in ("sum", "avg", "prod"):
                axes += [axis_name(a) for a in s.unreduced]
    return tuple(dict.fromkeys(axes))


def merges_sharded_dim(s: Sharding, shape, new_shape) -> bool:
    """Whether a reshape of ``shape`` to ``new_shape`` merges (or splits) a dim that ``s`` shards
    over two or more devices, rather than keeping it whole at the same place of the row-major order."""
    kept = {(int(np.prod(new_shape[:j])), n) for j, n in enumerate(new_shape)}
    return any((int(np.prod(shape[:k])), shape[k]) not in kept
               for k, d in enumerate(s.dims) if any(s.mesh.axis_size(a) > 1 for a in d.axes))


def mesh_axes(s: Sharding) -> int:
    """How many mesh axes (or sub-axes) of two or more devices shard the dims of ``s``: a size-1
    axis splits nothing (every device holds the whole dim), so a result that drops one, as
    propagation may, loses no stripes."""
    return sum(1 for d in s.dims for a in d.axes if s.mesh.axis_size(a) > 1)


def axis_name(a) -> str:
    """A mesh axis (or sub-axis) as a checkpoint names it."""
    return a if isinstance(a, str) else str(a).replace('"', "")
