"""Tracing a function inside another trace, as its own program: what ``vmap`` and ``scan`` do.

``trace_nested(outer, f, args, avals)`` runs ``f`` on fresh values of ``avals`` in a new trace;
values of the enclosing trace that ``f`` closes over become extra inputs of the nested one
(``captured``: the nested input -> the enclosing Tracer), so the nested program is closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import optree

from ..ir import trace_stack
from ..ir.program import Aval, Program, Value
from ..tracing.state import Builder, Tracer, as_tracer


@dataclass
class Nested:
    builder: Builder
    inputs: list[Tracer]  # one per aval
    outputs: list[Tracer]  # the flattened result
    out_tree: Any
    captured: dict[Value, Tracer]  # nested input -> the enclosing trace's value, in capture order

    def program(self) -> Program:
        """The nested trace as a closed program: inputs, then captured values."""
        inputs = tuple(t.value for t in self.inputs) + tuple(self.captured)
        return Program(inputs=inputs, eqns=tuple(self.builder.eqns), outputs=tuple(t.value for t in self.outputs))


def trace_nested(outer: Builder, f: Callable, in_tree, avals: Sequence[Aval]) -> Nested:
    inner = Builder(outer.mesh, outer.array_methods)
    inner_of: dict[Value, Value] = {}  # the traces number their values independently: two maps
    captured: dict[Value, Tracer] = {}

    def capture(t: Tracer) -> Value:
        if t.value not in inner_of:
            v = inner.new_value(t.aval)
            inner_of[t.value], captured[v] = v, t
        return inner_of[t.value]

    inner.capture = capture
    inputs = [Tracer(inner, inner.new_value(a)) for a in avals]
    with trace_stack.tracing(inner):
        out = f(*optree.tree_unflatten(in_tree, inputs))
        leaves, out_tree = optree.tree_flatten(out, none_is_leaf=False)
        leaves = [as_tracer(o) for o in leaves]
    return Nested(inner, inputs, leaves, out_tree, captured)
