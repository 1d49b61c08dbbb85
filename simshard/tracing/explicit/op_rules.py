"""The op-specific typing rules of explicit mode: where JAX types an op otherwise than the
generic factor consensus of ``rules`` (creation, annotations, select, dot_general and conv,
reductions, sort and cumsum, transpose, broadcast, concatenate, slicing, gather, reshape).

Each is registered for its ops by ``@rule``; the package imports this module so every rule is
in place before anything is typed.
"""

from __future__ import annotations

from typing import Sequence

from .reshape import reshape_spec
from .rules import given, no_unreduced, rule, OpCall, Operand, Result
from .types import dim_size, p_repr, partitions, replicated, spec_of, type_str, unreduced_of


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
    no_unreduced(call)
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
    return [(reshape_spec(call, x, tuple(call.out_avals[0].shape)), x.unreduced)]


@rule("shard_map")
def _shard_map(call: OpCall) -> Sequence[Result]:
    """A manual region takes its operands as its ``in_specs`` say (the partitioner moves an
    operand typed otherwise, as JAX's implicit reshard does) and its results are typed by its
    ``out_specs`` over the Explicit axes."""
    keep = call.mesh.explicit_axes
    return [(spec_of(s, a.ndim, keep), unreduced_of(s, keep)) for s, a in zip(call.params["out_specs"], call.out_avals)]
