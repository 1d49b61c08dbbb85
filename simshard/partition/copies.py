"""Copies of program values, and getting a value laid out as an op wants it.

A value may be held in several layouts at once: every reshard the partitioner makes is kept as a
further copy for later users (``Copy``). ``ValueCopies`` is the partitioner's job of choosing the
copy to start from and pricing or emitting the reshard (``plan_reshard``), and of pricing where a
result must go once computed (``settle_cost``, which follows a delayed reduction a few ops ahead).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.program import Eqn, Literal as PLiteral, Value
from ..sharding.dims import Sharding
from ..sharding.layout import Layout
from ..spmd import Literal
from .emit import emit_plan
from .linear import pending_ok
from .reshard import plain, plan_reshard

TARGET_OPS = {"sharding_constraint", "reshard"}  # ops that reshard their operand to their own sharding


@dataclass
class Copy:
    """One copy of a program value: laid out as ``spec`` (a Sharding, or the exact ``Layout`` of a
    placement list no Sharding states) in buffer ``buf``."""

    spec: Sharding | Layout
    buf: int


class ValueCopies:
    """Getting values where ops want them: a part of the partitioner (``partition._Partitioner``),
    on its ``program``, ``builder``, ``copies`` (value -> its copies, the first the one its op
    made), ``wanted`` (output -> its out sharding), ``users``, ``is_output``, ``read_outputs``
    (the outputs someone reads: a loop body's residuals nobody stacks are not) and ``literals``."""

    program: object
    copies: dict[Value, list[Copy]]

    def target(self, v: Value) -> Sharding:
        """``v``'s propagated sharding (only what decides its layout)."""
        return plain(self.program.shardings[v])

    def want(self, v: Value) -> Sharding:
        """Where ``v`` should end up: its output sharding when it is an output, else its own."""
        return self.wanted.get(v) or self.target(v)

    def primary(self, v: Value) -> Sharding:
        """The tensor-dim sharding ``v`` is held as (its propagated one when only an exact layout
        holds it): what the op rules start from."""
        for copy in self.copies[v]:
            if isinstance(copy.spec, Sharding):
                return copy.spec
        return self.target(v)

    def plan(self, v: Value, spec: Sharding, copy: Copy):
        """The reshard of ``copy`` of ``v`` to ``spec``."""
        return plan_reshard(copy.spec, spec, v.aval.shape, v.aval.dtype)

    def cost(self, v: Value, spec: Sharding) -> int:
        """Bytes to get ``v`` laid out as ``spec`` from its cheapest copy."""
        return min(self.plan(v, spec, copy).bytes for copy in self.copies[v])

    def get(self, v: Value, spec: Sharding, why: str, keep: bool = True) -> int:
        """A buffer holding ``v`` laid out as ``spec`` (resharding the cheapest copy if needed),
        kept as a further copy of ``v`` unless ``keep`` is False (a halo layout holds only the
        rows an op reads, not all of ``v``: no later reshard may start from it)."""
        best = None
        for copy in self.copies[v]:
            if type(copy.spec) is type(spec) and copy.spec == spec:  # a Layout compares only with a Layout
                return copy.buf
            reshard = self.plan(v, spec, copy)
            if best is None or reshard.bytes < best[0].bytes:
                best = (reshard, copy)
        reshard, copy = best
        if not reshard.steps:
            if keep:
                self.copies[v].append(Copy(spec, copy.buf))
            return copy.buf
        buf = emit_plan(reshard, self.builder, copy.buf, source=f"reshard {self.name(v)} for {why}")
        if keep:
            self.copies[v].append(Copy(spec, buf))
        return buf

    def literal(self, lit: PLiteral) -> int:
        """The buffer holding literal ``lit`` (one per distinct value and dtype)."""
        key = (literal_key(lit.value), str(lit.aval.dtype))
        if key not in self.literals:
            buf = self.builder.buf()
            self.builder.emit_same(Literal(0, f"literal {lit!r}", dst=buf, value=lit.value))
            self.literals[key] = buf
        return self.literals[key]

    def settle_cost(self, v: Value, s: Sharding, depth: int = 4) -> int:
        """Bytes to bring a result computed as ``s`` where it is wanted. A pending result whose only
        user is linear in it may instead be reduced after that user (delayed reduction): the
        estimate follows such a chain a few ops ahead and takes the cheapest point to reduce."""
        now = plan_reshard(s, self.want(v), v.aval.shape, v.aval.dtype).bytes
        users = self.users.get(v, [])
        if not s.unreduced or depth == 0 or v in self.read_outputs or len(users) != 1:
            return now
        e = users[0]
        if len(e.outputs) != 1 or e.op in ("shard_map",) or e.op in TARGET_OPS:
            return now
        if pending_ok(e.op, {**e.kw, **literal_params(e)}, operand_kinds(e, lambda i: i == v), s.reduce_op) is None:
            return now
        o = e.outputs[0]
        w = self.want(o)
        if w.mesh != s.mesh or {a.name for a in s.unreduced} & {a.name for d in w.dims for a in d.axes}:
            return now
        later = self.settle_cost(o, with_pending(w, tuple(s.unreduced), s.reduce_op), depth - 1)
        return min(now, later)


def operand_kinds(e: Eqn, pending) -> list[str]:
    """Each operand of ``e`` as ``linear.pending_ok`` reads it: "pending" where ``pending(operand)``,
    else "value" or "literal"."""
    return ["pending" if pending(i) else ("value" if isinstance(i, Value) else "literal") for i in e.inputs]


def literal_params(e: Eqn) -> dict:
    """``e``'s literal operands as params ``__literal<k>`` (what ``pending_ok`` reads of them)."""
    return {f"__literal{k}": i.value for k, i in enumerate(e.inputs) if isinstance(i, PLiteral)}


def with_pending(s: Sharding, axes, op: str, keep: bool = False) -> Sharding:
    """``s`` pending over ``axes`` under ``op`` (added to its own pending axes when ``keep``)."""
    unr = tuple(s.unreduced) + tuple(a for a in axes if a not in s.unreduced) if keep else tuple(axes)
    return Sharding(s.mesh, s.dims, (), unr, op)


def literal_key(v):
    """A literal's value as a dict key (dtype, shape, bytes and Python type)."""
    a = np.asarray(v)
    return (a.dtype.str, a.shape, a.tobytes(), type(v).__name__)
