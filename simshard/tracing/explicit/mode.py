"""Explicit mode inside a trace: which axes are explicit now, and typing each op as it is bound.

``begin(builder, inputs)`` is called by ``trace`` once the input tracers exist: it installs
``builder.on_bind`` (the typing hook) and checks the inputs at the jit boundary (JAX refuses
uneven shardings there). ``finish(builder, program)`` records every value's type in the Program
(``mode="explicit"``) when any op was typed.

Which axes are explicit is read from the *current* mesh at each bind: the ambient mesh
(``ss.set_mesh`` / ``ss.use_mesh``, which ``auto_axes`` / ``explicit_axes`` override for a
region), else the mesh the trace was given. Shardings built here always live on the trace's own
mesh, so all values of one program share one mesh whatever region they were made in.
"""

from __future__ import annotations

from typing import Sequence

from .. import context
from ...ir import trace_stack
from ...sharding.mesh import AxisType, Mesh
from ...ir.program import Literal, Value
from ...sharding.dims import Sharding
from . import rules
from .types import Spec, spec_of, to_sharding, unreduced_of


def current_mesh() -> Mesh | None:
    """The mesh whose axis types govern typing right now."""
    m = context.get_mesh()
    if m is not None:
        return m
    trace = trace_stack.current()
    return trace.mesh if trace is not None else None


def explicit_axes_now(mesh: Mesh | None = None) -> tuple[str, ...]:
    mesh = mesh if mesh is not None else current_mesh()
    return mesh.explicit_axes if mesh is not None else ()


def is_explicit(mesh: Mesh | None = None) -> bool:
    """True when the current mesh has at least one Explicit axis (types carry shardings)."""
    return bool(explicit_axes_now(mesh))


def type_spec(x, rank: int, mesh: Mesh | None = None) -> tuple[Spec, tuple[str, ...]]:
    """The type of ``x`` under the current axis types: its sharding over explicit axes only."""
    keep = explicit_axes_now(mesh)
    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, Sharding):
        return ((),) * rank, ()
    return spec_of(sharding, rank, keep), unreduced_of(sharding, keep)


def _base_mesh(builder, mesh: Mesh) -> Mesh:
    base = builder.mesh if builder.mesh is not None else mesh
    if not base.same_axes(mesh):
        return mesh
    return base


def on_bind(builder, eqn, inputs: Sequence) -> tuple[Sharding | None, ...]:
    """The typing hook: result shardings of ``eqn`` from its operands' types."""
    mesh = current_mesh()
    if mesh is None or not mesh.explicit_axes:
        return eqn.shardings
    shown = builder.__dict__.setdefault("explicit_shown", {})
    elementwise = _is_elementwise(eqn.op)
    operands = []
    for raw, v in zip(inputs, eqn.inputs):
        spec, unreduced = type_spec(raw, v.aval.ndim, mesh) if not isinstance(raw, Literal) else (((),) * v.aval.ndim, ())
        operands.append(rules.Operand(v.aval, spec, unreduced, shown.get(v) if elementwise and isinstance(v, Value) else None))
    keep = mesh.explicit_axes
    out = tuple(
        None if s is None else (spec_of(s, o.aval.ndim, keep), unreduced_of(s, keep))
        for s, o in zip(eqn.shardings, eqn.outputs)
    )
    params = dict(eqn.params)
    target = params.get("sharding")
    if eqn.op in ("reshard", "sharding_constraint") and isinstance(target, Sharding):
        params["_target"] = (spec_of(target, eqn.outputs[0].aval.ndim, keep), unreduced_of(target, keep))
    call = rules.OpCall(eqn.op, params, tuple(operands), tuple(o.aval for o in eqn.outputs), out, mesh)
    results = rules.type_results(call)
    base = _base_mesh(builder, mesh)
    # In a mixed mesh the type says nothing about the Auto axes: the dims stay open for them.
    is_open = bool(mesh.auto_axes)
    shardings = tuple(to_sharding(base, spec, unreduced, is_open) for spec, unreduced in results)
    types = builder.__dict__.setdefault("explicit_types", {})
    for v, s in zip(eqn.outputs, shardings):
        types[v] = s
    if eqn.op == "broadcast_in_dim" and out == (None,):
        # numpy-style broadcast (trailing dims): JAX would show the operand rank-promoted only
        (x,) = eqn.inputs
        lead = eqn.outputs[0].aval.ndim - x.aval.ndim
        if tuple(params["broadcast_dimensions"]) == tuple(range(lead, lead + x.aval.ndim)):
            shown[eqn.outputs[0]] = (1,) * lead + tuple(x.aval.shape)
    return shardings


def _is_elementwise(op: str) -> bool:
    from ...ops import get_op
    from ...ops.elementwise import elementwise_rule

    try:
        return get_op(op).rule is elementwise_rule
    except KeyError:
        return False


def begin(builder, inputs) -> None:
    """Install the typing hook on a new trace and check its inputs at the jit boundary."""
    if builder.on_bind is not None:
        return
    builder.on_bind = lambda eqn, ins: on_bind(builder, eqn, ins)
    mesh = context.get_mesh() or builder.mesh
    if mesh is None or not mesh.explicit_axes:
        return
    keep = mesh.explicit_axes
    types = builder.__dict__.setdefault("explicit_types", {})
    for t in inputs:
        s = t.sharding
        if s is None:
            continue
        spec, unreduced = spec_of(s, t.ndim), unreduced_of(s)
        rules.check_divisible(s.mesh, t.shape, spec, unreduced)
        types[t.value] = to_sharding(s.mesh, spec_of(s, t.ndim, keep), unreduced_of(s, keep), bool(mesh.auto_axes))
    builder.__dict__["explicit_inputs"] = True


def finish(builder, program):
    """The program with the explicit type of every value typed in explicit mode (``mode="explicit"``).

    Inputs without a sharding are replicated; values made where no axis was explicit (a full
    ``auto_axes`` region) have no type and are left to propagation. Unchanged when nothing was
    typed."""
    types = builder.__dict__.get("explicit_types")
    if not types and not builder.__dict__.get("explicit_inputs"):
        return program
    full = dict(types or {})
    mesh = builder.mesh or context.get_mesh()
    if mesh is not None:
        for v in program.inputs:
            full.setdefault(v, Sharding.replicated_on(mesh, v.aval.ndim))
    return program.with_shardings(full, mode="explicit")


__all__ = ["AxisType", "begin", "current_mesh", "explicit_axes_now", "finish", "is_explicit", "on_bind", "type_spec"]
