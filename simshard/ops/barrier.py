"""``propagation_barrier``: identity that lets shardings cross only in ``allowed_direction``;
``stop_gradient``: identity that reverse mode does not cross (``lax.stop_gradient``).

Shardy's ``sdy.propagation_barrier``: the value passes through unchanged; propagation may carry
shardings across it only FORWARD (operand -> result), BACKWARD (result -> operand), BOTH or NONE.
Its factor rule is the elementwise one; the direction is read by ``simshard.propagate``.
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from .elementwise import elementwise_rule
from .registry import define_vjp, register_op

DIRECTIONS = ("NONE", "FORWARD", "BACKWARD", "BOTH")


def _eval(x: Aval, *, allowed_direction="NONE", **_):
    if str(allowed_direction).upper() not in DIRECTIONS:
        raise ValueError(f"propagation_barrier: allowed_direction must be one of {', '.join(DIRECTIONS)}, got {allowed_direction!r}")
    return (Aval(x.shape, x.dtype),)


register_op(
    "propagation_barrier",
    _eval,
    lambda x, **_: (np.asarray(x),),
    elementwise_rule,
    doc="identity; propagation crosses it only in allowed_direction",
)



define_vjp("propagation_barrier", lambda ct, x, *, out, **_: (lambda: ct,))


register_op(
    "stop_gradient",
    lambda x, **_: (Aval(x.shape, x.dtype),),
    lambda x, **_: (np.asarray(x),),
    elementwise_rule,
    doc="identity; its operand gets no cotangent through it (a constant of the derivative)",
    vjp=lambda ct, x, *, out, **_: (None,),
)
