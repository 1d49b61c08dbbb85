"""Which ops may run on pending (unreduced) operands: delayed reduction.

A value pending over some axes is a set of contributions that combine with a reduce op. An op
may run on the contributions instead of the value when it commutes with that combination:
``op(a1 + a2, y) == op(a1, y) + op(a2, y)``. ``pending_ok(op, params, pending, reduce_op)`` says
whether that holds for the given pattern of pending operands; operands not pending can be made
pending locally (the value on the first device of each group, the identity elsewhere) when the
op needs all of them pending (``add`` of a partial sum and a replicated value, as DTensor does).

Float sums are not associative, so a delayed reduction may round differently from the single
device order; integer-valued test inputs keep every sum exact. So that they also keep every
*delayed* reduction exact, division passes a pending value only by a literal power of two
(``sum(c_i / 10)`` is not ``sum(c_i) / 10`` in floats, even for integer ``c_i``), and the
partitioner delays a reduction only when that moves strictly fewer bytes.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..reduce_ops import REDUCE_OPS

# ops that are the identity on data or move elements around (one array operand)
LAYOUT = {
    "transpose", "reshape", "broadcast_in_dim", "slice", "propagation_barrier", "sharding_constraint", "reshard",
}
# sum-linear ops where every array operand is pending (others are converted)
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


def pending_ok(op: str, params: dict, pending: Sequence[bool], array: Sequence[bool], reduce_op: str,
               divisor=None) -> str | None:
    """How ``op`` can run with the pending operands marked: ``"as_is"`` (only the marked operands
    pending), ``"all"`` (every array operand must be pending; convert the others), or None (the
    pending operands must be reduced first)."""
    if not any(pending):
        return "as_is"
    n_pending = sum(pending)
    n_array = sum(array)
    idem = REDUCE_OPS[reduce_op].idempotent and reduce_op != "avg"
    if op in LAYOUT and n_array == 1:
        return "as_is"
    if op == "pad" and pending[0]:
        if idem or params.get("padding_value") == REDUCE_OPS[reduce_op].identity(type(params.get("padding_value", 0.0))):
            return "as_is"
        return None
    if op == "dynamic_slice" and pending[0] and n_pending == 1:
        return "as_is"
    if op == "select" and not pending[0]:
        if reduce_op in ("sum", "avg") or idem:
            return "all" if n_pending < n_array - 1 else "as_is"
        return None
    if reduce_op in ("sum", "avg"):
        if op in SUM_ALL:
            return "as_is" if n_pending == n_array else "all"
        if op in SUM_ONE and n_pending == 1:
            return "as_is"
        if op == "div" and pending[0] and n_pending == 1 and _power_of_two(divisor):
            return "as_is"
        if op in REDUCE_SAME[reduce_op] and n_array == 1:
            return "as_is"
        return None
    same = REDUCE_SAME.get(reduce_op, set())
    if op in same:
        if n_array == 1:
            return "as_is"
        return "as_is" if n_pending == n_array else "all"
    if idem and op == "concatenate":
        return "as_is" if n_pending == n_array else "all"
    return None
