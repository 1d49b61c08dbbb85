"""The search's view of a traced program: the ops to choose a strategy for, the values between
them, and the points at which memory is live.

A scan's body is one scope of its own, visited once: its ops weigh ``length`` times in the step
time (every iteration runs the same strategy), so the search is as large for 96 layers as for
one. Values are keyed by ``(scope, value id)``; a scan joins its scope to the body's as the loop
partitioner (``partition/loops.py``) lays the loop out:

* a stacked input ``xs`` and a constant take their operand's layout as it is held (pending sums
  included), a stacked one with its scanned dim gathered whole first (``Link.sliced``: priced
  once per scan where the operand splits that dim);
* a carry is laid out once for the whole loop as the scan's result is (``ScanSite``: a layout
  of its own, non-pending, which the strategy annotates on the scan): the initial value is
  resharded to it before the loop, the body's new carry to it on every iteration (``length``
  times), and the scan's result is that layout;
* a stacked output ``ys`` someone reads has a layout of its own too (its stacked dim whole):
  every iteration writes its slice there, so the body's value is resharded to that slice
  (``length`` times: a pending gradient is summed inside the loop, one layer at a time);
  a ``ys`` nobody reads is not written.

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
    """``source`` read where ``target`` is laid out (a carry's initial or new value into the
    carry's layout, a body's ``y`` into its stacked output's slice), a reshard priced ``weight``
    times; or (``alias``) ``target`` takes the layout of ``source``, no choice of its own.
    ``lifted``: the target has one more leading dim than the source (a stacked value, that dim
    whole); ``sliced``: one fewer (a slice of ``xs``, its stacked dim gathered whole first)."""

    source: Key
    target: Key
    weight: int
    lifted: bool = False  # target = source with a leading replicated dim
    sliced: bool = False  # source = target with a leading replicated dim (xs into the body)
    alias: bool = False
    iterations: int = 0  # a scan's: the loop reads (xs) or writes (ys) this value's block each time


@dataclass(frozen=True)
class ScanSite:
    """A scan: where it is, and its results' keys (None for a stacked output nobody reads),
    whose layouts the strategy annotates on it."""

    scope: int
    index: int
    results: tuple[Key | None, ...]


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
    scans: tuple[ScanSite, ...] = ()
    stacked: frozenset[Key] = frozenset()  # free values whose leading (stacked) dim stays whole


class _Builder:
    def __init__(self):
        self.values: dict[Key, Aval] = {}
        self.free: list[Key] = []
        self.ops: list[OpSite] = []
        self.links: list[Link] = []
        self.points: list[LivePoint] = []
        self.bodies: dict[int, tuple[int, int]] = {}
        self.scans: list[ScanSite] = []
        self.stacked: set[Key] = set()
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
        """The body as a scope, joined to ``s`` as the loop partitioner joins it (module docstring)."""
        kw = e.kw
        body, n, carry, xs = kw["body"], kw["length"], kw["num_carry"], kw["num_xs"]
        b, bound = self.scopes, set()
        for j, (x, v) in enumerate(zip(e.inputs, body.inputs)):
            if not isinstance(x, Value):
                continue
            if j < carry:  # the initial value resharded once to the carry's layout (a free value)
                self.links.append(Link((s, x.id), (b, v.id), weight))
                continue
            scanned = j < carry + xs  # before the body's own links: a nested body may read it
            self.links.append(Link((s, x.id), (b, v.id), weight, sliced=scanned, alias=True,
                                   iterations=n if scanned else 0))
            bound.add(v.id)
        dead = frozenset(b_out.id for j, (b_out, r) in enumerate(zip(body.outputs, e.outputs))
                         if j >= carry and r.id in unread)
        self.scope(body, weight * n, outside, f"{path} / ", frozenset(bound), dead)
        self.bodies[b] = (s, i)
        results: list[Key | None] = []
        for j, (out, r) in enumerate(zip(body.outputs, e.outputs)):
            self.values[(s, r.id)] = r.aval
            if j < carry:  # the new carry to its layout each iteration; the result is that layout
                if out.id != body.inputs[j].id:
                    self.links.append(Link((b, out.id), (b, body.inputs[j].id), weight * n))
                self.links.append(Link((b, body.inputs[j].id), (s, r.id), weight, alias=True, iterations=n))
            elif r.id in unread:
                results.append(None)
                continue
            else:  # a stacked output: a layout of its own, each iteration's slice written there
                self.free.append((s, r.id))
                self.stacked.add((s, r.id))
                self.links.append(Link((b, out.id), (s, r.id), weight * n, lifted=True, iterations=1))
            results.append((s, r.id))
        self.scans.append(ScanSite(s, i, tuple(results)))


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
                 tuple((top, v.id) for v in program.outputs), tuple(b.ops), tuple(b.links), tuple(b.points), b.bodies,
                 tuple(b.scans), frozenset(b.stacked))


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
