"""A user's own ops and reduce ops run on Ray device processes, which never imported the module
that registered them (runtime/user_entries.py ships them with the program)."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard import dtensor as dt
from simshard.ir.program import Aval
from simshard.ops import OPS, factor_rule
from simshard.partition import partition
from simshard.runtime.ray.user_entries import user_entries


@pytest.fixture
def cube():
    op = ss.register_op(
        "user_cube",
        lambda x, **_: (Aval(x.shape, x.dtype),),
        lambda x, **_: (x * x * x,),
        lambda ins, outs, **_: factor_rule("ab->ab", [ins[0].shape], [outs[0].shape]),
        doc="x^3",
    )
    yield op
    del OPS["user_cube"]


def test_only_user_entries_are_shipped(cube):
    mesh = ss.Mesh({"x": 2})
    spec = ss.NamedSharding(mesh, ss.P("x"))
    builtin = partition(ss.propagate(ss.trace(lambda a: a * 2, ss.ShapeDtype((4, 2)), in_shardings=spec)))
    assert user_entries(builtin) is None
    mine = partition(ss.propagate(ss.trace(lambda a: cube(a) + 1, ss.ShapeDtype((4, 2)), in_shardings=spec)))
    assert user_entries(mine) is not None


def test_user_op_and_user_reduction_run_on_ray(ray_session, cube):
    mesh = ss.Mesh({"x": 2, "y": 2})
    norm = dt.NormPartial(2)
    x = np.array([[3, 5], [4, 12], [6, 8], [8, 15]], dtype=np.float32)
    # an input pending a 2-norm over y (device (i, 0) holds the value, (i, 1) the identity), then the user's op
    res = ss.run(lambda a: cube(a), x, mesh=mesh, in_shardings=[dt.Shard(0), norm], backend="ray")
    assert res.verify.bitwise
    np.testing.assert_array_equal(res.outputs, x ** 3)
    assert [r.kind for r in res.comm.records][:1] == ["all_reduce"]

