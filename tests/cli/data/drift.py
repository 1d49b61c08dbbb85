"""A function that is not a function: each call scales by how often it was called, so the traced
program (first call) and the numpy reference (a later call) disagree: verification must fail."""

from simshard import P
import simshard as ss
from simshard.programs import ProgramDef, Strategy

CALLS = [0]


def f(a):
    CALLS[0] += 1
    return a * float(CALLS[0])


PROGRAM = ProgramDef(
    name="drift", about="a * (number of calls so far)", fn=f, inputs=lambda: (ss.exact_inputs([(4, 4)], seed=0)[0],),
    mesh={"x": 2}, strategies=(Strategy("rows", "rows over x", in_shardings=(P("x", None),)),),
)
