"""``prepare``: the program ``ss.run`` partitions, without running it."""

import numpy as np
import pytest

import simshard as ss
from simshard.propagate.prepare import prepare


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def test_prepare_gives_the_program_a_run_partitions():
    mesh = ss.Mesh({"x": 2, "y": 4})
    args = ss.exact_inputs([(8, 16), (16, 32), (32, 16)], seed=0)
    shardings = ('<@mesh, [{"x"}, {}]>', ss.P(None, "y"), ss.P("y", None))  # Shardy text and P mixed
    program, leaves = prepare(mlp, *args, mesh=mesh, in_shardings=shardings)
    res = ss.run(mlp, *args, mesh=mesh, in_shardings=shardings, backend="local")
    assert program.pretty() == res.program.pretty()
    assert "f32[8@x,32@y]" in program.pretty()  # the hidden layer: batch over x, d_ff over y
    assert all(np.array_equal(a, b) for a, b in zip(leaves, args))


def test_shardy_text_needs_a_mesh():
    with pytest.raises(ss.ShardingError, match="Shardy text; pass mesh="):
        prepare(mlp, *ss.exact_inputs([(8, 16), (16, 32), (32, 16)]), in_shardings=('<@mesh, [{"x"}, {}]>', None, None))


def test_shardings_go_to_jit_or_prepare_not_both():
    f = ss.jit(mlp, in_shardings=(ss.P("x", None), None, None))
    with pytest.raises(TypeError, match="not both"):
        prepare(f, *ss.exact_inputs([(8, 16), (16, 32), (32, 16)]), mesh=ss.Mesh({"x": 2}),
                in_shardings=(ss.P("x", None), None, None))
