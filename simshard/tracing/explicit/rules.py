"""Per-op typing rules: the operands' sharding types -> the result's, at trace time.

Every op gets a rule. Ops without one of their own are typed generically from their factor rule
(``ops/registry.py``): each factor takes the *consensus* of the operand dims it appears in (every
non-None entry identical, None gives way to an axis; size-1 dims drop out), reduction factors
vanish with their axes, need-replication factors must be unsharded, and each result dim takes its
factor's axes. The op-specific rules below are the cases where JAX decides otherwise (dot_general's
contracting dims, select, concatenate, reshape, gather, sort/cumsum, slicing) and live in
``op_rules``. After the rule, a result naming one axis twice is refused ("illegally sharded
result").

A rule gets an ``OpCall`` and returns one ``(spec, unreduced)`` per result. ``out`` holds the
``out_sharding`` the user gave for each result (already resolved to a spec), or None.
``register_typing_rule(op, fn)`` adds or replaces a rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...sharding.mesh import Mesh
from ...ops import get_op
from ...ops.factors import NEED_REPLICATION, REDUCTION
from ...ir.program import Aval
from .errors import DuplicateSpecError, ShardingTypeError
from .types import (
    DimSpec,
    Spec,
    dim_size,
    duplicates,
    named_repr,
    partitions,
    type_str,
)

Result = tuple[Spec, tuple[str, ...]]


@dataclass(frozen=True)
class Operand:
    """One operand as a typing rule sees it: its abstract value and its sharding type."""

    aval: Aval
    spec: Spec
    unreduced: tuple[str, ...] = ()
    # How JAX would show this operand: numpy broadcasting in JAX only adds leading size-1 dims
    # before an elementwise op, where simshard broadcasts fully (same types, other shapes).
    shown_shape: tuple[int, ...] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    def short(self) -> str:
        return type_str(self.shown_shape or self.aval.shape, self.aval.dtype, self.spec, self.unreduced, short=True)

    def long(self) -> str:
        return type_str(self.shown_shape or self.aval.shape, self.aval.dtype, self.spec, self.unreduced)

    def named(self, mesh) -> str:
        return named_repr(mesh, self.spec, self.unreduced)


@dataclass(frozen=True)
class OpCall:
    """One op application being typed: the op, its parameters, its operands' types, its results'
    abstract values, the user's ``out_sharding`` per result (or None) and the mesh."""

    op: str
    params: dict[str, Any]
    operands: tuple[Operand, ...]
    out_avals: tuple[Aval, ...]
    out: tuple[Result | None, ...]
    mesh: Mesh

    def err(self, message: str) -> ShardingTypeError:
        return ShardingTypeError(message, op=self.op)


RULES: dict[str, Callable[[OpCall], Sequence[Result]]] = {}


def register_typing_rule(op: str, fn: Callable[[OpCall], Sequence[Result]] | None = None):
    """Give ``op`` its own explicit-mode typing rule (usable as a decorator)."""

    def deco(f):
        RULES[op] = f
        return f

    return deco(fn) if fn is not None else deco


def rule(*ops: str):
    """Register the decorated function as the typing rule of each of ``ops``."""

    def deco(f):
        for op in ops:
            RULES[op] = f
        return f

    return deco


# -- running a rule --------------------------------------------------------------------------------
def type_results(call: OpCall) -> list[Result]:
    """The result types of one op, or ShardingTypeError / ValueError as JAX raises them."""
    fn = RULES.get(call.op, factor_typing)
    results = [(tuple(tuple(d) for d in s), tuple(u)) for s, u in fn(call)]
    for (spec, unreduced), aval in zip(results, call.out_avals):
        if duplicates(spec, unreduced):
            ins = ", ".join(o.short() for o in call.operands)
            out = type_str(aval.shape, aval.dtype, spec, unreduced, short=True)
            raise call.err(f"{call.op} operation with inputs: {ins} produces an illegally sharded result: {out}")
    for (spec, _), aval in zip(results, call.out_avals):
        check_divisible(call.mesh, aval.shape, spec)
    return results


def check_divisible(mesh: Mesh, shape: Sequence[int], spec: Spec, unreduced: Sequence[str] = ()) -> None:
    """JAX keeps types even: every sharded dim must divide by its axes' product (ValueError)."""
    for d, (n, s) in enumerate(zip(shape, spec)):
        if not s:
            continue
        k = dim_size(mesh, s)
        if n % k:
            raise ValueError(
                f"Sharding spec {tuple(s)} implies that array axis {d} is partitioned {k} times, but does not "
                f"evenly divide the dimension size {n}. Got shape: {tuple(shape)} and sharding "
                f"{named_repr(mesh, spec, unreduced)}"
            )


def given(call: OpCall) -> list[Result] | None:
    """The user's out_sharding for every result, when they gave one for all."""
    if call.out and all(o is not None for o in call.out):
        return list(call.out)  # type: ignore[arg-type]
    return None


def no_unreduced(call: OpCall) -> None:
    """Refuse an unreduced operand (the ops whose JAX rule cannot carry a pending reduction)."""
    for o in call.operands:
        if o.unreduced:
            raise call.err(
                f"{call.op} cannot take an unreduced operand ({o.short()}); reshard it first, e.g. "
                "`ss.reshard(x, P(...))`, which performs the pending reduction"
            )


# -- the generic rule: factor consensus -------------------------------------------------------------
def broadcast_conflict(call: OpCall) -> ShardingTypeError:
    specs = ", ".join(str(partitions(o.spec)) for o in call.operands if o.ndim)
    return call.err(f"{call.op} got incompatible shardings for broadcasting: {specs}.")


def consensus(entries: Sequence[DimSpec]) -> DimSpec | None:
    """Every non-empty entry identical -> it (or ``()``); a disagreement -> None."""
    out: DimSpec = ()
    for e in entries:
        if not e:
            continue
        if out and e != out:
            return None
        out = e
    return out


def factor_typing(call: OpCall) -> list[Result]:
    """Type any op from its factor rule (per-factor consensus)."""
    user = given(call)
    if user is not None:
        return user
    no_unreduced(call)
    opdef = get_op(call.op)
    frule = opdef.factor_rule([o.aval for o in call.operands], list(call.out_avals), **call.params)
    sizes = frule.sizes
    seen: dict[str, list[DimSpec]] = {}
    for o, dims in zip(call.operands, frule.operands):
        for d, fs in enumerate(dims):
            s = o.spec[d]
            if o.shape[d] == 1 and not s:
                continue
            live = [f for f in fs if sizes[f] != 1]
            if len(live) == 1 and not (set(live) & frule.inexact and not s):
                seen.setdefault(live[0], []).append(s)
            elif s:
                raise call.err(
                    f"{call.op}: cannot infer the result sharding when dimension {d} of operand {o.short()} is "
                    "sharded (it maps to several factors of the op). Please specify the output sharding via "
                    "`out_sharding`, or wrap the op in `ss.auto_axes`"
                )
    fspec: dict[str, DimSpec] = {}
    for f, entries in seen.items():
        c = consensus(entries)
        if c is None:
            raise broadcast_conflict(call)
        if c and frule.kind(f) == NEED_REPLICATION:
            ins = ", ".join(o.short() for o in call.operands)
            raise call.err(
                f"{call.op} needs the whole of a dimension that is sharded over {', '.join(c)}: inputs {ins}. "
                "Reshard that dimension to None first (`ss.reshard`), or specify `out_sharding`"
            )
        fspec[f] = c
    out: list[Result] = []
    for dims in frule.results:
        spec = []
        for d, fs in enumerate(dims):
            live = [f for f in fs if sizes[f] != 1]
            parts = [fspec.get(f, ()) for f in live if frule.kind(f) != REDUCTION]
            sharded = [p for p in parts if p]
            if len(sharded) > 1 or (sharded and len(live) > 1 and parts[0] != sharded[0]):
                raise call.err(
                    f"{call.op}: cannot infer the sharding of result dimension {d} (it merges several sharded "
                    "factors). Please specify the output sharding via `out_sharding`"
                )
            spec.append(sharded[0] if sharded else ())
        out.append((tuple(spec), ()))
    return out


__all__ = [
    "DuplicateSpecError", "OpCall", "Operand", "RULES", "ShardingTypeError", "check_divisible", "factor_typing",
    "register_typing_rule", "type_results",
]
