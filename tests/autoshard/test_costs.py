"""The search's prices: a reshard's seconds from the planner's plan (planned on a small shape of
the same divisibility, scaled), and its closed form where the planner's structured path is one
collective per axis."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard.autoshard.candidates import local_bytes
from simshard.autoshard.closed_form import closed_form_seconds
from simshard.autoshard.costs import ReshardCosts, plan_seconds
from simshard.ir.program import Aval
from simshard.sharding.dims import Sharding

MESH = ss.Mesh({"x": 2, "y": 4})
TOPOLOGY = ss.Topology({"x": ss.Link(1e9, 1e-6), "y": ss.Link(4e9, 2e-6)})
AVAL = Aval((8, 16, 4), np.float32)


def sh(*dims, unreduced=()):
    return Sharding(MESH, dims, unreduced=unreduced)


MOVES = [  # (from, to, what the planner runs)
    (sh(("x",), (), ()), sh((), (), ())),  # all-gather over x
    (sh((), ("y",), ()), sh((), (), ())),  # all-gather over y
    (sh((), (), ()), sh(("x",), ("y",), ())),  # local slices
    (sh(("x",), (), ()), sh((), ("x",), ())),  # all-to-all over x
    (sh((), (), (), unreduced=("y",)), sh((), ("y",), ())),  # reduce-scatter over y
    (sh((), (), (), unreduced=("x",)), sh((), (), ())),  # all-reduce over x
    (sh(("x",), (), (), unreduced=("y",)), sh(("x",), (), ())),  # all-reduce over y, x kept
    (sh(("x", "y"), (), ()), sh(("x",), (), ())),  # the minor axis gathered
    (sh((), (), ()), sh(("y", "x"), (), ())),  # local slices, minor axis first: nothing moves
    (sh(("y",), (), ()), sh(("y", "x"), (), ())),  # a minor axis sliced in after the kept one
    (sh(("y",), (), ()), sh(("x", "y"), (), ())),  # a major axis put before the kept one: a permute
]


@pytest.mark.parametrize("src, dst", MOVES, ids=range(len(MOVES)))
def test_the_closed_form_is_the_planners_plan_for_one_collective_per_axis(src, dst):
    planned = plan_seconds(src, dst, AVAL.shape, AVAL.dtype, TOPOLOGY)
    closed = closed_form_seconds(src, dst, local_bytes(src, AVAL), TOPOLOGY)
    assert closed.keys() == planned.keys()
    for axes in planned:
        assert closed[axes] == pytest.approx(planned[axes], rel=1e-12)


@pytest.mark.parametrize("src, dst", MOVES, ids=range(len(MOVES)))
def test_a_pair_planned_on_a_small_shape_costs_what_the_whole_shape_costs(src, dst):
    big = Aval((8 * 64, 16 * 8, 4 * 32), np.float32)
    whole = plan_seconds(src, dst, big.shape, big.dtype, TOPOLOGY)
    small = ReshardCosts(TOPOLOGY, MESH.size).by_link(src, dst, big)
    assert small.keys() == whole.keys()
    for axes in whole:
        assert small[axes] == pytest.approx(whole[axes], rel=1e-12)


MESH3 = ss.Mesh({"x": 2, "y": 2, "z": 2})


@pytest.mark.parametrize("kept", [(), ("x",)])
@pytest.mark.parametrize("added", [("z", "y"), ("y", "z"), ("z", "x", "y")])
def test_axes_sliced_in_out_of_mesh_order_cost_nothing_as_planned(kept, added):
    """A dim held whole split over several axes in any order is a local slice for the planner;
    the closed form once charged a collective-permute where the order was not the mesh's (on
    7B over 8 x 32 x 32, 10.3 us for a slice, so a 2-hop through a layout between was cheaper)."""
    added = tuple(a for a in added if a not in kept)
    src = Sharding(MESH3, (kept, ()))
    dst = Sharding(MESH3, (kept, added))
    aval = Aval((8, 8), np.float32)
    assert plan_seconds(src, dst, aval.shape, aval.dtype, TOPOLOGY) == {}
    assert closed_form_seconds(src, dst, local_bytes(src, aval), TOPOLOGY) == {}
