"""``AutoStrategy``: what ``ss.autoshard`` found, as an ordinary strategy.

It holds the layout of every input and output and of the intermediates (the results of each op,
by position: scope and equation, a scan's body being a scope of its own). Like an ``ss.jit``
function it traces itself (``trace``), so ``ss.run(strategy, *args)`` and ``ss.estimate`` run
it as any strategy: the program traced, its inputs and outputs laid out as chosen and every
chosen intermediate annotated (a sharding constraint), then propagated and partitioned as usual.
Called directly it evaluates the function whole.

It shows itself in the three dialects: JAX's PartitionSpecs, Shardy's text and DTensor's
placements (``partition_specs``, ``shardy``, ``placements``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import optree

from ..errors import ShardingError
from ..ir.program import Eqn, Program, Value
from ..ir import trace_stack
from ..ops.evaluate import evaluate
from ..sharding.dims import Sharding
from ..sharding.mesh import Mesh
from ..tracing.tracer import trace

Position = tuple[int, int]  # (scope, equation index)


@dataclass(frozen=True)
class AutoStrategy:
    """A function with the layouts the search chose (module docstring); ``report`` says why."""

    fun: Callable
    mesh: Mesh
    in_shardings: tuple[Sharding, ...]  # per input leaf
    out_shardings: tuple[Sharding, ...]  # per output leaf
    annotations: Mapping[Position, tuple[Sharding | None, ...]]
    # per op, the layout each operand is read in where the search moves it (None: as held),
    # made by a sharding constraint before the op (one per value and layout, shared by its readers)
    reads: Mapping[Position, tuple[Sharding | None, ...]] = field(default_factory=dict)
    input_names: tuple[str, ...] = ()
    in_shapes: tuple[tuple[int, ...], ...] = ()
    report: Any = field(default=None, compare=False, repr=False)  # the search's SearchReport

    @property
    def __name__(self) -> str:
        return getattr(self.fun, "__name__", "autoshard")

    @property
    def __wrapped__(self) -> Callable:
        return self.fun

    def trace(self, *args, **kwargs) -> Program:
        """The program of ``fun(*args)`` with the chosen layouts (an ``ss.jit`` function's contract)."""
        program = trace(self.fun, *args, mesh=self.mesh, **kwargs)
        if len(program.inputs) != len(self.in_shardings) or len(program.outputs) != len(self.out_shardings):
            raise ShardingError("autoshard-mismatch", f"this strategy was found for {len(self.in_shardings)} inputs and "
                                f"{len(self.out_shardings)} outputs; the call traces {len(program.inputs)} and "
                                f"{len(program.outputs)}: call it with arguments shaped as autoshard's")
        annotated = annotate(program, Notes(self.annotations, self.reads, [0], [max_id(program)]), 0)
        out_tree = program.out_tree
        annotated = replace(annotated, in_shardings=self.in_shardings, out_shardings=self.out_shardings)
        object.__setattr__(annotated, "out_tree", out_tree)
        return annotated

    def __call__(self, *args):
        if trace_stack.current() is not None:  # inside another trace: inlined, as ss.jit does
            return self.fun(*args)
        program = trace(self.fun, *args, mesh=self.mesh)
        outs = evaluate(program, *optree.tree_leaves(args, none_is_leaf=False))
        return optree.tree_unflatten(program.out_tree, list(outs))

    # -- the three dialects -----------------------------------------------------------------
    def partition_specs(self) -> dict[str, Any]:
        """Input name -> JAX's ``P`` (``NamedSharding.spec``)."""
        return {n: s.to_named().spec for n, s in zip(self.input_names, self.in_shardings)}

    def shardy(self) -> dict[str, str]:
        """Input name -> Shardy's sharding text."""
        return {n: str(s) for n, s in zip(self.input_names, self.in_shardings)}

    def placements(self) -> dict[str, Any]:
        """Input name -> DTensor's placement list (``DTensorSpec``)."""
        return {n: s.to_dtensor(shape) for n, s, shape in zip(self.input_names, self.in_shardings, self.in_shapes)}

    def show(self) -> str:
        """The inputs' layouts in the three dialects, one input a line."""
        specs, shardy, placements = self.partition_specs(), self.shardy(), self.placements()
        width = max((len(n) for n in self.input_names), default=0)
        lines = []
        for n in self.input_names:
            pl = "[" + ", ".join(str(p) for p in placements[n].placements) + "]"
            lines.append(f"{n:<{width}}  {specs[n]!s:<28} {pl:<18} {shardy[n]}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Notes:
    """What ``annotate`` writes into a program: the results' layouts and the operands' reads by
    position, the body counter and the largest value id used (constraints take fresh ones)."""

    results: Mapping[Position, tuple]
    reads: Mapping[Position, tuple]
    counter: list[int]
    last_id: list[int]


def annotate(program: Program, notes: Notes, scope: int) -> Program:
    """``program`` with the chosen layout of each op's results as its annotation and each
    operand the search moves read through a sharding constraint to its layout, so that the
    partitioner runs each op as the search priced it (it would otherwise pick its candidate by
    bytes: a scalar all-reduce of few bytes for an all-gather, say). Bodies are numbered depth
    first as ``graph.build_graph`` numbers them."""
    eqns: list[Eqn] = []
    made: dict[tuple[int, Sharding], Value] = {}  # a value read in a layout: one constraint for every reader
    for i, e in enumerate(program.eqns):
        if e.op == "scan":
            notes.counter[0] += 1
            body = annotate(e.kw["body"], notes, notes.counter[0])
            e = replace(e, params=tuple((k, body if k == "body" else v) for k, v in e.params))
        chosen = notes.results.get((scope, i))
        if chosen is not None:
            e = replace(e, shardings=tuple(chosen))
        reads = notes.reads.get((scope, i), ())
        if any(t is not None for t in reads):
            ins = list(e.inputs)
            for p, t in enumerate(reads):
                if t is None or not isinstance(ins[p], Value):
                    continue
                if (ins[p].id, t) not in made:
                    notes.last_id[0] += 1
                    made[(ins[p].id, t)] = v = Value(notes.last_id[0], ins[p].aval)
                    eqns.append(Eqn("sharding_constraint", (ins[p],), (v,), (("sharding", t),), (t,)))
                ins[p] = made[(ins[p].id, t)]
            e = replace(e, inputs=tuple(ins))
        eqns.append(e)
    return replace(program, eqns=tuple(eqns))


def max_id(program: Program) -> int:
    """The largest value id in ``program`` and its bodies."""
    ids = [v.id for v in program.inputs]
    for e in program.eqns:
        ids += [v.id for v in e.outputs] + [x.id for x in e.inputs if isinstance(x, Value)]
        for v in e.kw.values():
            if isinstance(v, Program):
                ids.append(max_id(v))
    return max(ids, default=0)
