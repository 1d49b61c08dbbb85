"""The user-facing explicit-sharding API: typeof, reshard, auto_axes, explicit_axes,
get_abstract_mesh, and ``out_sharding=`` resolution shared by ``simshard.numpy`` / ``simshard.lax``.

``out_sharding`` in explicit mode fixes the result's type (the op's typing rule takes it as
given); in auto mode it becomes a ``sharding_constraint`` on the result.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import optree

from ...ir import trace_stack
from ...ops import get_op
from .. import committed, context
from ..state import as_tracer, bind
from ...errors import ShardingError
from ...sharding.mesh import AxisType, Mesh
from ...sharding.partition_spec import P
from ...sharding.dims import NamedSharding
from ...ir.program import Aval
from ...sharding.dims import Sharding
from ...sharding.placements import DTensorSpec
from ...sharding.spelling import from_spelling, is_placement_list
from . import mode
from .errors import DuplicateSpecError
from .rules import check_divisible
from .types import AbstractMesh, ArrayType, TypeSharding, replicated, spec_of, unreduced_of


# -- the current mesh ---------------------------------------------------------------------------
def get_abstract_mesh() -> AbstractMesh:
    """The current mesh with its axis types (as ``auto_axes`` / ``explicit_axes`` set them)."""
    return AbstractMesh.of(mode.current_mesh())


# -- types ---------------------------------------------------------------------------------------
def typeof(x) -> ArrayType:
    """The type of ``x``: shape, dtype and its sharding over the explicit axes of the current mesh.

    Traced values carry their sharding; numpy arrays and Python scalars are replicated (a Python
    scalar is weakly typed, printed ``~float32[]`` as JAX does)."""
    mesh = mode.current_mesh()
    if committed.is_committed(x):  # an array on the devices: its sharding over its mesh's explicit axes
        return _committed_type(x, mesh)
    if hasattr(x, "aval") and hasattr(x, "sharding"):
        spec, unreduced = mode.type_spec(x, x.ndim, mesh)
        return ArrayType(tuple(x.shape), np.dtype(x.dtype), spec, unreduced, mesh)
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        dt = {bool: np.bool_, int: np.int32, float: np.float32, complex: np.complex64}[type(x)]
        return ArrayType((), np.dtype(dt), (), (), mesh, weak_type=type(x) is not bool)
    arr = np.asarray(x)
    return ArrayType(arr.shape, arr.dtype, replicated(arr.ndim), (), mesh)


def _committed_type(x, mesh: Mesh | None) -> ArrayType:
    """The type of an array committed to devices: explicit are the axes explicit now where the
    current mesh is its own (``auto_axes`` regions switch them), else its own mesh's."""
    sharding = x.committed_sharding
    own = sharding.mesh
    if mesh is None or not mesh.same_axes(own):
        mesh = own
    keep = mesh.explicit_axes
    return ArrayType(tuple(x.shape), np.dtype(x.dtype), spec_of(sharding, len(x.shape), keep),
                     unreduced_of(sharding, keep), mesh)


# -- resolving out_sharding ----------------------------------------------------------------------
def check_duplicates(p: P) -> None:
    """Refuse a spec that maps one mesh axis to two dimensions (JAX's DuplicateSpecError)."""
    counts: dict[str, int] = {}
    for e in tuple(p):
        if e is None or e is P.UNCONSTRAINED:
            continue
        for a in (e,) if isinstance(e, str) else e:
            counts[a] = counts.get(a, 0) + 1
    dup = [a for a, c in counts.items() if c > 1]
    if dup:
        shown = ", ".join(f"`{a}`" for a in sorted(dup))
        raise DuplicateSpecError(
            "A single NamedSharding spec specification can map every mesh axis to at most one positional "
            f"dimension, but {p!r} has duplicate entries for {shown}",
            axis=dup[0],
        )


def resolve(spec, rank: int, api_name: str, *, check_even: bool | None = None, shape=None) -> Sharding | None:
    """``out_sharding`` (a P, NamedSharding, typeof(...).sharding or Sharding; a DTensorSpec, a
    placement list or text given the result's ``shape``) as a Sharding on the trace's mesh,
    checked as JAX checks it: duplicate axes, rank, and (explicit mode) evenness."""
    if spec is None:
        return None
    mesh = mode.current_mesh()
    if isinstance(spec, TypeSharding):
        spec = spec.spec
    if isinstance(spec, str) or is_placement_list(spec) or isinstance(spec, DTensorSpec):
        return _from_placements(spec, rank, api_name, shape, mesh)
    if isinstance(spec, (tuple, list)) and not isinstance(spec, P):
        spec = P(*spec)
    if isinstance(spec, NamedSharding):
        if mesh is not None and not spec.mesh.same_axes(mesh):
            raise ValueError(
                f"Context mesh {get_abstract_mesh()} should match the mesh of sharding "
                f"{AbstractMesh.of(spec.mesh)} passed to {api_name}."
            )
        mesh = mesh or spec.mesh
        spec = spec.spec
    if isinstance(spec, P):
        if mesh is None:
            raise ValueError(
                "Using PartitionSpec when you are not under a mesh context is not allowed. Please pass a "
                f"NamedSharding instance or enter into a mesh context via `ss.set_mesh`. Got {spec!r}"
            )
        check_duplicates(spec)
        if len(spec) > rank:
            raise ShardingError(
                "rank-mismatch", f"{api_name}: {spec!r} has {len(spec)} entries but the result has rank {rank}"
            )
        sharding = NamedSharding(trace_mesh(mesh), spec).to_sharding(rank)
    elif isinstance(spec, Sharding):
        spec.check_rank((0,) * rank)
        sharding = spec
    else:
        raise TypeError(
            f"`out_sharding` argument of {api_name} only supports instances of `NamedSharding` or "
            f"`PartitionSpec`. Got {spec!r} of type: {type(spec)}"
        )
    return sharding


def _from_placements(spec, rank: int, api_name: str, shape, mesh) -> Sharding:
    """A DTensor spelling (``DTensorSpec``, placement list, text) as the exact Sharding of a value
    of ``shape`` (ShardingError where no tensor-dimension sharding lays data out the same way)."""
    spec = from_spelling(spec, trace_mesh(mesh) if mesh is not None else None, api_name)
    if isinstance(spec, Sharding):
        spec.check_rank((0,) * rank)
        return spec
    if shape is None or len(shape) != rank:
        raise ShardingError("invalid-spec", f"{api_name}: a placement list needs the value's shape here; give a P")
    placed = DTensorSpec(trace_mesh(spec.mesh), spec.placements)
    try:
        if mode.is_explicit():  # an explicit type is a tensor-dim sharding: exactly one or an error
            return Sharding.from_dtensor(placed, tuple(shape))
        return Sharding.exact_or_placements(placed, tuple(shape))  # else the value keeps the placements' layout
    except ShardingError as e:
        raise ShardingError(e.rule, f"{api_name}: {e.detail}", axis=e.axis, dim=e.dim) from None


def trace_mesh(mesh: Mesh) -> Mesh:
    """Shardings live on the trace's own mesh (same axes; its axis types may differ from now's)."""
    trace = trace_stack.current()
    if trace is not None and trace.mesh is not None:
        base = trace.mesh
        if base.same_axes(mesh):
            return base
    return mesh


def check_even(sharding: Sharding, shape: Sequence[int]) -> None:
    """JAX refuses uneven shardings on explicit types (ValueError)."""
    check_divisible(sharding.mesh, shape, spec_of(sharding, len(shape)), unreduced_of(sharding))


def _aval_of(x) -> Aval:
    if hasattr(x, "aval"):
        return x.aval
    arr = np.asarray(x)
    return Aval(arr.shape, arr.dtype)


def bind_out(op: str, *inputs, out_sharding=None, api_name: str | None = None, **params):
    """Bind ``op`` with ``out_sharding`` applied to its (single) result."""
    if out_sharding is None:
        return bind(op, *inputs, **params)
    (aval,) = get_op(op).abstract_eval(*(_aval_of(x) for x in inputs), **params)
    sharding = resolve(out_sharding, aval.ndim, api_name or op, shape=aval.shape)
    if mode.is_explicit():
        check_even(sharding, aval.shape)
        return bind(op, *inputs, shardings=(sharding,), **params)
    return constrain(bind(op, *inputs, **params), sharding)


def apply_out(x, out_sharding, api_name: str):
    """``out_sharding`` for a result that an op already produced (a composite's last value)."""
    if out_sharding is None:
        return x
    sharding = resolve(out_sharding, x.ndim, api_name, shape=x.shape)
    if mode.is_explicit():
        return _reshard(x, sharding)
    return constrain(x, sharding)


def constrain(x, sharding: Sharding):
    return bind("sharding_constraint", x, sharding=sharding, shardings=(sharding,))


def _reshard(x, sharding: Sharding):
    check_even(sharding, x.shape)
    return bind("reshard", x, sharding=sharding, shardings=(sharding,))


# -- reshard -------------------------------------------------------------------------------------
def reshard(xs, out_shardings):
    """Give ``xs`` (an array or a pytree of them) the sharding ``out_shardings`` (a P, NamedSharding,
    Sharding, DTensorSpec, placement list or text, or a pytree prefix of them). In explicit mode this is how a value's type changes; in auto mode
    it is a hard sharding requirement at that point of the program."""
    runner = committed.eager_runner(xs)
    if runner is not None:  # arrays on the devices, outside a trace: resharded there, eagerly
        return runner(reshard, (xs, out_shardings), {})
    leaves, tree = optree.tree_flatten(xs, none_is_leaf=False)
    specs = _prefix(out_shardings, xs, "reshard out_shardings")
    out = []
    for x, s in zip(leaves, specs):
        if s is None:
            raise ValueError(
                f"Reshard should only be used with out_shardings which are non-None and have a non-empty mesh. Got sharding {s}."
            )
        x = as_tracer(x)
        sharding = resolve(s, x.ndim, "reshard", shape=x.shape)
        out.append(_reshard(x, sharding) if mode.is_explicit() else _auto_reshard(x, sharding))
    return optree.tree_unflatten(tree, out)


def _auto_reshard(x, sharding: Sharding):
    return bind("reshard", x, sharding=sharding, shardings=(sharding,))


def _is_spec_leaf(x) -> bool:
    return x is None or isinstance(x, (P, NamedSharding, Sharding, TypeSharding, DTensorSpec, str)) or is_placement_list(x)


def _prefix(specs, tree, what: str) -> list:
    if _is_spec_leaf(specs):
        return [specs] * len(optree.tree_leaves(tree, none_is_leaf=False))
    try:
        full = optree.tree_broadcast_prefix(specs, tree, is_leaf=_is_spec_leaf, none_is_leaf=True)
    except ValueError as e:
        raise ShardingError("structure-mismatch", f"{what} does not match the structure of the values: {e}") from None
    return optree.tree_leaves(full, is_leaf=_is_spec_leaf, none_is_leaf=True)


# -- switching axis types for a region -----------------------------------------------------------
def _axes_tuple(axes, mesh: Mesh) -> tuple[str, ...]:
    if axes is None:
        return mesh.axis_names
    return (axes,) if isinstance(axes, str) else tuple(axes)


def auto_axes(f=None, /, *, axes: str | Sequence[str] | None = None, out_sharding=None):
    """Run ``f`` with ``axes`` (default: all) switched to Auto, then reshard its result to
    ``out_sharding`` (given here or as a keyword of the call). Inside, types do not mention those
    axes and ops have no sharding rules over them; the compiler decides."""

    def deco(fun):
        @functools.wraps(fun)
        def wrapper(*args, **kwargs):
            out_sh = out_sharding
            if out_sh is None:
                if "out_sharding" not in kwargs:
                    raise TypeError("Missing required keyword argument: 'out_sharding'")
                out_sh = kwargs.pop("out_sharding")
            cur = mode.current_mesh()
            if cur is None:
                return fun(*args, **kwargs)
            names = _axes_tuple(axes, cur)
            _no_manual(cur, names)
            if set(cur.auto_axes) == set(names):
                return fun(*args, **kwargs)
            with context.use_mesh(cur.update_axis_types({a: AxisType.Auto for a in names})):
                out = fun(*args, **kwargs)
            return reshard(out, out_sh)

        return wrapper

    return deco(f) if f is not None else deco


def explicit_axes(f=None, /, *, axes: str | Sequence[str] | None = None, in_sharding=None):
    """Run ``f`` with ``axes`` (default: all) switched to Explicit, its arguments first resharded
    to ``in_sharding`` (given here or as a keyword of the call). Inside, types carry shardings over
    those axes and every op is typed; outside again, the result is an ordinary (auto) value."""

    def deco(fun):
        @functools.wraps(fun)
        def wrapper(*args, **kwargs):
            in_sh = in_sharding
            if in_sh is None:
                if "in_sharding" not in kwargs:
                    raise TypeError("Missing required keyword argument: 'in_sharding'")
                in_sh = kwargs.pop("in_sharding")
            cur = mode.current_mesh()
            if cur is None:
                raise ValueError(
                    "Context mesh cannot be empty. Please use `ss.set_mesh` API to enter into a mesh context "
                    "when using `explicit_axes` API."
                )
            names = _axes_tuple(axes, cur)
            _no_manual(cur, names)
            with context.use_mesh(cur.update_axis_types({a: AxisType.Explicit for a in names})):
                args = reshard(args, in_sh if _is_spec_leaf(in_sh) else tuple(in_sh) if isinstance(in_sh, list) else in_sh)
                return fun(*args, **kwargs)

        return wrapper

    return deco(f) if f is not None else deco


def _no_manual(mesh: Mesh, names: Sequence[str]) -> None:
    for a in names:
        mesh.axis_size(a)
        if mesh.axis_types[mesh.axis_names.index(a)] == AxisType.Manual:
            raise NotImplementedError(
                "Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not allowed"
            )


__all__ = [
    "apply_out", "auto_axes", "bind_out", "explicit_axes", "get_abstract_mesh", "reshard", "resolve", "typeof",
]

