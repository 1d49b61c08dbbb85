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

The partitioner's jobs live in modules of their own: ``copies`` (getting a value in a sharding),
``choose`` (pricing candidates), ``run_op`` (emitting an op as chosen); ``loops`` and
``regions`` partition control flow and manual regions through the ``protocol.Partitioner``.

Shardings: ``partition`` needs every value sharded. A program with no shardings at all (just
traced) is propagated first with ``ss.propagate`` (default strategy); a program where some but
not all values have a sharding is refused, naming them.
"""

from __future__ import annotations

from ..errors import ShardingError
from ..ir.program import Eqn, Program, Value
from ..ops import get_op
from ..propagate import propagate
from ..propagate.driver import propagation_info
from ..sharding.dims import Sharding
from ..sharding.placements import DTensorSpec
from ..sharding.stating import placements_for
from ..spmd import Checkpoint, SpmdProgram
from .builder import ScheduleBuilder
from .choose import OpChoice
from .copies import TARGET_OPS, Copy, ValueCopies
from .loops import emit_scan, emit_switch, emit_while
from .regions import inline_region
from .reshard import plain
from ..sharding.layout import Layout
from .reshard.plan import block_size, layout_of
from .run_op import OpEmitter

IDENTITY_OPS = {"propagation_barrier", "stop_gradient"}
STRUCTURED = {"scan": emit_scan, "while": emit_while, "switch": emit_switch}  # ops partitioned by their bodies


def partition(program: Program) -> SpmdProgram:
    """One Schedule per device for ``program`` (propagated first when it has no shardings)."""
    if not program.shardings:
        program = propagate(program)
    missing = [v for v in program.values() if v not in program.shardings]
    if missing:
        names = ", ".join(program.name_of(v) for v in missing[:8])
        raise ShardingError(
            "not-propagated",
            f"partition needs a sharding for every value; {len(missing)} have none ({names}). "
            "Run ss.propagate(program) first.",
        )
    return _Partitioner(program).run()


def program_devices(program: Program) -> tuple[int, ...]:
    """The devices a program runs on: those of its widest mesh. Every other mesh views the same
    devices or some of them (a value that ends on fewer devices, the FHE seed's fewer
    ciphertexts: the others hold none of it)."""
    meshes = {s.mesh for s in program.shardings.values()}
    if len(meshes) == 1 and next(iter(meshes)).in_order:  # one mesh, its ids sorted: no set or sort of them
        return next(iter(meshes)).device_ids
    sets = {frozenset(m.device_ids) for m in meshes}  # each mesh once
    widest = max(sets, key=len, default=frozenset())
    if any(not d <= widest for d in sets):
        raise ShardingError("wrong-mesh", "all meshes of a program must view the same devices (or some of them)")
    return tuple(sorted(widest))


class _Partitioner(ValueCopies, OpChoice, OpEmitter):
    """Partitions one program (or a body of one, ``sub``) op by op into a ``ScheduleBuilder``."""

    def __init__(self, program: Program, builder: ScheduleBuilder | None = None):
        self.program = program
        self.devices = program_devices(program)
        self.builder = builder if builder is not None else ScheduleBuilder(self.devices)
        self.copies: dict[Value, list[Copy]] = {}
        self.literals: dict[tuple, int] = {}
        self.checkpoints: list[Checkpoint] = []
        self.eqn_index = -1  # index of the program eqn being partitioned
        self.memo: dict = {}  # op signature -> the chosen Candidate
        self.users: dict[Value, list[Eqn]] = {}
        for e in program.eqns:
            for i in e.inputs:
                if isinstance(i, Value):
                    self.users.setdefault(i, []).append(e)
        self.is_output = set(program.outputs)
        # the outputs someone reads: a loop body's outputs but the residuals nobody stacks
        # (loops.emit_scan narrows it), so that a scan nested in it skips those too
        self.read_outputs = self.is_output
        self.out_targets = self.output_targets()
        self.wanted: dict[Value, Sharding] = {}
        for v, t in zip(program.outputs, self.out_targets):
            self.wanted.setdefault(v, t)
        # outputs whose out sharding is a placement list no Sharding states: its exact layout
        self.exact_out = {k: layout_of(s, v.aval.shape) for k, (v, s) in enumerate(zip(program.outputs, program.out_shardings))
                          if isinstance(s, DTensorSpec)}
        self.exact_want = {program.outputs[k]: L for k, L in self.exact_out.items()}

    def sub(self, program: Program) -> "_Partitioner":
        """A partitioner for a body (a loop's, a branch's) on this one's devices and buffer
        numbers (its builder shares this one's counter)."""
        return _Partitioner(program, ScheduleBuilder(self.devices, self.builder.numbers))

    def output_targets(self) -> list[Sharding]:
        """Where each program output goes: its out sharding, else the propagated result sharding."""
        info = propagation_info(self.program)
        out = []
        for k, v in enumerate(self.program.outputs):
            s = self.program.out_shardings[k] if k < len(self.program.out_shardings) else None
            if s is None and info is not None and k < len(info.result_shardings):
                s = info.result_shardings[k]
            if s is None:
                s = self.program.shardings[v]
            if isinstance(s, DTensorSpec):  # how the op rules see it; self.exact_out has its layout
                s = self.program.shardings[v]
            out.append(plain(s))
        return out

    def name(self, v) -> str:
        """``v``'s name in the program's listing (``%5``)."""
        return self.program.name_of(v)

    def source(self, e: Eqn) -> str:
        """How instructions name the op they come from: its results and the op (``%5 dot_general``;
        an op with many results, a scan's, as its first and last: ``%8, ... %90 scan``)."""
        names = [self.name(o) for o in e.outputs]
        shown = ", ".join(names) if len(names) <= 4 else f"{names[0]}, ... {names[-1]}"
        return f"{shown} {e.op}"

    # -- driver --------------------------------------------------------------------------------
    def run(self) -> SpmdProgram:
        """Partition the whole program: its inputs placed, every op, its outputs resharded."""
        ins, in_specs = [], []
        for k, v in enumerate(self.program.inputs):
            buf = self.builder.buf()
            given = self.program.in_shardings[k] if k < len(self.program.in_shardings) else None
            if isinstance(given, DTensorSpec):  # held exactly as the placements lay it out
                self.copies[v] = [Copy(layout_of(given, v.aval.shape), buf)]
                in_specs.append(given)
            else:
                self.copies[v] = [Copy(self.target(v), buf)]
                in_specs.append(self.target(v))
            ins.append(buf)
        for k, e in enumerate(self.program.eqns):
            self.eqn_index = k
            self.eqn(e)
            self.checkpoint(e)
        outs, out_specs = [], []
        for k, (v, t) in enumerate(zip(self.program.outputs, self.out_targets)):
            kept = self.kept_exact(k, v, t)
            if k in self.exact_out:
                outs.append(self.get(v, self.exact_out[k], f"output {k}"))
                out_specs.append(self.program.out_shardings[k])
            elif kept is not None:  # left as its ops left it: a strided layout (seed 002), as placements
                outs.append(self.copies[v][0].buf)
                out_specs.append(placements_for(kept) or kept)
            else:
                outs.append(self.get(v, t, f"output {k}"))
                out_specs.append(t)
        schedules = self.builder.finish(ins, outs)
        return SpmdProgram(self.program, schedules, tuple(in_specs), tuple(out_specs), tuple(self.checkpoints))

    def kept_exact(self, k: int, v: Value, target: Sharding) -> Layout | None:
        """The exact layout output ``k`` is held in when nobody asked for another and it takes no
        more memory on any device than ``target`` (its propagated sharding) would: the strided
        layout a flatten's stripes keep through the ops after it (seed 002), left where it is
        rather than gathered to the sharding propagation could state. None otherwise."""
        given = self.program.out_shardings[k] if k < len(self.program.out_shardings) else None
        if given is not None or v not in self.copies or v in self.program.inputs:
            return None
        held = self.copies[v][0].spec
        if not isinstance(held, Layout) or held.unreduced:
            return None
        want = layout_of(target, v.aval.shape)
        if any(block_size(held, d) > block_size(want, d) for d in self.devices):
            return None
        return held

    def checkpoint(self, e: Eqn, reassociated: tuple[str, ...] = (), body: tuple = (), operands: tuple = ()) -> None:
        """Record where each result of ``e`` lives right after ``e`` ran (its first copy); ``body``:
        a loop's body's own checkpoints; ``operands``: how its local kernel held each operand."""
        if self.checkpoints and self.checkpoints[-1].eqn == self.eqn_index:
            return  # recorded by emit_op, with what it reassociated
        src = self.source(e)
        for k, o in enumerate(e.outputs):
            if o in self.copies:
                copy = self.copies[o][0]
                self.checkpoints.append(Checkpoint(self.eqn_index, k, copy.buf, copy.spec, src, reassociated,
                                                   body, operands))

    def eqn(self, e: Eqn) -> None:
        """Partition one op: control flow and regions by their bodies, identities and reshards
        directly, any other op by its rules (``generic``)."""
        if e.op in STRUCTURED:
            STRUCTURED[e.op](self, e)
            return
        if e.op == "shard_map":
            for o, (spec, buf) in inline_region(self, e).items():
                self.copies[o] = [Copy(spec, buf)]
            return
        if get_op(e.op).region_only:
            raise ShardingError("manual-op-outside-region", f"{e.op} names mesh axes and only runs inside shard_map")
        if e.op in IDENTITY_OPS and isinstance(e.inputs[0], Value):
            self.copies[e.outputs[0]] = list(self.copies[e.inputs[0]])
            return
        if e.op in TARGET_OPS and isinstance(e.inputs[0], Value):
            spec = e.kw.get("sharding")
            if isinstance(spec, DTensorSpec):  # a layout only placements state: held exactly
                spec = layout_of(spec, e.outputs[0].aval.shape)
            else:
                spec = plain(spec) if isinstance(spec, Sharding) else self.target(e.outputs[0])
            v = e.inputs[0]
            buf = self.get(v, spec, f"{e.op} {self.name(e.outputs[0])}")
            self.copies[e.outputs[0]] = [Copy(spec, buf)]
            return
        self.generic(e)
