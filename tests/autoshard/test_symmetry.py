"""Planned prices once per orbit of a mesh's equal axes (``autoshard/symmetry.py``): which
renamings keep every price, and, checked by execution, that the price of every pair of layouts
(pending sums included) is the same, bit for bit and link for link, whether it was planned itself
or renamed from its orbit's pair; a search's program is then the one it was."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import simshard as ss
from simshard.autoshard import symmetry
from simshard.autoshard.candidates import value_specs
from simshard.autoshard.costs import ReshardCosts
from simshard.autoshard.graph import build_graph
from simshard.autoshard.model import Search
from simshard.ir.program import Aval
from simshard.report.compute import device_of
from simshard.report.topology import Nodes
from simshard.sharding.dims import AxisRef
from simshard.tracing.tracer import ShapeDtype, trace

UNIFORM = ss.Topology({}, "nvlink", device="h100")


def test_the_renamings_keep_each_axis_size_type_and_link():
    cube = ss.Mesh({"x": 2, "y": 2, "z": 2})
    assert len(symmetry.of(cube, UNIFORM)) == 5  # the 3! orders but the mesh's own
    assert symmetry.of(ss.Mesh({"x": 2, "y": 4}), UNIFORM) == ()  # sizes differ
    slow_x = ss.Topology({"x": ss.Link(1e9, 1e-5)}, "nvlink")
    assert symmetry.of(cube, slow_x) == ({"x": "x", "y": "z", "z": "y"},)  # only y and z trade places
    on_nodes = ss.Topology({}, "nvlink", nodes=Nodes(4, ss.Link(25e9, 5e-6)))
    assert symmetry.of(cube, on_nodes) == ()  # groups placed on nodes: which axes a group spans decides


def _layouts(aval: Aval, mesh: ss.Mesh) -> list:
    """Every whole-axis layout of ``aval``, and each with every set of the axes it leaves free pending."""
    specs = list(value_specs(aval, mesh))
    pending = []
    for s in specs:
        used = {a.name for d in s.dims for a in d.axes}
        free = [a for a in mesh.axis_names if a not in used]
        for k in range(1, len(free) + 1):
            for axes in itertools.combinations(free, k):
                pending.append(dataclasses.replace(s, unreduced=tuple(AxisRef(a, None) for a in axes)))
    return specs + pending


@pytest.mark.parametrize("axes, shape, planned", [({"x": 2, "y": 2, "z": 2}, (4, 8), 0.4),
                                                  ({"x": 2, "y": 2, "z": 2}, (2, 6, 8), 0.4),
                                                  ({"x": 2, "y": 2, "z": 4}, (4, 8, 2), 0.6)])
def test_every_pair_costs_the_same_planned_itself_or_renamed_from_its_orbit(axes, shape, planned):
    mesh = ss.Mesh(axes)
    aval = Aval(shape, np.dtype("float32"))
    layouts = _layouts(aval, mesh)
    targets = [s for s in layouts if not s.unreduced]
    by_orbit, alone = ReshardCosts(UNIFORM, mesh.size, mesh=mesh), ReshardCosts(UNIFORM, mesh.size)
    assert by_orbit.renamings
    for s, t in itertools.product(layouts, targets):
        got = by_orbit.by_link(by_orbit.intern(s), by_orbit.intern(t), aval)
        want = alone.by_link(alone.intern(s), alone.intern(t), aval)
        assert list(got.items()) == list(want.items()), (s, t)
    assert len(by_orbit.orbits) < planned * len(layouts) * len(targets)  # the rest renamed, not planned


@pytest.mark.parametrize("axes", [{"x": 2, "y": 2, "z": 2}, {"x": 2, "y": 2, "z": 4}])
def test_a_search_builds_the_same_program_with_prices_per_orbit(axes):
    mesh = ss.Mesh(axes)
    program = trace(lambda x, w1, w2: np.maximum(x @ w1, 0) @ w2, ShapeDtype((16, 8), np.float32),
                    ShapeDtype((8, 32), np.float32), ShapeDtype((32, 8), np.float32), mesh=mesh)
    made = []
    for costs in (ReshardCosts(UNIFORM, mesh.size, mesh=mesh), ReshardCosts(UNIFORM, mesh.size)):
        model = Search(build_graph(program), mesh, costs, device_of(UNIFORM.device)).model
        rows = model.constraints()[0]
        made.append((model.costs(), rows.A.toarray(), np.asarray(rows.lb), np.asarray(rows.ub)))
    for a, b in zip(*made):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("axes, shape", [({"x": 2, "y": 2}, (4, 4)), ({"x": 8, "y": 32, "z": 32}, (4096, 4096))])
def test_the_search_is_not_symmetric_under_the_renamings(axes, shape):
    """Why the search is not solved on the orbits of the renamings (docs/autoshard.md, "Solve
    times", seventh session): a value's layouts split a dim over several axes in the mesh's order
    only, so a layout splitting one dim over two equal axes has no renamed image among them, and
    its prices are not its image's: from ``{a, b}`` to ``{a}`` (a gather over ``b``) differs from
    ``{a, b}`` to ``{b}`` (an all-to-all). Averaging an optimum over its orbit is then no point of
    the program. Should the layouts ever take both orders, this fails, and the orbit program
    becomes a relaxation with the whole's bound."""
    mesh = ss.Mesh(axes)
    renaming = symmetry.of(mesh, UNIFORM)[-1]
    a, b = mesh.axis_names[-2:]
    assert renaming[a] == b and renaming[b] == a
    aval = Aval(shape, np.dtype("float32"))
    specs = value_specs(aval, mesh)
    both = [s for s in specs if any({a, b} <= {r.name for r in d.axes} for d in s.dims)]
    assert both and all(symmetry.renamed(s, renaming) not in specs for s in both)
    assert all(symmetry.renamed(s, renaming) in specs for s in specs if s not in both)
    costs = ReshardCosts(UNIFORM, mesh.size, mesh.size <= 16, mesh)
    src = costs.intern(ss.Sharding(mesh, ((a, b), ())))
    to_a, to_b = (costs.seconds(src, costs.intern(ss.Sharding(mesh, ((c,), ()))), aval) for c in (a, b))
    assert to_a < to_b
