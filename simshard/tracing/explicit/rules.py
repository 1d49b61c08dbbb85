"""Per-op typing rules: the operands' sharding types -> the result's, at trace time.

Every op gets a rule. Ops without one of their own are typed generically from their factor rule
(``ops/registry.py``): each factor takes the *consensus* of the operand dims it appears in (every
non-None entry identical, None gives way to an axis; size-1 dims drop out), reduction factors
vanish with their axes, need-replication factors must be unsharded, and each result dim takes its
factor's axes. The op-specific rules below are the cases where JAX decides otherwise (dot_general's
contracting dims, select, concatenate, reshape, gather, sort/cumsum, slicing). After the rule, a
result naming one axis twice is refused ("illegally sharded result").

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
    p_repr,
    partitions,
    replicated,
    type_str,
)

Result = tuple[Spec, tuple[str, ...]]


@dataclass(frozen=True)
class Operand:
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


def _no_unreduced(call: OpCall) -> None:
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
    _no_unreduced(call)
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


# -- creation -------------------------------------------------------------------------------------
@rule("iota", "full", "constant")
def _nullary(call: OpCall) -> list[Result]:
    user = given(call)
    if user is not None:
        return user
    return [(replicated(a.ndim), ()) for a in call.out_avals]


# -- annotations ----------------------------------------------------------------------------------
@rule("reshard")
def _reshard(call: OpCall) -> list[Result]:
    user = given(call)
    if user is not None:
        return user
    return [call.params["_target"]]


@rule("sharding_constraint")
def _constraint(call: OpCall) -> list[Result]:
    (x,) = call.operands
    target = call.params.get("_target")
    if target is not None and target[0] != x.spec:
        raise call.err(
            "`with_sharding_constraint` acts as an assert when all axes of mesh are of type `Explicit`. The array "
            f"sharding: {p_repr(x.spec)} did not match the sharding provided: {p_repr(target[0])}. Please use "
            "`ss.reshard` to shard your input to the sharding you want."
        )
    return [(x.spec, x.unreduced)]


# -- elementwise ----------------------------------------------------------------------------------
@rule("select")
def _select(call: OpCall) -> list[Result]:
    which, *cases = call.operands
    cases = cases[::-1]  # JAX's select_n lists the cases false-first
    arrays = [c for c in cases if c.ndim]
    if not arrays:
        return [(replicated(call.out_avals[0].ndim), ())]
    first = arrays[0]
    if any(c.spec != first.spec or c.unreduced != first.unreduced for c in arrays[1:]):
        shown = ", ".join(c.named(call.mesh) for c in cases)
        raise call.err(f"select cases must have the same shardings, got [{shown}].")
    if which.ndim and which.spec != first.spec:
        raise call.err(
            f"select `which` must be scalar or have the same sharding as cases, got `which` sharding "
            f"{which.named(call.mesh)} but case sharding {cases[0].named(call.mesh)}."
        )
    return [(first.spec, first.unreduced)]


# -- contractions ---------------------------------------------------------------------------------
@rule("dot_general")
def _dot_general(call: OpCall) -> list[Result]:
    lhs, rhs = call.operands
    (lc, rc), (lb, rb) = call.params["contracting"], call.params["batch"]
    lcs = tuple(lhs.spec[i] for i in lc)
    rcs = tuple(rhs.spec[i] for i in rc)
    if lhs.unreduced or rhs.unreduced:
        raise call.err(f"lhs or rhs passed to dot_general cannot be unreduced. Got lhs={lhs.long()} and rhs={rhs.long()}")
    user = given(call)
    if user is not None:
        spec, unreduced = user[0]
        if unreduced:
            if lcs != rcs:
                raise call.err(
                    "lhs and rhs contracting dims should be sharded identically when out_sharding provided to "
                    f"dot_general mentions unreduced_axes. Got lhs_contracting_spec={partitions(lcs)}, "
                    f"rhs_contracting_spec={partitions(rcs)}"
                )
            flat = {a for d in lcs for a in d}
            if set(unreduced) != flat:
                raise call.err(
                    "out_sharding's unreduced axes should be equal to the contracting specs. Got unreduced "
                    f"axes={set(unreduced)} and contracting spec={partitions(lcs)}"
                )
        return user
    lbs = tuple(lhs.spec[i] for i in lb)
    rbs = tuple(rhs.spec[i] for i in rb)
    for l, r in zip(lbs, rbs):
        if l and r and l != r:
            raise call.err(
                "dot_general requires lhs batch dimensions and rhs batch dimensions to have the consistent "
                f"sharding, got {partitions(lbs)} and {partitions(rbs)}."
            )
    for l, r in zip(lcs, rcs):
        if l and r and l != r:
            raise call.err(
                f"dot_general requires contracting dimensions to have consistent sharding, got "
                f"{partitions(lcs)} and {partitions(rcs)}."
            )
    for l, r in zip(lcs, rcs):
        if l and r:
            raise call.err(
                "Contracting dimensions are sharded and it is ambiguous how the output should be sharded. "
                "Please specify the output sharding via the `out_sharding` parameter. "
                f"Got lhs_contracting_spec={partitions(lcs)} and rhs_contracting_spec={partitions(rcs)}"
            )
    lfree = [lhs.spec[d] for d in range(lhs.ndim) if d not in lc and d not in lb]
    rfree = [rhs.spec[d] for d in range(rhs.ndim) if d not in rc and d not in rb]
    # JAX takes the batch dims' spec from the lhs.
    return [(tuple(lbs) + tuple(lfree) + tuple(rfree), ())]


@rule("conv2d")
def _conv2d(call: OpCall) -> list[Result]:
    user = given(call)
    if user is not None:
        return user
    x, w = call.operands[:2]
    out = call.out_avals[0]
    if not any(w.spec) and not x.spec[1]:
        spec = list(x.spec)
        spec[1] = ()
        _check_varying(call, x, out.shape, "conv_general_dilated")
        return [(tuple(spec), ())]
    raise call.err("Please specify the output sharding via `out_sharding` parameter of `conv_general_dilated`")


# -- reductions -----------------------------------------------------------------------------------
@rule("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(call: OpCall) -> list[Result]:
    user = given(call)
    if user is not None:
        return user
    _no_unreduced(call)
    (x,) = call.operands
    axes = set(call.params["axes"])
    return [(tuple(s for d, s in enumerate(x.spec) if d not in axes), ())]


@rule("argmax", "argmin")
def _argminmax(call: OpCall) -> list[Result]:
    (x,) = call.operands
    axis = call.params["axis"]
    return [(tuple(s for d, s in enumerate(x.spec) if d != axis), ())]


@rule("cumsum")
def _cumsum(call: OpCall) -> list[Result]:
    (x,) = call.operands
    axis = call.params["axis"]
    if x.spec[axis]:
        raise call.err(f"Input should be unsharded over the axis being reduced. Got input type={x.long()} and axis={axis}")
    return [(x.spec, x.unreduced)]


@rule("sort", "argsort")
def _sort(call: OpCall) -> list[Result]:
    (x,) = call.operands
    axis = call.params["axis"]
    if x.spec[axis]:
        raise call.err(
            f"Arguments to sort must be unsharded over the sorting dimension. Got arg sharding="
            f"{x.named(call.mesh)} and sorting dimension={axis}"
        )
    return [(x.spec, ())]


# -- layout ops -----------------------------------------------------------------------------------
@rule("transpose")
def _transpose(call: OpCall) -> list[Result]:
    (x,) = call.operands
    return [(tuple(x.spec[p] for p in call.params["perm"]), x.unreduced)]


@rule("broadcast_in_dim")
def _broadcast_in_dim(call: OpCall) -> list[Result]:
    user = given(call)
    if user is not None:
        return user
    (x,) = call.operands
    shape = call.out_avals[0].shape
    where = {d: k for k, d in enumerate(call.params["broadcast_dimensions"])}
    spec = tuple(x.spec[where[o]] if o in where else () for o in range(len(shape)))
    return [(spec, x.unreduced)]


@rule("concatenate")
def _concatenate(call: OpCall) -> list[Result]:
    user = given(call)
    if user is not None:
        return user
    first = call.operands[0]
    if any(o.spec != first.spec or o.unreduced != first.unreduced for o in call.operands[1:]):
        shown = ", ".join(o.named(call.mesh) for o in call.operands)
        raise call.err(f"All operands should have the same sharding. Got shardings {shown}")
    return [(first.spec, first.unreduced)]


def _check_varying(call: OpCall, x: Operand, out_shape: Sequence[int], name: str) -> None:
    """Slicing / padding keep the operand's spec; a changed dim must still divide evenly."""
    for n, m, s in zip(x.shape, out_shape, x.spec):
        if n != m and s and m % dim_size(call.mesh, s):
            k = dim_size(call.mesh, s)
            shown = s[0] if len(s) == 1 else repr(tuple(s))
            raise call.err(
                f"{name} on sharded dims where out dim ({m}) is not divisible by mesh axes ({k}) with spec "
                f"({shown}) is not implemented. Got input type={x.short()} and output shape={tuple(out_shape)}"
            )


@rule("slice")
def _slice(call: OpCall) -> list[Result]:
    (x,) = call.operands
    _check_varying(call, x, call.out_avals[0].shape, "slicing")
    return [(x.spec, x.unreduced)]


@rule("pad")
def _pad(call: OpCall) -> list[Result]:
    x = call.operands[0]
    _check_varying(call, x, call.out_avals[0].shape, "padding")
    return [(x.spec, x.unreduced)]


@rule("dynamic_slice")
def _dynamic_slice(call: OpCall) -> list[Result]:
    x = call.operands[0]
    _check_varying(call, x, call.out_avals[0].shape, "dynamic_slice")
    return [(x.spec, ())]


@rule("dynamic_update_slice")
def _dynamic_update_slice(call: OpCall) -> list[Result]:
    x, update = call.operands[:2]
    if x.spec != update.spec or x.unreduced != update.unreduced:
        axes = "({" + ", ".join(f"{t.name}: {tuple(call.mesh.axes_of_type(t))}" for t in dict.fromkeys(call.mesh.axis_types)) + "})"
        raise call.err(
            "dynamic_update_slice operand sharding must be equal to update sharding, got operand sharding "
            f"{x.long()}{axes} and update sharding {update.long()}{axes}."
        )
    return [(x.spec, x.unreduced)]


@rule("take")
def _take(call: OpCall) -> list[Result]:
    """A gather along one axis: that axis and the indices must be unsharded (JAX's gather rule)."""
    user = given(call)
    if user is not None:
        return user
    x, idx = call.operands
    axis = call.params["axis"]
    if not any(x.spec) and not any(idx.spec):
        return [(replicated(call.out_avals[0].ndim), ())]
    if x.spec[axis] or any(idx.spec):
        operand = f"ShapedArray({x.long()})"
        indices = "ShapedArray(" + type_str(idx.shape + (1,), "int32", idx.spec + ((),)) + ")"
        raise call.err(
            "Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather indexing as out "
            "sharding could not be resolved unambiguously (or would require collectives on inputs). Got "
            f"operand={operand}, indices={indices}"
        )
    return [(x.spec[:axis] + idx.spec + x.spec[axis + 1 :], ())]


# -- reshape --------------------------------------------------------------------------------------
@rule("reshape")
def _reshape(call: OpCall) -> list[Result]:
    user = given(call)
    if user is not None:
        return user
    (x,) = call.operands
    from .reshape import reshape_spec

    return [(reshape_spec(call, x, tuple(call.out_avals[0].shape)), x.unreduced)]


__all__ = [
    "DuplicateSpecError", "OpCall", "Operand", "RULES", "ShardingTypeError", "check_divisible", "factor_typing",
    "register_typing_rule", "type_results",
]
