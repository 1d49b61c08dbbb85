"""The state of a trace: the ``Tracer`` array, the equations recorded so far, and ``bind``.

A ``Tracer`` speaks numpy's protocols (``__array_ufunc__``, ``__array_function__``, operators,
indexing, the common ndarray methods), so ``np.tanh(x @ w).sum(axis=0)`` traces unchanged; it
hands each numpy call to its trace's ``array_methods`` (lowering to registry ops, ``tracing.
lowering``), which ``bind`` records as an equation. Traced values never silently turn into
concrete data: anything that would need one is a TraceError naming it.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from ..errors import TraceError, UnsupportedAttributeError
from ..ir import trace_stack
from ..ir.program import Aval, Eqn, Literal, Value
from ..ops import get_op
from ..sharding.dims import Sharding, dims_view

__all__ = ["Builder", "TraceError", "Tracer", "as_tracer", "bind", "constant", "current_builder", "name"]


class ConcreteValueError(TraceError):
    """A traced array was asked for its concrete values (``np.asarray`` of it, a numpy call that
    converts its operands): while tracing there are none. ``trace`` adds why, where it can tell."""


class Builder:
    """The equations recorded so far in one trace (a trace of ``ir.trace_stack``).

    ``array_methods`` is what numpy calls on this trace's Tracers do (``ufunc``,
    ``array_function``, ``getitem``, ``astype``, ``at``): ``trace`` passes
    ``simshard.tracing.array_methods``, so the Tracer type does not import the lowering above it.
    """

    def __init__(self, mesh=None, array_methods=None):
        self.eqns: list[Eqn] = []
        self.labels: list[tuple[str, Value]] = []
        self.ids = itertools.count()
        self.mesh = mesh
        self.array_methods = array_methods
        # Called for each new equation; explicit mode installs its typing rule here.
        self.on_bind: Callable[[Eqn, Sequence["Tracer"]], Sequence[Sharding | None]] | None = None
        # The latest Tracer made for each value: a transformation that revisits recorded values
        # (reverse mode) takes them with the sharding type they were traced with.
        self.tracers: dict[Value, "Tracer"] = {}

    def tracer(self, value: Value) -> "Tracer":
        known = self.tracers.get(value)
        return known if known is not None else Tracer(self, value)

    def new_value(self, aval: Aval) -> Value:
        return Value(next(self.ids), aval)

    def bind(self, op: str, *inputs, **params):
        return bind(op, *inputs, **params)


_Builder = Builder  # the name it had


def current_builder() -> Builder:
    return trace_stack.innermost()


class Tracer(np.lib.mixins.NDArrayOperatorsMixin):
    """A value being traced: its abstract type, the program value it stands for, its sharding."""

    __array_priority__ = 1000

    def __init__(self, builder: Builder, value: Value, sharding: Sharding | None = None, weak: bool = False):
        self._builder = builder
        self.value = value
        self.sharding = sharding
        # weakly typed (a Python scalar argument, as in numpy's NEP 50 and JAX): where it meets a
        # strongly typed operand it takes the dtype a Python scalar would (``lowering``)
        self.weak = weak
        if getattr(builder, "tracers", None) is not None:
            builder.tracers[value] = self

    @property
    def builder(self) -> Builder:
        """The trace this value belongs to (a value of an enclosing trace is captured, not used)."""
        return self._builder

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
        raise ConcreteValueError(
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
        return self._builder.array_methods.ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return self._builder.array_methods.array_function(func, args, kwargs)

    # -- methods (each is the numpy function of the same name) -----------------------------------
    def __getitem__(self, index):
        return self._builder.array_methods.getitem(self, index)

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
        return self._builder.array_methods.astype(self, dtype)

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

    def any(self, axis=None, keepdims=False):
        return np.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        return np.all(self, axis=axis, keepdims=keepdims)

    def __getattr__(self, name: str):
        """Only for names this class lacks: a TraceError naming the method (never a bare AttributeError)."""
        if name.startswith("_"):
            raise AttributeError(name)
        what = "the ndarray method" if callable(getattr(np.ndarray, name, None)) else "the attribute"
        raise UnsupportedAttributeError(
            f"{what} .{name} of a traced array ({self!r}) is not supported by simshard's tracer; "
            "use a numpy function it supports (docs/programs.md, 'What traces')"
        )

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
        return self._builder.array_methods.at(self)


# -- binding ops ----------------------------------------------------------------------------------
def _operand(builder: Builder, x, like_dtype=None) -> Value | Literal:
    """A program operand for ``x``: a traced value, a scalar literal, or a recorded constant."""
    if isinstance(x, Tracer):
        if x.builder is not builder:
            capture = getattr(builder, "capture", None)  # a nested trace (vmap's) closes over it
            if capture is None:
                raise TraceError(f"{x!r} belongs to another trace (a traced value escaped its function?)")
            return capture(x)
        return x.value
    if isinstance(x, Literal):
        return x
    arr = np.asarray(x)
    if arr.ndim == 0:
        if like_dtype is not None and is_python_scalar(x):
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
    tracers = tuple(Tracer(builder, v, dims_view(s, v.aval.shape)) for v, s in zip(outputs, result_shardings))
    return tracers[0] if len(tracers) == 1 else tracers


def is_python_scalar(x) -> bool:
    """A Python bool / int / float / complex (not a numpy scalar): weakly typed, as in NEP 50."""
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def as_tracer(x) -> Tracer:
    """``x`` as a Tracer: itself, or a recorded constant."""
    if isinstance(x, Tracer):
        return x
    return constant(np.asarray(x))


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
