"""Tracing a function: ``trace(f, *args, in_shardings=..., out_shardings=...)`` runs ``f`` on
Tracers and returns the Program it recorded; ``jit`` wraps a function to trace (and evaluate) it.

Inputs and outputs take any sharding spelling (``P``, ``NamedSharding``, Shardy text's
``Sharding``, a placement list), resolved to a ``Sharding`` here; explicit mode types every
value as it is bound (``explicit.mode``); numpy calls on the Tracers are lowered by
``array_methods``. ``Tracer``, ``bind``, ``constant`` and ``TraceError`` live in ``state`` and
are importable from here too.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import optree

from ..errors import ShardingError, TraceError
from ..ir import trace_stack
from ..ir.program import Aval, Program, Value
from ..sharding.dims import NamedSharding, Sharding, dims_view
from ..sharding.partition_spec import P
from ..sharding.placements import DTensorSpec
from ..sharding.spelling import from_spelling, is_placement_list
from . import array_methods, committed
from .context import get_mesh
from .explicit import mode as explicit_mode
from .interpret import evaluate
from .state import Builder, ConcreteValueError, Tracer, as_tracer, bind, constant, current_builder, is_python_scalar, name  # noqa: F401  (importable here)


@dataclass(frozen=True)
class ShapeDtype:
    """An abstract input: shape, dtype and optionally its sharding (like jax.ShapeDtypeStruct)."""

    shape: tuple[int, ...]
    dtype: Any = np.float32
    sharding: Any = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))


# -- tracing a function ---------------------------------------------------------------------------
def _argument_names(fun: Callable, n: int) -> list[str]:
    """The names of ``n`` positional arguments of ``fun``, as reports show its inputs: the
    parameter names, ``xs[0]``, ``xs[1]``, ... for ``*xs``, ``arg3`` where there is no name."""
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    names: list[str] = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}[{k}]" for k in range(n - len(names))]
            break
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
    return (names + [f"arg{i}" for i in range(len(names), n)])[:n]


def _leaf_aval(x, where: str) -> Aval:
    """The abstract type of an input; refused (TraceError) for objects, strings, dates and records."""
    if isinstance(x, ShapeDtype):
        shape, dtype = x.shape, x.dtype
    else:
        arr = np.asarray(x)
        shape, dtype = arr.shape, arr.dtype
    if dtype.kind in "OSUMm" or dtype.fields is not None:  # ml_dtypes' (bfloat16, float8) are kind "V"
        raise TraceError(
            f"{where} has dtype {dtype} ({type(x).__name__}); simshard traces arrays of bool, integer, "
            "float or complex numbers: convert it, or pass it as a static argument (static_argnums)"
        )
    return Aval(shape, dtype)


def _path_name(arg_name: str, path: tuple) -> str:
    return arg_name + "".join(f"[{p!r}]" for p in path)


def _is_sharding_leaf(x) -> bool:
    """One sharding, not a tree of them: a placement list (``[Shard(0), Replicate()]``) and text count as one."""
    return x is None or isinstance(x, (Sharding, NamedSharding, DTensorSpec, P, str)) or is_placement_list(x)


def resolve_sharding(spec, aval: Aval, where: str, mesh=None) -> Sharding | None:
    """Any accepted sharding spelling for a value of type ``aval``, as a Sharding: P,
    NamedSharding, Sharding, DTensorSpec, Shardy or placement text, a bare placement list (the
    last two on ``mesh``)."""
    if spec is None:
        return None
    spec = from_spelling(spec, mesh, where)  # its errors name ``where`` themselves
    if isinstance(spec, P) and mesh is None:  # outside the try below, which would name ``where`` twice
        raise ShardingError("no-mesh", f"{where}: P(...) needs a mesh (pass mesh= or use ss.set_mesh)")
    try:
        if isinstance(spec, P):
            spec = NamedSharding(mesh, spec)
        if isinstance(spec, NamedSharding):
            return spec.to_sharding(aval.ndim)
        if isinstance(spec, DTensorSpec):
            return Sharding.exact_or_placements(spec, aval.shape)
        if isinstance(spec, Sharding):
            spec.check_rank(aval.shape)
            return spec
    except ShardingError as e:
        raise ShardingError(e.rule, f"{where}: {e.detail}", axis=e.axis, dim=e.dim) from None
    raise ShardingError("invalid-spec", f"{where}: {_short(spec)} is not a sharding")


def _short(x) -> str:
    """A value as an error shows it: arrays by dtype and shape, never their contents."""
    def show(leaf):
        if isinstance(leaf, (np.ndarray, ShapeDtype)) or hasattr(leaf, "__array__") and hasattr(leaf, "shape"):
            return _Shown(f"{np.dtype(leaf.dtype).name}{list(leaf.shape)} array")
        return leaf

    text = repr(optree.tree_map(show, x, none_is_leaf=True, is_leaf=_is_sharding_leaf))
    return text if len(text) <= 200 else text[:200] + "..."


class _Shown(str):
    def __repr__(self) -> str:
        return str(self)


_UNSET = object()  # stands for a None sharding while broadcasting (None is no pytree leaf)


def broadcast_prefix(spec_tree, tree, what: str) -> list:
    """Shardings given as a pytree prefix of the values, one per leaf of ``tree``.

    ``None`` means "no sharding" in ``spec_tree`` but "no value" in ``tree`` (it has no leaves),
    so spec Nones are swapped for a sentinel before broadcasting and back after.
    """
    specs = optree.tree_map(lambda s: _UNSET if s is None else s, spec_tree, is_leaf=_is_sharding_leaf, none_is_leaf=True)

    def leaf(s):
        return s is _UNSET or (s is not None and _is_sharding_leaf(s))

    try:
        full = optree.tree_broadcast_prefix(specs, tree, is_leaf=leaf)
    except ValueError:
        shown = optree.tree_map(lambda s: None if s is _UNSET else s, specs, is_leaf=leaf, none_is_leaf=True)
        raise ShardingError(
            "structure-mismatch",
            f"{what} is {_short(shown)}, which is no sharding and not a prefix of the value's structure "
            f"({_short(tree)}); give one sharding (a P, a DTensorSpec, a placement list such as "
            "[Shard(0), Replicate()] with mesh=, text) or one per leaf") from None
    leaves = optree.tree_leaves(full, is_leaf=leaf)
    return [None if s is _UNSET else s for s in leaves]




def trace(
    fun: Callable,
    *args,
    in_shardings=None,
    out_shardings=None,
    static_argnums: Sequence[int] = (),
    mesh=None,
    **kwargs,
) -> Program:
    """Trace ``fun(*args)`` into a Program. Arrays and ShapeDtypes become inputs; static args are
    passed through as Python values (they must be hashable)."""
    mesh = mesh if mesh is not None else get_mesh()
    static = _static_indices(args, static_argnums)
    names = _argument_names(fun, len(args))
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    dyn_names = [n for i, n in enumerate(names[: len(args)]) if i not in static]
    builder = Builder(mesh, array_methods)
    traced = _trace_inputs(builder, dyn_args, dyn_names, in_shardings, mesh)
    inputs, input_names, in_sh, tracer_args = traced
    it = iter(tracer_args)
    call_args = [a if i in static else next(it) for i, a in enumerate(args)]

    explicit_mode.begin(builder, [Tracer(builder, v, dims_view(s, v.aval.shape)) for v, s in zip(inputs, in_sh)])
    with trace_stack.tracing(builder):
        try:
            out = fun(*call_args, **kwargs)
        except ConcreteValueError as e:
            e.args = (e.args[0] + scalar_pytree_hint(dyn_args, dyn_names), *e.args[1:])
            raise
        out_leaves, out_tree = optree.tree_flatten(out, none_is_leaf=False)
        out_tracers = [o if isinstance(o, Tracer) else constant(np.asarray(o)) for o in out_leaves]
    out_specs = broadcast_prefix(out_shardings, out, "out_shardings")
    out_sh = [resolve_sharding(s, t.aval, f"output {i}", mesh) for i, (s, t) in enumerate(zip(out_specs, out_tracers))]
    _check_one_device_set(
        [(f"input {n}", s) for n, s in zip(input_names, in_sh)]
        + [(f"output {i}", s) for i, s in enumerate(out_sh)]
        + [(f"{e.op} result", s) for e in builder.eqns for s in e.shardings],
        mesh,
    )
    program = Program(
        inputs=tuple(inputs),
        eqns=tuple(builder.eqns),
        outputs=tuple(t.value for t in out_tracers),
        input_names=tuple(input_names),
        in_shardings=tuple(in_sh),
        out_shardings=tuple(out_sh),
        labels=tuple(builder.labels),
    )
    program = explicit_mode.finish(builder, program)
    object.__setattr__(program, "out_tree", out_tree)
    return program


def scalar_pytree_hint(dyn_args: tuple, dyn_names: list[str]) -> str:
    """Why a numpy call may have met a list of traced scalars: an argument given as a (nested)
    list or tuple of numbers is a pytree, each number its own 0-d input, not one array."""
    for arg, arg_name in zip(dyn_args, dyn_names):
        if isinstance(arg, (list, tuple)):
            leaves = optree.tree_leaves(arg, none_is_leaf=False)
            if leaves and all(is_python_scalar(leaf) for leaf in leaves):
                return (f". Argument {arg_name} is a {type(arg).__name__}: a pytree of {len(leaves)} scalars, each "
                        "traced as its own 0-d value, not one array; pass an array instead (np.asarray it before "
                        "the call) to trace it as one")
    return ""


def _static_indices(args, static_argnums: Sequence[int]) -> set[int]:
    """The positions of the static arguments (negative ones count from the end); each must be
    hashable."""
    static = set(int(i) % max(len(args), 1) for i in static_argnums)
    for i in static:
        try:
            hash(args[i])
        except TypeError:
            raise TraceError(f"static argument {i} ({type(args[i]).__name__}) must be hashable") from None
    return static


class TracedInputs(NamedTuple):
    """The program inputs a trace made of the dynamic arguments: per leaf its value, name and
    sharding; per argument the pytree of Tracers the function is called with."""

    values: list[Value]
    names: list[str]
    shardings: list[Sharding | None]
    arguments: list[Any]


def _trace_inputs(builder: Builder, dyn_args: tuple, dyn_names: list[str], in_shardings, mesh) -> TracedInputs:
    """One program input per array leaf of the dynamic arguments, with its sharding (the
    argument's ``in_shardings`` entry, a pytree prefix; else a ShapeDtype's own)."""
    leaves_per_arg = [optree.tree_flatten_with_path(a, none_is_leaf=False) for a in dyn_args]
    if _is_sharding_leaf(in_shardings):  # None, or one sharding (a P too) for every argument
        in_shardings = (in_shardings,) * len(dyn_args)
    if len(in_shardings) != len(dyn_args):
        raise ShardingError(
            "structure-mismatch", f"in_shardings has {len(in_shardings)} entries for {len(dyn_args)} arguments"
        )
    traced = TracedInputs([], [], [], [])
    for k, (arg, (paths, leaves, treedef)) in enumerate(zip(dyn_args, leaves_per_arg)):
        specs = broadcast_prefix(in_shardings[k], arg, f"in_shardings[{k}] (argument {dyn_names[k]})")
        tracers = []
        for path, leaf, spec in zip(paths, leaves, specs):
            label = _path_name(dyn_names[k], path)
            aval = _leaf_aval(leaf, f"input {label}")
            if spec is None and isinstance(leaf, ShapeDtype):
                spec = leaf.sharding
            sharding = resolve_sharding(spec, aval, f"input {label}", mesh)
            v = builder.new_value(aval)
            traced.values.append(v)
            traced.names.append(label)
            traced.shardings.append(sharding)
            tracers.append(Tracer(builder, v, dims_view(sharding, aval.shape), weak=is_python_scalar(leaf)))
        traced.arguments.append(optree.tree_unflatten(treedef, tracers))
    return traced


def _check_one_device_set(named: list[tuple[str, Sharding | None]], mesh) -> None:
    """Every mesh in a program views the same devices (logical meshes may differ in axes or
    order, not in device count), except that an output may end on a mesh over fewer of them (the
    FHE seed's fewer ciphertexts: the planner reshards onto a subset of the devices)."""
    first = ("the ambient mesh", mesh) if mesh is not None else None
    for where, s in named:
        if s is None:
            continue
        if first is None:
            first = (where, s.mesh)
        elif s.mesh.size != first[1].size and not (where.startswith("output") and _over_fewer(s.mesh, first[1])):
            raise ShardingError(
                "wrong-mesh",
                f"{where} is sharded over mesh @{s.mesh.name} of {s.mesh.size} devices, but {first[0]} uses "
                f"@{first[1].name} of {first[1].size}; all meshes of a program must view the same devices",
            )


def _over_fewer(mesh, of) -> bool:
    """``mesh`` views some of the devices ``of`` views (a program may end on it)."""
    return mesh.size < of.size and set(mesh.device_ids) <= set(of.device_ids)


class Jitted:
    """``ss.jit(fun, ...)``: ``.trace(*args)`` gives the Program; calling it evaluates the program."""

    def __init__(self, fun, in_shardings=None, out_shardings=None, static_argnums=(), mesh=None):
        self.fun = fun
        self.in_shardings = in_shardings
        self.out_shardings = out_shardings
        self.static_argnums = tuple(static_argnums) if isinstance(static_argnums, (tuple, list)) else (static_argnums,)
        self.mesh = mesh
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "jitted")

    def trace(self, *args, **kwargs) -> Program:
        return trace(
            self.fun, *args, in_shardings=self.in_shardings, out_shardings=self.out_shardings,
            static_argnums=self.static_argnums, mesh=self.mesh, **kwargs,
        )

    def __call__(self, *args, **kwargs):
        if trace_stack.current() is not None:  # inside another trace: inlined, as JAX does
            return self.fun(*args, **kwargs)
        runner = committed.eager_runner((args, kwargs))
        if runner is not None:  # arrays committed to devices: run there, typed by their shardings
            return runner(self.fun, args, kwargs, in_shardings=self.in_shardings, out_shardings=self.out_shardings,
                          static_argnums=self.static_argnums, mesh=self.mesh)
        program = self.trace(*args, **kwargs)
        static = set(self.static_argnums)
        dyn = [a for i, a in enumerate(args) if i not in static]
        leaves = optree.tree_leaves(tuple(dyn), none_is_leaf=False)
        outs = evaluate(program, *leaves)
        return optree.tree_unflatten(program.out_tree, list(outs))


def jit(fun=None, *, in_shardings=None, out_shardings=None, static_argnums=(), mesh=None):
    if fun is None:
        return lambda f: Jitted(f, in_shardings, out_shardings, static_argnums, mesh)
    return Jitted(fun, in_shardings, out_shardings, static_argnums, mesh)
