"""Random (not exact) float inputs: sharding the contraction over x reorders float additions, so
the result differs from numpy's by a few ULP, a legitimate reassociation (``--exact`` fails it)."""

import numpy as np

from simshard import P
from simshard.programs import ProgramDef, Strategy


def f(a, b):
    return a @ b


def inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)


PROGRAM = ProgramDef(
    name="floats", about="a @ b on random floats", fn=f, inputs=inputs, mesh={"x": 2, "y": 4},
    strategies=(Strategy("contract", "contraction over x", in_shardings=(P(None, "x"), P("x", None))),),
)
