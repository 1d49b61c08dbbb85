"""The search's view of a traced program: the ops to choose a strategy for, the values between
them, and the points at which memory is live.

A scan's body is one scope of its own, visited once: its ops weigh ``length`` times in the step
time (every iteration runs the same strategy), so the search is as large for 96 layers as for
one. Values are keyed by ``(scope, value id)``; a scan joins its scope to the body's:

* the body's inputs take the layouts of the scan's operands (the loop partitioner lays them
  out so): a carry's initial value and each constant as they are, a stacked input ``xs`` sliced
  (its leading, scanned dim replicated);
* the body's carry out feeds its carry in on every iteration but the last (``length - 1``
  times), so a layout that changes across an iteration pays each time;
* the scan's results are the body's outputs: its final carries as they are, its stacked ``ys``
  with a replicated leading dim (``Link.lifted``).

Memory is checked at every op of every scope (``LivePoint``): the values live there, and for a
body also what the enclosing scope holds live across the scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..ir.program import Aval, Eqn, Literal, Program, Value

Key = tuple[int, int]  # (scope, value id)


@dataclass(frozen=True)
class OpSite:
    """One equation to choose a strategy for, ``weight`` times per step (a body's iterations)."""

    scope: int
    index: int  # position in its scope's equations
    eqn: Eqn
    operands: tuple[Key | None, ...]  # None for a literal operand
    results: tuple[Key, ...]
    weight: int
    path: str  # where it is, for reports: "eqn 12" or "scan 3 / eqn 7"


@dataclass(frozen=True)
class Link:
    """``target`` (a body input or a scan result) takes the layout of ``source``: with a reshard
    priced ``weight`` times (a carry from the body's end to its start), or (``alias``) as the
    same layout, no choice of its own. ``lifted``: the target has one more leading dim than the
    source (a stacked value), laid out replicated; ``sliced``: one fewer (a slice of ``xs``)."""

    source: Key
    target: Key
    weight: int
    lifted: bool = False  # target = source with a leading replicated dim
    sliced: bool = False  # source = target with a leading replicated dim (xs into the body)
    alias: bool = False
    iterations: int = 0  # a scan's: the loop reads (xs) or writes (ys) this value's block each time


@dataclass(frozen=True)
class LivePoint:
    """The values live at one op (its operands and results included)."""

    where: str
    live: frozenset[Key]
    site: int | None  # the OpSite index running there


@dataclass(frozen=True)
class Graph:
    values: dict[Key, Aval]
    free: tuple[Key, ...]  # values whose layout is chosen directly: program and body inputs
    inputs: tuple[Key, ...]  # the program's inputs, in order
    outputs: tuple[Key, ...]
    ops: tuple[OpSite, ...]
    links: tuple[Link, ...]
    points: tuple[LivePoint, ...]
    bodies: dict[int, tuple[int, int]]  # scope -> (parent scope, index of its scan eqn)


class _Builder:
    def __init__(self):
        self.values: dict[Key, Aval] = {}
        self.free: list[Key] = []
        self.ops: list[OpSite] = []
        self.links: list[Link] = []
        self.points: list[LivePoint] = []
        self.bodies: dict[int, tuple[int, int]] = {}
        self.scopes = 0

    def scope(self, program: Program, weight: int, outside: frozenset[Key], where: str,
              bound: frozenset[int] = frozenset(), unread: frozenset[int] = frozenset()) -> int:
        """Add ``program`` as a scope; its inputs are chosen freely unless ``bound`` (a body's
        inputs take their operands' layouts); its outputs ``unread`` (a body's, whose scan
        results nobody reads) are not held to its end."""
        s = self.scopes
        self.scopes += 1
        for v in program.inputs:
            self.values[(s, v.id)] = v.aval
            if v.id not in bound:
                self.free.append((s, v.id))
        last = last_uses(program, unread)
        held = {v.id: len(program.eqns) for v in program.inputs}  # inputs stay where the caller put them
        live = {(s, v.id) for v in program.inputs}
        for i, e in enumerate(program.eqns):
            for v in e.outputs:
                self.values[(s, v.id)] = v.aval
            here = frozenset(live | {(s, v.id) for v in e.outputs})
            path = f"{where}eqn {i} ({e.op})"
            if e.op == "scan":  # results nobody reads (residuals of a transpose) are not held across it
                unread = {(s, v.id) for v in e.outputs if v.id not in last}
                self.scan(s, i, e, weight, outside | (here - unread), path, frozenset(k[1] for k in unread))
            else:
                self.points.append(LivePoint(path, outside | here, len(self.ops)))
                self.ops.append(OpSite(s, i, e, tuple(None if isinstance(x, Literal) else (s, x.id) for x in e.inputs),
                                       tuple((s, v.id) for v in e.outputs), weight, path))
            live = {k for k in here if last.get(k[1], held.get(k[1], i)) > i}  # never read: dead at once
        return s

    def scan(self, s: int, i: int, e: Eqn, weight: int, outside: frozenset[Key], path: str,
             unread: frozenset[int] = frozenset()) -> None:
        kw = e.kw
        body, n, carry, xs = kw["body"], kw["length"], kw["num_carry"], kw["num_xs"]
        b, bound = self.scopes, set()
        for j, (x, v) in enumerate(zip(e.inputs, body.inputs)):
            if isinstance(x, Value):  # before the body's own links: a nested body may read it
                scanned = carry <= j < carry + xs
                self.links.append(Link((s, x.id), (b, v.id), weight, sliced=scanned, alias=True,
                                       iterations=n if scanned or j < carry else 0))
                bound.add(v.id)
        dead = frozenset(b_out.id for j, (b_out, r) in enumerate(zip(body.outputs, e.outputs))
                         if j >= carry and r.id in unread)
        self.scope(body, weight * n, outside, f"{path} / ", frozenset(bound), dead)
        self.bodies[b] = (s, i)
        for j in range(carry):
            self.links.append(Link((b, body.outputs[j].id), (b, body.inputs[j].id), weight * max(n - 1, 0)))
        for j, (out, r) in enumerate(zip(body.outputs, e.outputs)):
            self.links.append(Link((b, out.id), (s, r.id), weight, lifted=j >= carry, alias=True,
                                   iterations=n if j >= carry else 0))


def last_uses(program: Program, unread: frozenset[int] = frozenset()) -> dict[int, int]:
    """Value id -> the index of the last equation reading it (outputs: past the end, but for
    those ``unread``)."""
    out: dict[int, int] = {}
    for i, e in enumerate(program.eqns):
        for x in e.inputs:
            if isinstance(x, Value):
                out[x.id] = i
    for v in program.outputs:
        if v.id not in unread:
            out[v.id] = len(program.eqns)
    return out


def build_graph(program: Program) -> Graph:
    """The ops, values, links and live points of ``program`` (see the module docstring)."""
    b = _Builder()
    top = b.scope(program, 1, frozenset(), "")
    return Graph(b.values, tuple(b.free), tuple((top, v.id) for v in program.inputs),
                 tuple((top, v.id) for v in program.outputs), tuple(b.ops), tuple(b.links), tuple(b.points), b.bodies)


def walk_eqns(program: Program, scope: int = 0) -> Iterator[tuple[int, int, Eqn]]:
    """``(scope, index, eqn)`` of every equation, bodies numbered as ``build_graph`` numbers them."""
    counter = [scope]

    def visit(p: Program, s: int):
        for i, e in enumerate(p.eqns):
            yield s, i, e
            if e.op == "scan":
                counter[0] += 1
                yield from visit(e.kw["body"], counter[0])

    yield from visit(program, scope)
