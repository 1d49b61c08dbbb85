"""Which ops may run on pending (unreduced) operands: delayed reduction.

A value pending over some axes is a set of contributions that combine with a reduce op. An op
may run on the contributions instead of the value when it commutes with that combination:
``op(a1 + a2, y) == op(a1, y) + op(a2, y)``. ``pending_ok(op, params, kinds, reduce_op)`` says
whether that holds for the given operands (pending, plain values, literals) and which operands
must then be pending: a plain value can be made pending locally (the value on the first device
of each group, the identity elsewhere) when the op needs all of them pending (``add`` of a
partial sum and a replicated value, as DTensor does). A literal stays what it is on every
device, so ``x + 1.0`` of a pending sum would add 1.0 once per contribution: not linear (unless
the literal is the identity, or the reduction is idempotent).

Float sums are not associative, so a delayed reduction may round differently from the single
device order; integer-valued test inputs keep every sum exact. So that they also keep every
*delayed* reduction exact, division passes a pending value only by a literal power of two
(``sum(c_i / 10)`` is not ``sum(c_i) / 10`` in floats, even for integer ``c_i``), and the
partitioner delays a reduction only when that moves strictly fewer bytes.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..sharding.reduce_ops import REDUCE_OPS

# ops that are the identity on data or move elements around (one array operand)
LAYOUT = {
    "transpose", "reshape", "broadcast_in_dim", "slice", "propagation_barrier", "sharding_constraint", "reshard",
    "stop_gradient",
}
# sum-linear ops where every operand is pending (values are converted; a literal only if it is
# the identity, or under an idempotent reduction where every device may hold the value itself)
SUM_ALL = {"add", "sub", "neg", "concatenate"}
# sum-linear ops linear in each operand separately: exactly one operand pending
SUM_ONE = {"mul", "dot_general", "conv2d"}
REDUCE_SAME = {"sum": {"reduce_sum", "cumsum"}, "avg": {"reduce_sum"}, "max": {"reduce_max", "max"},
               "min": {"reduce_min", "min"}, "prod": {"reduce_prod", "mul"}}


def _power_of_two(x) -> bool:
    """A literal whose division is exact (so dividing contributions first changes no bits)."""
    if x is None:
        return False
    try:
        v = abs(float(x))
    except (TypeError, ValueError):
        return False
    m, _ = math.frexp(v)
    return v > 0 and m == 0.5


def pending_ok(op: str, params: dict, kinds: Sequence[str], reduce_op: str) -> tuple[bool, ...] | None:
    """Can ``op`` run on contributions? ``kinds`` says per operand ``"pending"``, ``"value"`` or
    ``"literal"``. The answer is, per operand, whether it must be pending when the op runs
    (values not yet pending are made pending locally), or None: reduce first."""
    pend = [k == "pending" for k in kinds]
    if not any(pend):
        return tuple(pend)
    n = len(kinds)
    values = [k != "literal" for k in kinds]
    lits = [i for i, k in enumerate(kinds) if k == "literal"]
    ident = REDUCE_OPS[reduce_op].identity(np.float64)
    idem = REDUCE_OPS[reduce_op].idempotent  # avg too: every device may hold the value itself

    def lit_is_identity(i) -> bool:
        return float(np.asarray(params_lit[i])) == float(ident)

    params_lit = {i: params.get(f"__literal{i}") for i in lits}
    only_first = pend[0] and not any(pend[1:])
    if op in LAYOUT:
        return tuple(pend) if only_first else None
    if op == "pad":
        ok = idem or float(params.get("padding_value", 0.0)) == float(ident)
        return tuple(pend) if only_first and ok else None
    if op == "dynamic_slice":
        return tuple(pend) if only_first else None
    if op == "select":
        if pend[0]:
            return None
        if not (reduce_op in ("sum", "avg") or idem):
            return None
        if any(not (idem or lit_is_identity(i)) for i in lits if i > 0):
            return None
        return (False,) + tuple(values[1:])
    if reduce_op in ("sum", "avg"):
        if op in SUM_ALL:
            if any(not (idem or lit_is_identity(i)) for i in lits):
                return None
            return tuple(values)
        if op in SUM_ONE:
            return tuple(pend) if sum(pend) == 1 else None
        if op == "div":
            return tuple(pend) if only_first and n == 2 and kinds[1] == "literal" and _power_of_two(params_lit[1]) else None
        if op in REDUCE_SAME[reduce_op] and n == 1:
            return tuple(pend)
        return None
    same = REDUCE_SAME.get(reduce_op, set())
    if op in same or (idem and op == "concatenate"):
        if n == 1:
            return tuple(pend)
        if lits and not idem:
            return None
        return tuple(values)
    return None
