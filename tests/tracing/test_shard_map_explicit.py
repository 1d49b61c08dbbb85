"""``shard_map`` inside an explicit mesh (issue 27, seed 001): inputs are taken as its ``in_specs``
say, outputs are typed by its ``out_specs`` over the Explicit axes, and the program runs."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard import P

EXPLICIT = ss.make_mesh((2, 4), ("X", "Y"), axis_types=ss.AxisType.Explicit)
X = (np.arange(128) % 7 - 3).astype(np.float32).reshape(8, 16)


def _region(in_specs, out_specs, seen):
    def body(b):
        seen["local"] = str(ss.typeof(b))
        return b * 2

    def f(a):
        out = ss.shard_map(body, mesh=EXPLICIT, in_specs=in_specs, out_specs=out_specs)(a)
        seen["out"] = str(ss.typeof(out))
        return out + 1

    return f


def test_shard_map_on_a_typed_input_runs_and_types_its_output():
    seen = {}
    with ss.use_mesh(EXPLICIT):
        res = ss.run(ss.jit(_region(P("X", None), P("X", None), seen), in_shardings=P("X", None)), X, backend="local")
    assert seen == {"local": "float32[4,16]", "out": "float32[8@X,16]"}
    np.testing.assert_array_equal(res.outputs, X * 2 + 1)
    assert res.verify.ok and res.comm.total_bytes == 0  # the input already lies as in_specs says


@pytest.mark.parametrize("in_spec, typed, shown", [
    (P(None, "Y"), P("X", None), "float32[8,16@Y]"), (P("X", "Y"), P(None, None), "float32[8@X,16@Y]"),
])
def test_shard_map_moves_an_input_typed_otherwise(in_spec, typed, shown):
    seen = {}
    with ss.use_mesh(EXPLICIT):
        f = ss.jit(_region(in_spec, in_spec, seen), in_shardings=typed)
        res = ss.run(f, X, backend="local")
    assert seen["out"] == shown
    np.testing.assert_array_equal(res.outputs, X * 2 + 1)
