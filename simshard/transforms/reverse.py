"""Reverse mode over the equations a function recorded: the tape is the trace itself.

``backward`` walks the equations of one call in reverse, asks each op's ``vjp`` (its registry
entry) for the cotangents of the operands being differentiated and records them as new
equations of the same trace. Only values that depend on the differentiated inputs, with a float
dtype, carry cotangents (integer and bool values are constants of the derivative, as JAX's
float0). A region marked by ``checkpoint`` is recomputed before its backward pass instead of
keeping its intermediates alive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import TraceError
from ..ir.program import Eqn, Literal, Value
from ..ops import get_op
from ..ops.cotangents import differentiable
from ..tracing.state import Builder, Tracer


@dataclass(frozen=True)
class Remat:
    """Equations ``start``..``stop`` of a trace (a ``checkpoint`` call): recomputed in backward."""

    start: int
    stop: int


def active_values(eqns: Sequence[Eqn], xs: Sequence[Value]) -> set[Value]:
    """The values that depend on ``xs`` and may carry a cotangent (float or complex)."""
    active = {x for x in xs if differentiable(x.aval.dtype)}
    for e in eqns:
        if any(isinstance(i, Value) and i in active for i in e.inputs):
            active.update(o for o in e.outputs if differentiable(o.aval.dtype))
    return active


def backward(builder: Builder, start: int, stop: int, xs: Sequence[Value], outs: Sequence[Value],
             cts: Sequence[Tracer | None]) -> list[Tracer | None]:
    """Cotangents of ``xs`` (None: no dependence) given those of ``outs``, through the equations
    ``start``..``stop`` of ``builder`` (one call of the function being differentiated)."""
    eqns = builder.eqns[start:stop]
    active = active_values(eqns, xs)
    ct: dict[Value, Tracer] = {}
    for o, c in zip(outs, cts):
        if c is not None and o in active:
            _accumulate(ct, o, c, "an output's cotangent")
    regions = [r for r in getattr(builder, "remat", ()) if start <= r.start and r.stop <= stop]
    k = len(eqns)
    while k > 0:
        region = next((r for r in regions if r.stop - start == k), None)
        if region is not None:
            _recompute(builder, builder.eqns[region.start:region.stop], active, ct)
            k = region.start - start
            continue
        k -= 1
        _step(builder.tracer, eqns[k], active, ct)
    return [ct.get(x) for x in xs]


def backward_eqns(eqns: Sequence[Eqn], lookup, xs: Sequence[Value], outs: Sequence[Value],
                  cts: Sequence[Tracer | None]) -> list[Tracer | None]:
    """``backward`` over equations of another program (a scan's body), whose values ``lookup``
    gives as tracers of the current trace (their saved residuals): the cotangents are recorded
    in the current trace."""
    active = active_values(eqns, xs)
    ct: dict[Value, Tracer] = {}
    for o, c in zip(outs, cts):
        if c is not None and o in active:
            _accumulate(ct, o, c, "an output's cotangent")
    for e in reversed(eqns):
        _step(lookup, e, active, ct)
    return [ct.get(x) for x in xs]


def _step(lookup, e: Eqn, active: set[Value], ct: dict[Value, Tracer]) -> None:
    """The cotangents ``e`` passes to its operands."""
    if not any(o in ct for o in e.outputs):
        return
    need = [isinstance(i, Value) and i in active for i in e.inputs]
    if not any(need):
        return
    op = get_op(e.op)
    operands = ", ".join(str(i.aval) for i in e.inputs)
    if op.vjp is None:
        raise TraceError(f"reverse mode: op {e.op}({operands}) has no derivative rule; give it one with "
                         f"ss.ops.define_vjp({e.op!r}, rule), or keep it out of what is differentiated")
    ins = [lookup(i) if isinstance(i, Value) else _literal(i) for i in e.inputs]
    if len(e.outputs) == 1:
        (o,) = e.outputs
        rules = op.vjp(ct.pop(o), *ins, out=lookup(o), **e.kw)
    else:  # an op of several results (scan) gets a cotangent, or None, per result
        cts = tuple(ct.pop(o, None) for o in e.outputs)
        rules = op.vjp(cts, *ins, out=tuple(lookup(o) for o in e.outputs), **e.kw)
    if len(rules) != len(e.inputs):
        raise TraceError(f"the derivative rule of {e.op} gave {len(rules)} entries for {len(e.inputs)} operands")
    for i, wanted, rule in zip(e.inputs, need, rules):
        if wanted and rule is not None:
            _accumulate(ct, i, rule(), f"{e.op}'s derivative rule")


def _recompute(builder: Builder, eqns: Sequence[Eqn], active: set[Value], ct: dict[Value, Tracer]) -> None:
    """Rematerialise a checkpointed region: record its equations again (new values), move the
    cotangents of its results onto the copies and run the backward pass through the copies."""
    copies: dict[Value, Value] = {}
    mark = len(builder.eqns)
    for e in eqns:
        ins = [builder.tracer(copies.get(i, i)) if isinstance(i, Value) else _literal(i) for i in e.inputs]
        outs = builder.bind(e.op, *ins, shardings=e.shardings, **e.kw)
        outs = outs if isinstance(outs, tuple) else (outs,)
        copies.update((o, t.value) for o, t in zip(e.outputs, outs))
    for v in list(ct):
        if v in copies:
            ct[copies[v]] = ct.pop(v)
    active.update(copies[v] for v in list(active) if v in copies)
    for e in reversed(builder.eqns[mark:]):
        _step(builder.tracer, e, active, ct)


def _accumulate(ct: dict[Value, Tracer], v: Value, g, where: str) -> None:
    if tuple(np.shape(g)) != v.aval.shape:
        raise TraceError(f"{where} gave a cotangent of shape {tuple(np.shape(g))} for a value of shape {v.aval.shape}")
    ct[v] = g if v not in ct else ct[v] + g


def _literal(lit: Literal):
    return np.asarray(lit.value)
