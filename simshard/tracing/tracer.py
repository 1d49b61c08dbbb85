"""Tracing: run a plain numpy function on tracer arrays and record a Program.

A ``Tracer`` speaks numpy's protocols (``__array_ufunc__``, ``__array_function__``, operators,
indexing, the common ndarray methods), so ``np.tanh(x @ w).sum(axis=0)`` traces unchanged.
Each numpy call is lowered (``simshard.tracing.lowering``) to ops of the registry and recorded as an
equation. Anything numpy does that we have no op for fails here, naming the function; traced
values never silently turn into concrete data.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import optree

from ..errors import ShardingError
from ..ops import get_op
from ..ir.program import Aval, Eqn, Literal, Program, Value
from ..sharding.dims import Sharding


class TraceError(TypeError):
    """A numpy call or Python operation that cannot be traced, named with where it happened."""


@dataclass(frozen=True)
class ShapeDtype:
    """An abstract input: shape, dtype and optionally its sharding (like jax.ShapeDtypeStruct)."""

    shape: tuple[int, ...]
    dtype: Any = np.float32
    sharding: Any = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))


class _Builder:
    """The equations recorded so far in one trace."""

    def __init__(self, mesh=None):
        self.eqns: list[Eqn] = []
        self.labels: list[tuple[str, Value]] = []
        self.ids = itertools.count()
        self.mesh = mesh
        # Called for each new equation; explicit mode installs its typing rule here.
        self.on_bind: Callable[[Eqn, Sequence["Tracer"]], Sequence[Sharding | None]] | None = None

    def new_value(self, aval: Aval) -> Value:
        return Value(next(self.ids), aval)


_STACK: list[_Builder] = []


def current_builder() -> _Builder:
    if not _STACK:
        raise TraceError("no trace in progress: simshard.numpy functions work inside ss.jit / ss.trace")
    return _STACK[-1]


class Tracer(np.lib.mixins.NDArrayOperatorsMixin):
    """A value being traced: its abstract type, the program value it stands for, its sharding."""

    __array_priority__ = 1000

    def __init__(self, builder: _Builder, value: Value, sharding: Sharding | None = None):
        self._builder = builder
        self.value = value
        self.sharding = sharding

    # -- ndarray-like attributes ---------------------------------------------------------------
    @property
    def aval(self) -> Aval:
        return self.value.aval

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    @property
    def size(self) -> int:
        return self.aval.size

    def __len__(self) -> int:
        if not self.shape:
            raise TraceError("len() of a 0-d traced array")
        return self.shape[0]

    def __repr__(self) -> str:
        t = self.sharding.type_string(self.shape, self.dtype) if self.sharding is not None else str(self.aval)
        return f"Traced<{t}>"

    # -- what cannot be traced -------------------------------------------------------------------
    def __bool__(self):
        raise TraceError(
            f"the truth value of traced array {self!r} is not known while tracing: Python control flow "
            "on array values (if/while/and/or) cannot be traced; use np.where"
        )

    def __array__(self, dtype=None, copy=None):
        raise TraceError(
            f"traced array {self!r} was converted to a concrete numpy array; simshard traces your "
            "function on abstract values, so this numpy call is not supported"
        )

    def __iter__(self):
        if not self.shape:
            raise TraceError("iteration over a 0-d traced array")
        return (self[i] for i in range(self.shape[0]))

    def __index__(self):
        raise TraceError(f"traced array {self!r} used as a Python number: its value is not known while tracing")

    __int__ = __float__ = __complex__ = __index__

    def item(self):
        raise TraceError(f"item() of traced array {self!r}: its value is not known while tracing")

    def tolist(self):
        raise TraceError(f"tolist() of traced array {self!r}: its value is not known while tracing")

    # -- numpy protocols ---------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from . import lowering

        return lowering.ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from . import lowering

        return lowering.array_function(func, args, kwargs)

    # -- methods (each is the numpy function of the same name) -----------------------------------
    def __getitem__(self, index):
        from . import lowering

        return lowering.getitem(self, index)

    def __setitem__(self, index, value):
        raise TraceError("in-place assignment x[...] = v cannot be traced; build a new array (np.where, np.concatenate)")

    @property
    def T(self):
        return np.transpose(self)

    @property
    def mT(self):
        return np.swapaxes(self, -1, -2)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return np.reshape(self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return np.transpose(self, axes or None)

    def astype(self, dtype, copy=True):
        from . import lowering

        return lowering.astype(self, dtype)

    def ravel(self):
        return np.reshape(self, (-1,))

    flatten = ravel

    def squeeze(self, axis=None):
        return np.squeeze(self, axis)

    def swapaxes(self, a, b):
        return np.swapaxes(self, a, b)

    def sum(self, axis=None, dtype=None, keepdims=False):
        return np.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis=None, dtype=None, keepdims=False):
        return np.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return np.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return np.min(self, axis=axis, keepdims=keepdims)

    def prod(self, axis=None, dtype=None, keepdims=False):
        return np.prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def var(self, axis=None, keepdims=False):
        return np.var(self, axis=axis, keepdims=keepdims)

    def std(self, axis=None, keepdims=False):
        return np.std(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False):
        return np.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False):
        return np.argmin(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis=None):
        return np.cumsum(self, axis=axis)

    def dot(self, other):
        return np.dot(self, other)

    def clip(self, a_min=None, a_max=None):
        return np.clip(self, a_min, a_max)

    def take(self, indices, axis=None):
        return np.take(self, indices, axis=axis)

    @property
    def at(self):
        """JAX's functional updates: ``x.at[idx].set(v)`` / ``.add(v)`` / ``.get(out_sharding=...)``."""
        from ..numpy import _IndexUpdateHelper

        return _IndexUpdateHelper(self)


# -- binding ops ----------------------------------------------------------------------------------
def _operand(builder: _Builder, x, like_dtype=None) -> Value | Literal:
    """A program operand for ``x``: a traced value, a scalar literal, or a recorded constant."""
    if isinstance(x, Tracer):
        if x._builder is not builder:
            raise TraceError(f"{x!r} belongs to another trace (a traced value escaped its function?)")
        return x.value
    if isinstance(x, Literal):
        return x
    arr = np.asarray(x)
    if arr.ndim == 0:
        if like_dtype is not None and isinstance(x, (bool, int, float, complex)):
            # NEP 50: a Python scalar takes the dtype of the array it meets.
            arr = np.asarray(np.result_type(like_dtype, x).type(x))
        return Literal(arr, Aval((), arr.dtype))
    return constant(arr).value


def bind(op: str, *inputs, shardings: Sequence[Sharding | None] | None = None, **params):
    """Record ``op(*inputs, **params)`` in the current trace; returns a Tracer (or a tuple)."""
    builder = current_builder()
    opdef = get_op(op)
    like = next((i.dtype for i in inputs if isinstance(i, Tracer)), None)
    operands = tuple(_operand(builder, x, like) for x in inputs)
    try:
        out_avals = opdef.abstract_eval(*(o.aval for o in operands), **params)
    except (ValueError, TypeError) as e:
        types = ", ".join(str(o.aval) for o in operands)
        raise TraceError(f"{op}({types}): {e}") from None
    outputs = tuple(builder.new_value(a) for a in out_avals)
    eqn = Eqn(op, operands, outputs, tuple(sorted(params.items())), tuple(shardings or (None,) * len(outputs)))
    tracers_in = [i for i in inputs]
    result_shardings = builder.on_bind(eqn, tracers_in) if builder.on_bind else eqn.shardings
    builder.eqns.append(eqn)
    tracers = tuple(Tracer(builder, v, s) for v, s in zip(outputs, result_shardings))
    return tracers[0] if len(tracers) == 1 else tracers


def constant(value: np.ndarray) -> Tracer:
    value = np.array(value, copy=True)
    value.flags.writeable = False
    return bind("constant", value=value)


def name(x, label: str):
    """Label a traced value (metadata only: no op, no use, no effect on propagation)."""
    if not isinstance(x, Tracer):
        return x
    builder = current_builder()
    builder.labels.append((str(label), x.value))
    return x


# -- tracing a function ---------------------------------------------------------------------------
def _leaf_aval(x) -> Aval:
    if isinstance(x, ShapeDtype):
        return Aval(x.shape, x.dtype)
    arr = np.asarray(x)
    return Aval(arr.shape, arr.dtype)


def _path_name(arg_name: str, path: tuple) -> str:
    return arg_name + "".join(f"[{p!r}]" for p in path)


def _is_sharding_leaf(x) -> bool:
    from ..sharding.partition_spec import P
    from ..sharding.dims import NamedSharding
    from ..sharding.placements import DTensorSpec

    return x is None or isinstance(x, (Sharding, NamedSharding, DTensorSpec, P))


def resolve_sharding(spec, aval: Aval, where: str, mesh=None) -> Sharding | None:
    """Any accepted sharding spelling for a value of type ``aval``, as a Sharding."""
    from ..sharding.partition_spec import P
    from ..sharding.dims import NamedSharding
    from ..sharding.placements import DTensorSpec

    if spec is None:
        return None
    try:
        if isinstance(spec, P):
            if mesh is None:
                raise ShardingError("no-mesh", f"{where}: P(...) needs a mesh (pass mesh= or use ss.set_mesh)")
            spec = NamedSharding(mesh, spec)
        if isinstance(spec, NamedSharding):
            return spec.to_sharding(aval.ndim)
        if isinstance(spec, DTensorSpec):
            return Sharding.from_dtensor(spec, aval.shape)
        if isinstance(spec, Sharding):
            spec.check_rank(aval.shape)
            return spec
    except ShardingError as e:
        raise ShardingError(e.rule, f"{where}: {e.detail}", axis=e.axis, dim=e.dim) from None
    raise ShardingError("invalid-spec", f"{where}: {spec!r} is not a sharding")


_UNSET = object()  # stands for a None sharding while broadcasting (None is no pytree leaf)


def _broadcast_prefix(spec_tree, tree, what: str) -> list:
    """Shardings given as a pytree prefix of the values, one per leaf of ``tree``.

    ``None`` means "no sharding" in ``spec_tree`` but "no value" in ``tree`` (it has no leaves),
    so spec Nones are swapped for a sentinel before broadcasting and back after.
    """
    specs = optree.tree_map(lambda s: _UNSET if s is None else s, spec_tree, is_leaf=_is_sharding_leaf, none_is_leaf=True)

    def leaf(s):
        return s is _UNSET or (s is not None and _is_sharding_leaf(s))

    try:
        full = optree.tree_broadcast_prefix(specs, tree, is_leaf=leaf)
    except ValueError as e:
        raise ShardingError("structure-mismatch", f"{what} does not match the structure of the values: {e}") from None
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
    from .context import get_mesh

    mesh = mesh if mesh is not None else get_mesh()
    static = set(int(i) % max(len(args), 1) for i in static_argnums)
    for i in static:
        try:
            hash(args[i])
        except TypeError:
            raise TraceError(f"static argument {i} ({type(args[i]).__name__}) must be hashable") from None
    try:
        names = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        names = []
    names += [f"arg{i}" for i in range(len(names), len(args))]
    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    dyn_names = [n for i, n in enumerate(names[: len(args)]) if i not in static]

    builder = _Builder(mesh)
    leaves_per_arg = [optree.tree_flatten_with_path(a, none_is_leaf=False) for a in dyn_args]
    if _is_sharding_leaf(in_shardings):  # None, or one sharding (a P too) for every argument
        in_shardings = (in_shardings,) * len(dyn_args)
    if len(in_shardings) != len(dyn_args):
        raise ShardingError(
            "structure-mismatch", f"in_shardings has {len(in_shardings)} entries for {len(dyn_args)} arguments"
        )
    inputs, input_names, in_sh = [], [], []
    tracer_args = []
    for k, (arg, (paths, leaves, treedef)) in enumerate(zip(dyn_args, leaves_per_arg)):
        specs = _broadcast_prefix(in_shardings[k], arg, f"in_shardings[{k}]")
        tracers = []
        for path, leaf, spec in zip(paths, leaves, specs):
            aval = _leaf_aval(leaf)
            if spec is None and isinstance(leaf, ShapeDtype):
                spec = leaf.sharding
            label = _path_name(dyn_names[k], path)
            sharding = resolve_sharding(spec, aval, f"input {label}", mesh)
            v = builder.new_value(aval)
            inputs.append(v)
            input_names.append(label)
            in_sh.append(sharding)
            tracers.append(Tracer(builder, v, sharding))
        tracer_args.append(optree.tree_unflatten(treedef, tracers))
    it = iter(tracer_args)
    call_args = [a if i in static else next(it) for i, a in enumerate(args)]

    from .explicit import mode as explicit_mode

    explicit_mode.begin(builder, [Tracer(builder, v, s) for v, s in zip(inputs, in_sh)])
    _STACK.append(builder)
    try:
        out = fun(*call_args, **kwargs)
        out_leaves, out_tree = optree.tree_flatten(out, none_is_leaf=False)
        out_tracers = [o if isinstance(o, Tracer) else constant(np.asarray(o)) for o in out_leaves]
    finally:
        _STACK.pop()
    out_specs = _broadcast_prefix(out_shardings, out, "out_shardings")
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


def _check_one_device_set(named: list[tuple[str, Sharding | None]], mesh) -> None:
    """Every mesh in a program must view the same devices (logical meshes may differ in axes or
    order, not in device count)."""
    first = ("the ambient mesh", mesh) if mesh is not None else None
    for where, s in named:
        if s is None:
            continue
        if first is None:
            first = (where, s.mesh)
        elif s.mesh.size != first[1].size:
            raise ShardingError(
                "wrong-mesh",
                f"{where} is sharded over mesh @{s.mesh.name} of {s.mesh.size} devices, but {first[0]} uses "
                f"@{first[1].name} of {first[1].size}; all meshes of a program must view the same devices",
            )


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
        from .interpret import evaluate

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
