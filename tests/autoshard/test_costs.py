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
