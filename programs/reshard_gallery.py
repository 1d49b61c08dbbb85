"""The classic reshards, one strategy each, with the reshard planner's plan for every one.

Each strategy moves one array from a source sharding to a target sharding on the mesh
``{x: 2, y: 2}``; the program is the identity, so everything a run communicates is the reshard
of its output, and ``plan(name)`` (``ss.plan_reshard``) shows the steps it takes:

* ``gather``: sharded -> replicated, ``P('x', None) -> P()``: one all-gather over x.
* ``move``: move the axis from dim 0 to dim 1, ``P('x', None) -> P(None, 'x')``: one all-to-all.
* ``swap``: swap the axes of two dims, ``P('x', 'y') -> P('y', 'x')``: the blocks are right but
  sit on the wrong devices: one collective-permute (devices on the diagonal keep theirs).
* ``rename``: the same dim over another axis, ``P('x', None) -> P('y', None)``: a permute.
* ``partial``: partial sums -> sharded: ``a @ b`` contracting a dim split over x and y leaves
  every device a partial [8, 12] result; ``P(('x', 'y'), None)`` for the output makes it one
  reduce-scatter (never an all-reduce followed by a slice).
* ``uneven``: a [7, 6] array, rows over x and y (7 rows in 4 blocks of 2, 2, 2, 1) -> columns over
  x: the uneven blocks do not nest, so the planner's exchange sends every device exactly the
  elements it lacks.

``extras["plans"]()`` gives every strategy's plan as text, ``extras["plan"](name)`` one plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import simshard as ss
from simshard import P
from simshard.programs import ProgramDef, Strategy

MESH = {"x": 2, "y": 2}
SHAPE = (8, 12)


def identity(a):
    """The reshard is all there is: the output's sharding differs from the input's."""
    return a


def contract(a, b):
    return a @ b


@dataclass(frozen=True)
class Reshard:
    name: str
    about: str
    shape: tuple
    src: P | None  # None: partial sums over every axis (the ``partial`` case)
    dst: P


GALLERY = (
    Reshard("gather", "sharded -> replicated: one all-gather over x", SHAPE, P("x", None), P()),
    Reshard("move", "move axis x from dim 0 to dim 1: one all-to-all", SHAPE, P("x", None), P(None, "x")),
    Reshard("swap", "swap axes: dims over (x, y) -> over (y, x): one collective-permute", SHAPE, P("x", "y"), P("y", "x")),
    Reshard("rename", "rename axis: dim 0 over x -> over y: one collective-permute", SHAPE, P("x", None), P("y", None)),
    Reshard("partial", "partial sums over x and y -> dim 0 sharded over (x, y): one reduce-scatter", SHAPE,
            None, P(("x", "y"), None)),
    Reshard("uneven", "a size not divisible: [7, 6] rows over (x, y) -> columns over x, by exchange", (7, 6),
            P(("x", "y"), None), P(None, "x")),
)


def entry(name: str) -> Reshard:
    for r in GALLERY:
        if r.name == name:
            return r
    raise KeyError(f"no reshard {name!r} in the gallery (it has: {', '.join(r.name for r in GALLERY)})")


def _inputs(r: Reshard) -> tuple:
    if r.src is None:
        k = 8  # the contracted dim, split over x and y
        return tuple(ss.exact_inputs([(r.shape[0], k), (k, r.shape[1])], seed=0))
    return (ss.exact_inputs(r.shape, seed=0),)


def _partial(r: Reshard, mesh):
    axes = tuple(mesh.axis_names)
    return ss.jit(contract, in_shardings=(P(None, axes), P(axes, None)), out_shardings=r.dst, mesh=mesh)


def _strategy(r: Reshard) -> Strategy:
    if r.src is None:
        return Strategy(r.name, r.about, build=partial(_partial, r), inputs=partial(_inputs, r), reference=contract)
    return Strategy(r.name, r.about, in_shardings=(r.src,), out_shardings=r.dst, inputs=partial(_inputs, r))


def plan(name: str, mesh=None):
    """The reshard planner's plan for strategy ``name`` on ``mesh`` (the gallery's by default)."""
    r = entry(name)
    m = PROGRAM.mesh_for(name, mesh)
    src = ss.DTensorSpec(m, [ss.Partial()] * len(m.axis_names)) if r.src is None else ss.NamedSharding(m, r.src)
    return ss.plan_reshard(src, ss.NamedSharding(m, r.dst), r.shape)


def plans(mesh=None) -> dict[str, str]:
    """Every strategy's plan, as text."""
    return {r.name: str(plan(r.name, mesh)) for r in GALLERY}


PROGRAM = ProgramDef(
    name="reshard_gallery",
    about="the classic reshards (gather, move, swap, rename, partial -> sharded, uneven) and their plans",
    fn=identity,
    inputs=partial(_inputs, GALLERY[0]),
    mesh=MESH,
    strategies=tuple(_strategy(r) for r in GALLERY),
    extras={"plans": plans, "plan": plan, "gallery": GALLERY},
)
