"""Interpreting a jaxpr inside a simshard trace: each equation's primitive bound as simshard's op of
the same meaning (``jax_primitives.PRIMITIVES``), so the function it defines is an ordinary traced
function that ``ss.run``, ``ss.jit`` and ``ss.estimate`` take.

Jaxprs are read by duck typing (``eqns``, ``invars``, ``outvars``, ``constvars``, ``primitive``,
``params``, ``source_info``); jax itself is imported only to name a source line.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..errors import ShardingError, TraceError
from ..tracing.explicit import mode as explicit_mode
from ..tracing.state import Tracer
from .common import FrameworkType, UnsupportedOpError, check_results, unsupported, where_text
from .jax_primitives import PRIMITIVES
from .jax_structured import place, stated_sharding


class JaxEqn(NamedTuple):
    """One equation as a primitive's rule sees it."""

    name: str
    params: dict
    out_types: tuple[FrameworkType, ...]
    where: str  # the user's source line, "file:line (function)"
    interpret: Callable[..., list]  # interpret(jaxpr_or_closed, args, consts=()) -> outputs


def source_line(eqn) -> str:
    """The user's line that made ``eqn`` (JAX's own summary of its source info), or ""."""
    try:
        from jax._src import source_info_util  # the one place JAX keeps user frames

        return str(source_info_util.summarize(eqn.source_info))
    except Exception:  # noqa: BLE001  (an older or newer JAX: no line rather than no import)
        return ""


def framework_type(aval) -> FrameworkType:
    return FrameworkType(tuple(int(s) for s in aval.shape), np.dtype(aval.dtype))


def _is(var, kind: str) -> bool:
    return type(var).__name__ == kind


def open_jaxpr(jaxpr) -> tuple[Any, list]:
    """A ClosedJaxpr's jaxpr and consts, or an open jaxpr with none."""
    if hasattr(jaxpr, "jaxpr") and hasattr(jaxpr, "consts"):
        return jaxpr.jaxpr, [np.asarray(c) for c in jaxpr.consts]
    return jaxpr, []


def interpret(jaxpr, args: Sequence, consts: Sequence = ()) -> list:
    """The outputs of ``jaxpr`` on ``args`` (Tracers or arrays), binding simshard ops in the current trace."""
    inner, closed = open_jaxpr(jaxpr)
    consts = list(consts) + closed
    env: dict = {}
    if len(args) != len(inner.invars):
        raise TraceError(f"jaxpr takes {len(inner.invars)} arguments, got {len(args)}")
    for var, value in zip(list(inner.constvars) + list(inner.invars), consts + list(args)):
        env[var] = value

    def read(var):
        if _is(var, "Literal"):
            return np.asarray(var.val, dtype=np.dtype(var.aval.dtype))
        return env[var]

    for eqn in inner.eqns:
        outs = _apply(eqn, [read(v) for v in eqn.invars], PRIMITIVES)
        for var, value in zip(eqn.outvars, outs):
            if not _is(var, "DropVar"):
                env[var] = value
    return [read(v) for v in inner.outvars]


def _apply(eqn, args: list, table: dict) -> list:
    """One equation bound as simshard ops; its results checked against JAX's types."""
    name, where = eqn.primitive.name, source_line(eqn)
    rule = table.get(name)
    if rule is None:
        raise unsupported("JAX", name, "no simshard op has its meaning (simshard/importers/jax_primitives.py lists "
                          "the primitives it imports)", where)
    types = tuple(framework_type(v.aval) for v in eqn.outvars)
    try:
        out = rule(JaxEqn(name, dict(eqn.params), types, where, interpret), *args)
    except UnsupportedOpError:
        raise
    except ShardingError as e:
        raise ShardingError(e.rule, f"{e.detail}{where_text(where)}", axis=e.axis, dim=e.dim) from None
    except (TraceError, ValueError, TypeError) as e:
        raise UnsupportedOpError(f"JAX op {name!r}: {e}{where_text(where)}") from e
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    check_results("JAX", name, outs, types, where)
    return _as_typed(outs, eqn.outvars, where) if explicit_mode.is_explicit() else outs


def _as_typed(outs: list, outvars, where: str) -> list:
    """In explicit mode, each result with the sharding type JAX gave it (its ``out_sharding``, a
    rule of JAX's that simshard's explicit mode types otherwise): resharded where they differ."""
    typed = []
    for value, var in zip(outs, outvars):
        stated = getattr(var.aval, "sharding", None)
        if isinstance(value, Tracer) and getattr(stated, "spec", None) is not None and value.sharding is not None:
            what = f"the type JAX gives {where or 'a result'}"
            if str(stated_sharding(value, stated, what)) != str(value.sharding):
                value = place(value, stated, what, hard=True)
        typed.append(value)
    return typed
