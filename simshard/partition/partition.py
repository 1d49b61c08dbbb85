"""``partition(program)``: a sharded Program becomes one SPMD Schedule per device.

Ops are visited in program order. For each op:

1. **Choose how it runs.** Candidate assignments of mesh axes to the rule's factors come from
   the operands' current shardings and the results' wanted (propagated) shardings
   (``assign.candidates``); each is priced in bytes: the reshards its operands need plus the
   reshard (or reduction) of its results to their wanted shardings. The cheapest wins (ties:
   smaller local results, then the earlier candidate). Every rule of the op is tried.
2. **Pending operands.** A pending (unreduced) operand stays pending when the op is linear in it
   (``linear.pending_ok``): the op runs on contributions and its result is pending too (delayed
   reduction); otherwise, or when reducing first is cheaper, the operand's reshard reduces it
   (reduce-scatter when the op wants those axes on a dim, all-reduce otherwise).
3. **Reshard the operands** with the planner (``plan_reshard``), from whichever copy of the value
   is cheapest to move (every reshard made is kept as a further copy for later users).
4. **Run the local kernel** (``Compute`` with the op's ``local_params``; nullary ops get
   ``out_index``). Operand dims carrying a sharded reduction factor are padded to the layout's
   block size with the reduction's identity, so uneven or empty blocks reduce correctly; padding
   never reaches a result (reduced dims are not in the result).
5. Sharded reduction factors leave the result **pending** over their axes; it is reduced when a
   consumer needs it reduced (all-reduce, or reduce-scatter when the consumer wants the value
   sharded on those axes), or at the end for outputs.

``sharding_constraint`` / ``reshard`` reshard eagerly to their sharding; ``propagation_barrier``
is an alias. Manual regions (``shard_map``) are inlined: their operands resharded to the region's
in_specs, the body's ops run as ``Compute`` on local blocks and its collectives become the
schedule's collectives over groups of the named mesh axes (``regions``). Values on another mesh
are resharded across meshes with the bytes they need. Outputs are resharded to the program's
out_shardings (or the propagated result shardings). Dead buffers are freed after their last use.

Shardings: ``partition`` needs every value sharded. A program with no shardings at all (just
traced) is propagated first with ``ss.propagate`` (default strategy); a program where some but
not all values have a sharding is refused, naming them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShardingError
from ..sharding.mesh import Mesh
from ..ops import get_op
from ..ops.check import project
from ..ops.factors import REDUCTION
from ..ir.program import Eqn, Literal as PLiteral, Program, Value
from ..sharding.reduce_ops import REDUCE_OPS
from ..sharding.dims import Sharding
from ..sharding.layout_model import Layout
from ..sharding.placements import DTensorSpec
from .assign import candidates
from .builder import PerDevice, ScheduleBuilder
from .exact import functorial_layouts
from .halo import Halo, apply_halo, halo_choices
from .linear import pending_ok
from .emit import emit_plan
from .plan import ShapeView, by_block, by_shape_class, largest_block, layout_of, local_shapes, shapes_of
from .loops import emit_scan, emit_switch, emit_while
from .regions import inline_region
from .reshard import _plain, plan_reshard, translate
from .linear import LAYOUT
from .schedule import Checkpoint, Compute, Literal, Pad, SpmdProgram

IDENTITY_OPS = {"propagation_barrier", "stop_gradient"}
STRUCTURED = {"scan": emit_scan, "while": emit_while, "switch": emit_switch}  # ops partitioned by their bodies
TARGET_OPS = {"sharding_constraint", "reshard"}


def partition(program: Program) -> SpmdProgram:
    """One Schedule per device for ``program`` (propagated first when it has no shardings)."""
    if not program.shardings:
        from ..propagate import propagate

        program = propagate(program)
    missing = [v for v in program.values() if v not in program.shardings]
    if missing:
        names = ", ".join(program._name(v) for v in missing[:8])
        raise ShardingError(
            "not-propagated",
            f"partition needs a sharding for every value; {len(missing)} have none ({names}). "
            "Run ss.propagate(program) first.",
        )
    return _Partitioner(program).run()


@dataclass
class _Mat:
    spec: Sharding
    buf: int


class _Partitioner:
    Mat = _Mat  # a copy of a value: loops.py makes them without importing this module

    def sub(self, program: Program) -> "_Partitioner":
        """A partitioner for a body (a loop's, a branch's) on this one's devices and buffer numbers."""
        inner = _Partitioner(program)
        inner.b = ScheduleBuilder(self.devices)
        inner.b._next_buf = self.b._next_buf
        return inner

    def __init__(self, program: Program):
        self.p = program
        devs = None
        for s in program.shardings.values():
            d = frozenset(s.mesh.device_ids)
            if devs is None:
                devs = d
            elif d != devs:
                raise ShardingError("wrong-mesh", "all meshes of a program must view the same devices")
        self.devices = tuple(sorted(devs or ()))
        self.b = ScheduleBuilder(self.devices)
        self.mats: dict[Value, list[_Mat]] = {}
        self.literals: dict[tuple, int] = {}
        self.checkpoints: list[Checkpoint] = []
        self.at = -1  # index of the program eqn being partitioned
        self.memo: dict = {}  # op signature -> chosen (rule, assignment, operand / result shardings)
        self.users: dict[Value, list[Eqn]] = {}
        for e in program.eqns:
            for i in e.inputs:
                if isinstance(i, Value):
                    self.users.setdefault(i, []).append(e)
        self.is_output = set(program.outputs)
        # the outputs someone reads: a loop body's outputs but the residuals nobody stacks
        # (loops.emit_scan narrows it), so that a scan nested in it skips those too
        self.read_outputs = self.is_output
        self.out_targets = self._out_targets()
        self.wanted: dict[Value, Sharding] = {}
        for v, t in zip(program.outputs, self.out_targets):
            self.wanted.setdefault(v, t)
        # outputs whose out sharding is a placement list no Sharding states: its exact layout
        self.exact_out = {k: layout_of(s, v.aval.shape) for k, (v, s) in enumerate(zip(program.outputs, program.out_shardings))
                          if isinstance(s, DTensorSpec)}
        self.exact_want = {program.outputs[k]: L for k, L in self.exact_out.items()}

    # -- values --------------------------------------------------------------------------------
    def target(self, v: Value) -> Sharding:
        return _plain(self.p.shardings[v])

    def want(self, v: Value) -> Sharding:
        """Where ``v`` should end up: its output sharding when it is an output, else its own."""
        return self.wanted.get(v) or self.target(v)

    def _out_targets(self) -> list[Sharding]:
        from ..propagate.driver import propagation_info

        info = propagation_info(self.p)
        out = []
        for k, v in enumerate(self.p.outputs):
            s = self.p.out_shardings[k] if k < len(self.p.out_shardings) else None
            if s is None and info is not None and k < len(info.result_shardings):
                s = info.result_shardings[k]
            if s is None:
                s = self.p.shardings[v]
            if isinstance(s, DTensorSpec):  # how the op rules see it; self.exact_out has its layout
                s = self.p.shardings[v]
            out.append(_plain(s))
        return out

    def name(self, v) -> str:
        return self.p._name(v)

    def source(self, e: Eqn) -> str:
        """How instructions name the op they come from: its results and the op (``%5 dot_general``;
        an op with many results, a scan's, as its first and last: ``%8, ... %90 scan``)."""
        names = [self.name(o) for o in e.outputs]
        shown = ", ".join(names) if len(names) <= 4 else f"{names[0]}, ... {names[-1]}"
        return f"{shown} {e.op}"

    def plan(self, v: Value, spec: Sharding, m: _Mat):
        return plan_reshard(m.spec, spec, v.aval.shape, v.aval.dtype)

    def cost(self, v: Value, spec: Sharding) -> int:
        return min(self.plan(v, spec, m).bytes for m in self.mats[v])

    def get(self, v: Value, spec: Sharding, why: str, keep: bool = True) -> int:
        """A buffer holding ``v`` laid out as ``spec`` (resharding the cheapest copy if needed),
        kept as a further copy of ``v`` unless ``keep`` is False (a halo layout holds only the
        rows an op reads, not all of ``v``: no later reshard may start from it)."""
        best = None
        for m in self.mats[v]:
            if type(m.spec) is type(spec) and m.spec == spec:  # a Layout compares only with a Layout
                return m.buf
            pl = self.plan(v, spec, m)
            if best is None or pl.bytes < best[0].bytes:
                best = (pl, m)
        pl, m = best
        if not pl.steps:
            if keep:
                self.mats[v].append(_Mat(spec, m.buf))
            return m.buf
        buf = emit_plan(pl, self.b, m.buf, source=f"reshard {self.name(v)} for {why}")
        if keep:
            self.mats[v].append(_Mat(spec, buf))
        return buf

    def primary(self, v: Value) -> Sharding:
        """The tensor-dim sharding ``v`` is held as (its propagated one when only an exact layout
        holds it): what the op rules start from."""
        for m in self.mats[v]:
            if isinstance(m.spec, Sharding):
                return m.spec
        return self.target(v)

    def literal(self, lit: PLiteral) -> int:
        key = (_lit_key(lit.value), str(lit.aval.dtype))
        if key not in self.literals:
            buf = self.b.buf()
            self.b.emit_same(Literal(0, f"literal {lit!r}", dst=buf, value=lit.value))
            self.literals[key] = buf
        return self.literals[key]

    # -- driver --------------------------------------------------------------------------------
    def run(self) -> SpmdProgram:
        ins, in_specs = [], []
        for k, v in enumerate(self.p.inputs):
            buf = self.b.buf()
            given = self.p.in_shardings[k] if k < len(self.p.in_shardings) else None
            if isinstance(given, DTensorSpec):  # held exactly as the placements lay it out
                self.mats[v] = [_Mat(layout_of(given, v.aval.shape), buf)]
                in_specs.append(given)
            else:
                self.mats[v] = [_Mat(self.target(v), buf)]
                in_specs.append(self.target(v))
            ins.append(buf)
        for k, e in enumerate(self.p.eqns):
            self.at = k
            self.eqn(e)
            self.checkpoint(e)
        outs, out_specs = [], []
        for k, (v, t) in enumerate(zip(self.p.outputs, self.out_targets)):
            if k in self.exact_out:
                outs.append(self.get(v, self.exact_out[k], f"output {k}"))
                out_specs.append(self.p.out_shardings[k])
            else:
                outs.append(self.get(v, t, f"output {k}"))
                out_specs.append(t)
        schedules = self.b.finish(ins, outs)
        return SpmdProgram(self.p, schedules, tuple(in_specs), tuple(out_specs), tuple(self.checkpoints))

    def checkpoint(self, e: Eqn, reassociated: tuple[str, ...] = ()) -> None:
        """Record where each result of ``e`` lives right after ``e`` ran (its first copy)."""
        if self.checkpoints and self.checkpoints[-1].eqn == self.at:
            return  # recorded by _emit, with what it reassociated
        src = self.source(e)
        for k, o in enumerate(e.outputs):
            if o in self.mats:
                m = self.mats[o][0]
                self.checkpoints.append(Checkpoint(self.at, k, m.buf, m.spec, src, reassociated))

    def eqn(self, e: Eqn) -> None:
        if e.op in STRUCTURED:
            STRUCTURED[e.op](self, e)
            return
        if e.op == "shard_map":
            for o, (spec, buf) in inline_region(self, e).items():
                self.mats[o] = [_Mat(spec, buf)]
            return
        if get_op(e.op).region_only:
            raise ShardingError("manual-op-outside-region", f"{e.op} names mesh axes and only runs inside shard_map")
        if e.op in IDENTITY_OPS and isinstance(e.inputs[0], Value):
            self.mats[e.outputs[0]] = list(self.mats[e.inputs[0]])
            return
        if e.op in TARGET_OPS and isinstance(e.inputs[0], Value):
            spec = e.kw.get("sharding")
            if isinstance(spec, DTensorSpec):  # a layout only placements state: held exactly
                spec = layout_of(spec, e.outputs[0].aval.shape)
            else:
                spec = _plain(spec) if isinstance(spec, Sharding) else self.target(e.outputs[0])
            v = e.inputs[0]
            buf = self.get(v, spec, f"{e.op} {self.name(e.outputs[0])}")
            self.mats[e.outputs[0]] = [_Mat(spec, buf)]
            return
        self.generic(e)

    # -- generic ops ---------------------------------------------------------------------------
    def _signature(self, e: Eqn):
        """What the choice for ``e`` depends on: op, params, avals, every copy of each operand,
        where the results should go. Identical blocks of a model share one pricing."""
        params = []
        for k, v in e.params:
            try:
                hash(v)
                params.append((k, v))
            except TypeError:
                params.append((k, ("id", id(v))))
        ins = tuple(
            (i.aval, tuple(_spec_key(m.spec) for m in self.mats[i])) if isinstance(i, Value) else ("lit", i.aval, _lit_key(i.value))
            for i in e.inputs
        )
        return (e.op, tuple(params), ins, tuple((o.aval, self.want(o)) for o in e.outputs))

    def generic(self, e: Eqn) -> None:
        if self.functorial(e):
            return
        try:
            key = self._signature(e)
        except TypeError:
            key = None
        if key is not None and key in self.memo:
            rule, A, in_sh, out_sh, halo = self.memo[key]
            self._emit(e, rule, A, in_sh, out_sh, out_sh[0].mesh, halo)
            return
        op = get_op(e.op)
        kw = e.kw
        in_avals = [i.aval for i in e.inputs]
        out_avals = [o.aval for o in e.outputs]
        in_shapes = [a.shape for a in in_avals]
        out_shapes = [a.shape for a in out_avals]
        mesh = self.target(e.outputs[0]).mesh
        is_val = [isinstance(i, Value) for i in e.inputs]
        try:
            rules = op.rules(in_avals, out_avals, **kw)
        except Exception:
            rules = []
        cur = [self.primary(i) if isinstance(i, Value) else None for i in e.inputs]
        pend = [bool(c is not None and c.unreduced) for c in cur]
        variants = [None]
        if any(pend):
            ops = {c.reduce_op for c, p in zip(cur, pend) if p}
            axes = {frozenset(c.unreduced) for c, p in zip(cur, pend) if p}
            meshes = {c.mesh for c, p in zip(cur, pend) if p}
            if len(ops) == 1 and len(axes) == 1 and meshes == {mesh}:
                kinds = ["pending" if p else ("value" if isinstance(i, Value) else "literal") for i, p in zip(e.inputs, pend)]
                lit_params = {f"__literal{k}": i.value for k, i in enumerate(e.inputs) if isinstance(i, PLiteral)}
                which = pending_ok(e.op, {**kw, **lit_params}, kinds, next(iter(ops)))
                if which is not None:  # after "reduce first": a delayed reduction must be strictly cheaper
                    variants.append((which, next(iter(ops)), tuple(next(iter(axes)))))
        best = None
        windows = _windows(op, in_avals, out_avals, kw)
        for ri, rule in enumerate(rules):
            weights = [_nbytes(a) for a in in_avals] + [_nbytes(a) for a in out_avals]
            op_specs = [self._on(c, mesh) for c in cur]
            res_specs = [self._on(self.want(o), mesh) for o in e.outputs]
            halos = halo_choices(windows, op_specs, res_specs) if windows else []
            for var in variants:
                reserved = var[2] if var else ()
                for A in candidates(rule, e.op, in_shapes, out_shapes, mesh, op_specs, res_specs, weights, reserved):
                    for choice in [None] + halos:
                        cand = self._price(e, rule, A, var, mesh, in_shapes, out_shapes, is_val, pend,
                                           (windows, choice, reserved) if choice else None)
                        if cand is not None and (best is None or cand[0] < best[0]):
                            best = cand
        if best is None:  # no usable rule: everything replicated
            in_sh = tuple(Sharding.replicated_on(mesh, len(s)) for s in in_shapes)
            out_sh = tuple(Sharding.replicated_on(mesh, len(s)) for s in out_shapes)
            best = ((0,), None, {}, in_sh, out_sh, None)
        _, rule, A, in_sh, out_sh, halo = best
        if key is not None:
            self.memo[key] = (rule, A, in_sh, out_sh, halo)
        self._emit(e, rule, A, in_sh, out_sh, mesh, halo)

    def functorial(self, e: Eqn) -> bool:
        """Run ``e`` where its operands lie when one of them (or a result wanted so) has an exact
        layout no Sharding states and the op is functorial over what each device holds
        (``exact``): no communication, results keep their exact layouts. False otherwise."""
        ins = [self.mats[i][0].spec if isinstance(i, Value) else None for i in e.inputs]
        wanted = [self.exact_want.get(o) for o in e.outputs]
        if not e.inputs or not (any(isinstance(s, Layout) for s in ins) or any(w is not None for w in wanted)):
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
            self._run_local(e, op, rule, [self.mats[i][0].buf if isinstance(i, Value) else self.literal(i) for i in e.inputs],
                            lays, got)
            return True
        return False

    def _run_local(self, e: Eqn, op, rule, bufs, in_lay, out_lay) -> None:
        src = self.source(e)
        in_shapes = [local_shapes(L) if L is not None else None for L in in_lay]
        out_shapes = [local_shapes(L) for L in out_lay]
        outs = self.b.bufs(len(e.outputs))

        def make(d):  # once per class of devices with equal local shapes (by_shape_class)
            ins = tuple(s[d] if s is not None else tuple(i.aval.shape) for s, i in zip(in_shapes, e.inputs))
            outs_d = tuple(s[d] for s in out_shapes)
            params = op.local_params(dict(e.kw), list(ins), list(outs_d))
            return Compute(0, src, op=e.op, inputs=tuple(bufs), outputs=outs, params=tuple(params.items()))

        self.b.emit(by_shape_class(self.devices, [L for L in in_lay if L is not None] + out_lay, make))
        for o, L, buf in zip(e.outputs, out_lay, outs):
            self.mats[o] = [_Mat(L, buf)]
        # a BLAS kernel orders its sums by the block shapes: every axis the blocks vary over may
        # reassociate (the op rules' pass-through factors otherwise leave the arithmetic alone)
        axes = tuple(in_lay[0].mesh.axis_names if op.shape_dependent_sums else ())
        self.checkpoint(e, axes if any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs) else ())

    def _on(self, spec: Sharding | None, mesh: Mesh) -> Sharding | None:
        if spec is None:
            return None
        s = Sharding(spec.mesh, spec.dims)  # without pending axes: projection looks at dims only
        if s.mesh == mesh:
            return s
        return translate(s, mesh)

    def _price(self, e, rule, A, var, mesh, in_shapes, out_shapes, is_val, pend, halo_choice=None):
        """(cost key, rule, A, operand specs, result shardings, halo) of running ``e`` with ``A``
        (and ``halo_choice``: windows split over axes, ``halo``), or None when it cannot."""
        try:
            in_sh, out_sh = project(rule, in_shapes, out_shapes, mesh, A)
        except ValueError:
            return None
        in_sh, out_sh = list(in_sh), list(out_sh)
        if var:
            which, rop, axes = var
            if out_sh[0].unreduced and rule.reduce_op != rop:
                return None
            for t, i in enumerate(e.inputs):
                if is_val[t] and which[t]:
                    in_sh[t] = _with_pending(in_sh[t], axes, rop)
            out_sh = [_with_pending(s, axes, rop, keep=True) for s in out_sh]
        halo = None
        if halo_choice is not None:
            windows, choice, reserved = halo_choice
            got = apply_halo(windows, choice, in_sh, out_sh, in_shapes, out_shapes, reserved)
            if got is None:
                return None
            in_sh, out_sh, halo = list(got[0]), list(got[1]), got[2]
        cost = 0
        for t, i in enumerate(e.inputs):
            if is_val[t]:
                cost += self.cost(i, in_sh[t])
        res_elems = 0
        for o, s in zip(e.outputs, out_sh):
            cost += self.settle_cost(o, s)
            res_elems += largest_block(layout_of(s, o.aval.shape))
        in_elems = sum(largest_block(layout_of(s, sh)) for s, sh, v in zip(in_sh, in_shapes, is_val) if v)
        return ((cost, res_elems, in_elems), rule, A, tuple(in_sh), tuple(out_sh), halo)

    def settle_cost(self, v: Value, s: Sharding, depth: int = 4) -> int:
        """Bytes to bring a result computed as ``s`` where it is wanted. A pending result whose only
        user is linear in it may instead be reduced after that user (delayed reduction): the
        estimate follows such a chain a few ops ahead and takes the cheapest point to reduce."""
        now = plan_reshard(s, self.want(v), v.aval.shape, v.aval.dtype).bytes
        users = self.users.get(v, [])
        if not s.unreduced or depth == 0 or v in self.is_output or len(users) != 1:
            return now
        e = users[0]
        if len(e.outputs) != 1 or e.op in ("shard_map",) or e.op in TARGET_OPS:
            return now
        kinds = ["pending" if i == v else ("value" if isinstance(i, Value) else "literal") for i in e.inputs]
        lit = {f"__literal{k}": i.value for k, i in enumerate(e.inputs) if isinstance(i, PLiteral)}
        if pending_ok(e.op, {**e.kw, **lit}, kinds, s.reduce_op) is None:
            return now
        o = e.outputs[0]
        w = self.want(o)
        if w.mesh != s.mesh or {a.name for a in s.unreduced} & {a.name for d in w.dims for a in d.axes}:
            return now
        later = self.settle_cost(o, _with_pending(w, tuple(s.unreduced), s.reduce_op), depth - 1)
        return min(now, later)

    def _emit(self, e: Eqn, rule, A, in_sh, out_sh, mesh, halo: Halo | None = None) -> None:
        op = get_op(e.op)
        src = self.source(e)
        bufs = []
        combined: list[str] = []  # pending sums an operand reshard combines here (in steps, per axis)
        for t, i in enumerate(e.inputs):
            if isinstance(i, Value):
                held = self.mats[i][0].spec if i in self.mats else None
                if held is not None and held.reduce_op in ("sum", "avg", "prod"):
                    combined += [_axis(a) for a in held.unreduced if a not in in_sh[t].unreduced]
                bufs.append(self.get(i, in_sh[t], src, keep=halo is None or t != halo.windows[0].operand))
            else:
                bufs.append(self.literal(i))
        in_lay = [layout_of(s, i.aval.shape) if isinstance(i, Value) else None for s, i in zip(in_sh, e.inputs)]
        in_shapes = [local_shapes(L) if L is not None else None for L in in_lay]  # per operand: device -> shape
        # pad dims that carry a sharded reduction factor up to the block size with the identity
        if rule is not None:
            red = {f for f in rule.of_kind(REDUCTION) if A.get(f)}
            if red:
                ident_op = REDUCE_OPS[rule.reduce_op]
                for t, i in enumerate(e.inputs):
                    if not isinstance(i, Value):
                        continue
                    dims = [k for k, fs in enumerate(rule.operands[t]) if set(fs) & red]
                    if not dims:
                        continue
                    sh = shapes_of(in_lay[t])
                    padded = sh.dims.copy()
                    padded[:, dims] = np.asarray(in_lay[t].block_shape, dtype=np.int64)[dims]
                    if np.array_equal(padded, sh.dims):
                        continue
                    new = self.b.buf()
                    val = ident_op.identity(i.aval.dtype)
                    self.b.emit(PerDevice.of_table(sh.ids, padded, lambda row, t=t, new=new, val=val: Pad(
                        0, src, src=bufs[t], dst=new, shape=row, value=val)))
                    bufs[t] = new
                    in_shapes[t] = ShapeView(sh.ids, padded)
        out_lay = [layout_of(s, o.aval.shape) for s, o in zip(out_sh, e.outputs)]
        outs = self.b.bufs(len(e.outputs))
        kw = e.kw
        if not e.inputs and e.op == "constant":  # devices holding one block share its Literal
            self.b.emit(by_block(self.devices, out_lay[0], lambda d: Literal(
                0, src, dst=outs[0], value=op.kernel(**kw, out_index=out_lay[0].indices(d))[0])))
        else:
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
                self.b.emit(by_shape_class(self.devices, laid, make))
            elif not e.inputs:  # a nullary op's block is where it sits: one instruction per block
                self.b.emit(by_block(self.devices, out_lay[0], make))
            else:
                self.b.emit(make)
        for o, s, buf in zip(e.outputs, out_sh, outs):
            self.mats[o] = [_Mat(s, buf)]
        self.checkpoint(e, _reassociated(e, rule, A, in_sh, combined))


def _windows(op, in_avals, out_avals, kw) -> tuple:
    """The op's sliding windows (``ops.windows``), or () when it has none (or none for these shapes)."""
    if op.windows is None:
        return ()
    try:
        return tuple(op.windows(in_avals, out_avals, **kw))
    except Exception:  # params the op's own checks refuse: no halo path
        return ()


def _reassociated(e: Eqn, rule, A, in_sh, combined=()) -> tuple[str, ...]:
    """Mesh axes over which ``e`` as partitioned adds (or multiplies) in another order than the op
    run whole: its sharded sum-like reduction factors, every sharded factor of an op whose kernel
    sums by its operands' shapes (a BLAS contraction), pending operands it computes on (a layout op
    on contributions moves elements only), and pending sums its operand reshards combine
    (``combined``: a sum over two axes may run as a reduce-scatter then an all-reduce, grouped
    otherwise than the contributions assembled in device order). Empty for max / min and for
    exact dtypes."""
    if not any(np.dtype(o.aval.dtype).kind in "fc" for o in e.outputs):
        return ()
    axes: list[str] = list(combined)
    if rule is not None and rule.reduce_op in ("sum", "avg", "prod"):
        for f in rule.of_kind(REDUCTION):
            axes += [_axis(a) for a in (A or {}).get(f, ())]
    if get_op(e.op).shape_dependent_sums:  # its kernel orders its sums by the local shapes
        axes += [_axis(a) for f in (A or {}) for a in A[f]]
    if e.op not in LAYOUT and e.op not in ("pad", "dynamic_slice", "select", "concatenate"):
        for s in in_sh:
            if s is not None and s.unreduced and s.reduce_op in ("sum", "avg", "prod"):
                axes += [_axis(a) for a in s.unreduced]
    return tuple(dict.fromkeys(axes))


def _axis(a) -> str:
    return a if isinstance(a, str) else str(a).replace('"', "")


def _with_pending(s: Sharding, axes, op: str, keep: bool = False) -> Sharding:
    unr = tuple(s.unreduced) + tuple(a for a in axes if a not in s.unreduced) if keep else tuple(axes)
    return Sharding(s.mesh, s.dims, (), unr, op)


def _spec_key(spec):
    """A copy's spec as a memo key: a Layout (unhashable: it compares by content) by identity; the
    partitioner holds every Layout it keys on for its whole run."""
    return ("layout", id(spec)) if isinstance(spec, Layout) else spec


def _lit_key(v):
    a = np.asarray(v)
    return (a.dtype.str, a.shape, a.tobytes(), type(v).__name__)


def _nbytes(a) -> int:
    return int(np.prod(a.shape, dtype=np.int64)) * a.dtype.itemsize
