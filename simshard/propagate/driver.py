"""``propagate(program)``: give every value of a program a sharding, Shardy's way.

The annotations the user wrote are the starting point: input shardings, output shardings,
sharding constraints, and shardings attached to op results (those are only a start: their open
dims may grow). Propagation then runs under a strategy:

* ``basic``: one axis list per factor for all tensors of an op;
* ``aggressive``: per-tensor resolution and cross-factor ordering;
* ``basic_then_aggressive``: one run of each;
* ``op_priority``: the five op-priority stages over aggressive runs;
* ``user_priority`` (default): user priorities as the outer loop over op-priority runs;
* ``pipeline``: ``user_priority`` between Shardy's import step (fully closed constraints pinned
  onto their inputs) and export step (I/O made evenly divisible without open sub-axes, every
  sharding closed, replicated axes dropped).

``conservative=True`` never creates sub-axes and does not propagate along permutation factors
(slice, pad, windows) or a concatenate's concat dim.

The result is ``program.with_shardings(..., mode="auto")`` with every value sharded; a value
nothing reached gets a fully open, empty sharding on the mesh of its neighbours (or of the
first annotation). Closed dims and explicitly replicated axes of annotations never change; open
dims only grow by appending minor axes. Values on different meshes never exchange shardings.
Function-result shardings (which may differ from the returned value's, e.g. a closed output
sharding) and provenance are kept on the returned program: see :func:`propagation_info` and
:func:`simshard.propagate.explain`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Hashable, NamedTuple

from ..tracing.context import get_mesh
from ..errors import ShardingError
from ..sharding.mesh import Mesh
from ..ops import get_op
from ..ir.program import Literal, Program, Value
from ..sharding.dims import Sharding, dims_view
from ..sharding.dim_sharding import DimSharding
from ..sharding.placements import DTensorSpec
from . import engine
from .direction import Direction
from .graph import ELEMENTWISE, OPAQUE_OPS, OTHER, Graph, Node, ResultRef, State, classify, identity_rule
from .op_priority import op_priority_pass
from .pipeline import apply_sharding_constraints, export
from .provenance import Provenance, explain_value
from .user_priority import user_priority_pass

STRATEGIES = ("basic", "aggressive", "basic_then_aggressive", "op_priority", "user_priority", "pipeline")
TARGET_OPS = ("sharding_constraint", "reshard")  # ops whose ``sharding`` param is their result's sharding


@dataclass(frozen=True)
class PropagationInfo:
    """What ``propagate`` knows beyond the value shardings."""

    strategy: str
    conservative: bool
    result_shardings: tuple[Sharding, ...]  # the function results' shardings, per output
    provenance: Provenance


def propagation_info(program: Program) -> PropagationInfo | None:
    """The propagation record of a program returned by :func:`propagate` (else None)."""
    return program.info if isinstance(program.info, PropagationInfo) else None


# -- Program -> Graph --------------------------------------------------------------------------
@dataclass(frozen=True)
class RegionOperand:
    """The sharding a manual region (``shard_map``) requires of its ``index``-th operand: its
    ``in_specs`` entry, joined to the operand by an identity (Shardy's data-flow edge of a
    ManualComputationOp), so the spec reaches the operand as an annotation would."""

    eqn: int
    index: int

    def __repr__(self) -> str:
        return f"shard_map #{self.eqn} in_specs[{self.index}]"


def _value_name(program: Program, v) -> str:
    if isinstance(v, ResultRef):
        return f"output {v.index}"
    label = program.label(v)
    return label if label else f"%{v.id}"


def _check(program: Program, v: Value, s: Sharding, where: str) -> None:
    try:
        s.check_rank(v.aval.shape)
    except ShardingError as e:
        raise ShardingError(e.rule, f"{where} ({_value_name(program, v)}): {e.detail}") from None


class Annotation(NamedTuple):
    """A sharding the user wrote, where it applies and how ``explain`` names it."""

    key: Hashable
    sharding: Sharding
    label: str


@dataclass
class _GraphBuilder:
    """The graph under construction: shapes, initial shardings, annotations and nodes."""

    program: Program
    shapes: dict[Hashable, tuple[int, ...]] = field(default_factory=dict)
    initial: dict[Hashable, Sharding | None] = field(default_factory=dict)
    annotations: list[Annotation] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)

    def start(self, key, shape, sharding: Sharding | None, label: str | None = None) -> None:
        """A tensor of the graph with its initial sharding (annotated when ``label`` is set)."""
        self.shapes[key] = shape
        self.initial[key] = sharding
        if sharding is not None and label is not None:
            self.annotations.append(Annotation(key, sharding, label))

    def inputs(self) -> None:
        program = self.program
        for k, v in enumerate(program.inputs):
            s = dims_view(program.in_shardings[k], v.aval.shape) if k < len(program.in_shardings) else None
            name = program.input_names[k] if k < len(program.input_names) else str(k)
            s = s if s is not None else self.typed(v)
            if s is not None:
                _check(program, v, s, f"input sharding of {name}")
            self.start(v, v.aval.shape, s, f"input {name}")

    def typed(self, v) -> Sharding | None:
        """The type explicit mode gave ``v`` (a mixed program: the Explicit axes are fixed where
        they were typed, the Auto axes and the untyped values of ``auto_axes`` regions are left
        to propagation)."""
        return self.program.shardings.get(v) if self.program.mode == "explicit" else None

    def results(self, e) -> None:
        """The results of equation ``e`` with their annotated shardings."""
        program, kw = self.program, e.kw
        for j, v in enumerate(e.outputs):
            s = dims_view(e.shardings[j], v.aval.shape) if j < len(e.shardings) else None
            if s is None and e.op in TARGET_OPS and isinstance(kw.get("sharding"), (Sharding, DTensorSpec)):
                s = dims_view(kw["sharding"], v.aval.shape)
            typed = s is None and self.typed(v) is not None
            s = self.typed(v) if typed else s
            label = None
            if s is not None:
                _check(program, v, s, f"sharding of the result of {e.op}")
                label = f"{e.op} {_value_name(program, v)}" if e.op in TARGET_OPS else f"annotation on {_value_name(program, v)} ({e.op})"
                label = f"type of {_value_name(program, v)} ({e.op})" if typed else label
            self.start(v, v.aval.shape, s, label)

    def manual_region(self, idx: int, e) -> None:
        """A ``shard_map``: opaque, but its specs are shardings of its boundary: out_specs those
        of its results, in_specs those its operands must have on entry (an identity edge)."""
        kw = e.kw
        for j, (v, spec) in enumerate(zip(e.outputs, kw.get("out_specs", ()))):
            if self.initial[v] is None and isinstance(spec, Sharding):
                self.start(v, v.aval.shape, spec, f"shard_map out_specs[{j}] ({_value_name(self.program, v)})")
        for k, (x, spec) in enumerate(zip(e.inputs, kw.get("in_specs", ()))):
            if isinstance(x, Literal) or not isinstance(spec, Sharding):
                continue
            key = RegionOperand(idx, k)
            self.start(key, x.aval.shape, spec, repr(key))
            self.nodes.append(Node(len(self.nodes), "shard_map", (x,), (key,), identity_rule(x.aval.shape), ELEMENTWISE))
        operands = tuple(None if isinstance(i, Literal) else i for i in e.inputs)
        self.nodes.append(Node(len(self.nodes), e.op, operands, tuple(e.outputs), None, OTHER, None, kw))

    def op(self, idx: int, e) -> None:
        """An op with its sharding rules (none for an opaque op, or one whose rules fail)."""
        kw = e.kw
        rule, alternatives = None, ()
        if e.op not in OPAQUE_OPS:
            try:
                rule, *alternatives = get_op(e.op).rules([i.aval for i in e.inputs], [o.aval for o in e.outputs], **kw)
            except (KeyError, ValueError, TypeError, IndexError) as err:
                warnings.warn(f"propagate: op {e.op} (equation {idx}) has no usable sharding rule, nothing propagates through it: {err}")
        barrier = Direction.parse(kw.get("allowed_direction", "NONE")) if e.op == "propagation_barrier" else None
        operands = tuple(None if isinstance(i, Literal) else i for i in e.inputs)
        self.nodes.append(Node(len(self.nodes), e.op, operands, tuple(e.outputs), rule, classify(e.op), barrier, kw, tuple(alternatives)))

    def function_results(self) -> list[Sharding | None]:
        program = self.program
        results: list[Sharding | None] = []
        for k, v in enumerate(program.outputs):
            s = dims_view(program.out_shardings[k], v.aval.shape) if k < len(program.out_shardings) else None
            if s is not None:
                _check(program, v, s, f"output sharding {k}")
                self.annotations.append(Annotation(ResultRef(k), s, f"output {k}"))
            results.append(s)
        return results


def build_graph(program: Program) -> tuple[Graph, State, list[Annotation]]:
    """The graph, the initial state, and the annotations."""
    builder = _GraphBuilder(program)
    builder.inputs()
    for idx, e in enumerate(program.eqns):
        builder.results(e)
        if e.op == "shard_map":
            builder.manual_region(idx, e)
        else:
            builder.op(idx, e)
    results = builder.function_results()
    graph = Graph(builder.shapes, builder.nodes, list(program.outputs))
    return graph, State(builder.initial, results), builder.annotations


# -- strategies --------------------------------------------------------------------------------
def run_strategy(graph: Graph, state: State, strategy: str, conservative: bool, prov: Provenance | None, inputs=()) -> None:
    """Run one of ``STRATEGIES`` on the graph (in place on ``state``)."""
    ctx = engine.PropagationContext(graph, state, "aggressive", engine.propagate_any, conservative, prov)
    if strategy in ("basic", "aggressive"):
        engine.run_context(replace(ctx, strategy=strategy))
    elif strategy == "basic_then_aggressive":
        engine.run_context(replace(ctx, strategy="basic"))
        engine.run_context(ctx)
    elif strategy == "op_priority":
        op_priority_pass(ctx)
    elif strategy == "user_priority":
        user_priority_pass(ctx)
    elif strategy == "pipeline":
        apply_sharding_constraints(graph, state, prov)
        user_priority_pass(ctx)
        export(graph, state, inputs)
    else:
        raise ValueError(f"unknown propagation strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def _default_mesh(state: State, annotations) -> Mesh | None:
    for _, s, _ in annotations:
        if s.mesh.axis_names:
            return s.mesh
    for s in list(state.shardings.values()) + state.results:
        if s is not None:
            return s.mesh
    return get_mesh()


def _region_mesh(program: Program) -> Mesh | None:
    """The mesh a manual region (``shard_map``) names: the only mesh of a program whose inputs
    carry no sharding."""
    for e in program.eqns:
        mesh = e.kw.get("mesh") if e.op == "shard_map" else None
        if isinstance(mesh, Mesh):
            return mesh
    return None


def _neighbour_mesh(graph: Graph, state: State, key) -> Mesh | None:
    """The mesh for a value nothing reached: the common mesh of an op next to it (its producer
    first, then its users), else the mesh of the first sharded tensor next to it."""
    candidates = []
    if key in graph.producer:
        candidates.append(graph.nodes[graph.producer[key]])
    candidates += [graph.nodes[i] for i in graph.uses.get(key, [])]
    tensors = [[state.get(k) for k in list(n.operands) + list(n.results) if k is not None] for n in candidates]
    for shardings in tensors:
        m = engine.common_mesh(shardings)
        if m is not None:
            return m
    for shardings in tensors:
        for s in shardings:
            if s is not None and s.mesh.axis_names:
                return s.mesh
    return None


def open_sharding(mesh: Mesh, rank: int) -> Sharding:
    return Sharding(mesh, tuple(DimSharding((), True) for _ in range(rank)))


def propagate(program: Program, strategy: str = "user_priority", conservative: bool = False,
              mesh: Mesh | None = None) -> Program:
    """Shardy-style automatic sharding propagation; see the module docstring. ``mesh``: the mesh
    of values nothing gives a sharding (the trace's mesh); by default the annotations' mesh."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown propagation strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    graph, state, annotations = build_graph(program)
    prov = Provenance()
    for key, s, label in annotations:
        prov.annotate(key, s, label)
    run_strategy(graph, state, strategy, conservative, prov, program.inputs)

    default = _default_mesh(state, annotations) or _region_mesh(program) or mesh
    final: dict[Value, Sharding] = {}
    for v in program.values():
        s = state.get(v)
        if s is None:
            mesh = _neighbour_mesh(graph, state, v) or default
            if mesh is None:
                raise ShardingError(
                    "no-mesh",
                    "propagate: no value of this program has a sharding and no mesh is set "
                    "(annotate an input or use ss.set_mesh)",
                )
            s = open_sharding(mesh, v.aval.ndim)
        final[v] = s
    results = tuple(
        state.results[k] if state.results[k] is not None else final[v] for k, v in enumerate(program.outputs)
    )
    return program.with_shardings(final, mode="auto", info=PropagationInfo(strategy, conservative, results, prov))


def explain(program: Program, value_or_label) -> str:
    """Which annotation, op, factor and priority gave each dimension of a value its axes.

    ``value_or_label``: a Value, a label (``ss.name``), an input name, or an output index. A
    program that was not propagated yet is propagated first (default strategy)."""
    info = propagation_info(program)
    if info is None:
        program = propagate(program)
        info = propagation_info(program)
    v = program.lookup(value_or_label)
    title = _value_name(program, v) + f" {v.aval}"
    text = explain_value(info.provenance, v, program.shardings.get(v), title)
    for k, w in enumerate(program.outputs):
        if w == v and info.result_shardings[k] != program.shardings.get(v):
            text += "\n" + explain_value(info.provenance, ResultRef(k), info.result_shardings[k], f"output {k}")
    return text
