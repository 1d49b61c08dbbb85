"""A program whose function raises while it is traced: exit 4 with the traceback, not exit 1."""

import simshard as ss
from simshard import P
from simshard.programs import ProgramDef, Strategy


def f(a):
    raise ValueError("the program's own mistake")


PROGRAM = ProgramDef(name="raises", about="raises when traced", fn=f, inputs=lambda: (ss.exact_inputs([(4,)])[0],),
                     mesh={"x": 2}, strategies=(Strategy("rows", "rows over x", in_shardings=(P("x"),)),))
