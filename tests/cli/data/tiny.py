"""A small program for the command-line tests: ``(a @ b) * 2`` on a 2x2 mesh, three ways.

* ``rows``: a's rows over x, b's columns over y; the result gathered whole on every device
  (out_shardings P()), so collectives over x and over y;
* ``contract``: the contraction over x, one all-reduce;
* ``jit``: the same as ``contract``, given as a ``build`` function returning an ``ss.jit``.
"""

import simshard as ss
from simshard import P
from simshard.programs import ProgramDef, Strategy


def f(a, b):
    return (a @ b) * 2.0


def build_jit(mesh):
    return ss.jit(f, in_shardings=(ss.NamedSharding(mesh, P(None, "x")), ss.NamedSharding(mesh, P("x", None))))


PROGRAM = ProgramDef(
    name="tiny",
    about="(a @ b) * 2, exact inputs",
    fn=f,
    inputs=lambda: tuple(ss.exact_inputs([(8, 8), (8, 4)], seed=1)),
    mesh={"x": 2, "y": 2},
    strategies=(
        Strategy("rows", "rows over x, columns over y, gathered whole", in_shardings=(P("x", None), P(None, "y")),
                 out_shardings=P()),
        Strategy("contract", "contraction over x: one all-reduce", in_shardings=(P(None, "x"), P("x", None))),
        Strategy("jit", "contract, as an ss.jit built for the mesh", build=build_jit),
    ),
)
