"""``Array``: JAX's array, committed to the devices of a mesh and typed by its sharding.

``ss.device_put(x, NamedSharding(mesh, P("X", None)))`` returns one: each device holds its shard
(a ``DeviceArray`` underneath, on a ``LocalMesh`` or a ``RayMesh``); ``ss.typeof(arr)`` is
``float32[8@X,16]`` (its sharding over the explicit axes of its mesh), ``arr.sharding`` a
``NamedSharding`` whose ``spec`` is its PartitionSpec. Every numpy operation on it (operators,
ufuncs, numpy and ``simshard.numpy`` functions, the ndarray methods, indexing) is an eager op
(``call``): the op traced with the arrays' shardings and run on their devices, its results
``Array``s typed by the same rules as under ``ss.jit``, its errors those of the trace.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from simshard.ir import trace_stack
from simshard.ir.program import Aval
from simshard.sharding.dims import NamedSharding, Sharding
from simshard.sharding.partition_spec import P

from ..calls.device_array import DeviceArray
from . import call as eager

_METHODS = ("reshape", "transpose", "astype", "ravel", "flatten", "squeeze", "swapaxes", "sum", "mean", "max", "min",
            "prod", "var", "std", "argmax", "argmin", "any", "all", "cumsum", "dot", "clip", "take", "round",
            "conj", "repeat")
_ATTRIBUTES = ("T", "mT", "real", "imag")


@dataclass(frozen=True)
class UfuncCall:
    """``ufunc.method(*inputs, **kwargs)`` as a hashable function (the key of a compiled eager op)."""

    ufunc: np.ufunc
    method: str

    def __call__(self, *inputs, **kwargs):
        return getattr(self.ufunc, self.method)(*inputs, **kwargs)


@dataclass(frozen=True)
class MethodCall:
    """``x.name(*args, **kwargs)`` (or the attribute ``x.name``), hashable likewise."""

    name: str
    attribute: bool = False

    def __call__(self, x, *args, **kwargs):
        got = getattr(x, self.name)
        return got if self.attribute else got(*args, **kwargs)


@dataclass(frozen=True)
class AtCall:
    """``x.at[index].method(*values)`` as a hashable function of ``(x, index, *values)``."""

    method: str

    def __call__(self, x, index, *values, **kwargs):
        return getattr(x.at[index], self.method)(*values, **kwargs)


class IndexUpdate:
    """``arr.at[index]``: JAX's functional updates (``set``, ``add``, ``multiply``, ``min``, ``max``,
    ``get``), each an eager op returning a new Array."""

    def __init__(self, array: "Array", index=None):
        self.array, self.index = array, index

    def __getitem__(self, index) -> "IndexUpdate":
        return IndexUpdate(self.array, index)

    def __getattr__(self, method: str):
        if method not in ("set", "add", "multiply", "divide", "power", "min", "max", "get"):
            raise AttributeError(f"x.at[...] has no update {method!r}")
        return lambda *values, **kw: eager.call(AtCall(method), (self.array, self.index, *values), kw, wrap=Array)


def named_sharding(sharding: Sharding):
    """A Sharding as JAX's ``NamedSharding(mesh, P(...))`` (each dim's axes, unreduced axes); one
    over sub-axes, which a P cannot spell, as the Sharding itself."""
    if any(a.sub is not None for d in sharding.dims for a in d.axes):
        return sharding
    entries = [None if not d.axes else d.axes[0].name if len(d.axes) == 1 else tuple(a.name for a in d.axes)
               for d in sharding.dims]
    return NamedSharding(sharding.mesh, P(*entries, unreduced=tuple(a.name for a in sharding.unreduced)))


class Array(np.lib.mixins.NDArrayOperatorsMixin):
    """A global array whose shards live on the devices (see the module docstring)."""

    __array_priority__ = 100

    def __init__(self, device_array: DeviceArray, host):
        if not isinstance(device_array.sharding, Sharding):  # a whole copy everywhere: replicated
            device_array = dataclasses.replace(
                device_array, sharding=Sharding.replicated_on(host.mesh, len(device_array.shape)))
        self.device_array = device_array
        self.host = host

    # -- what it is ----------------------------------------------------------------------------
    shape = property(lambda self: tuple(self.device_array.shape))
    dtype = property(lambda self: np.dtype(self.device_array.dtype))
    ndim = property(lambda self: len(self.device_array.shape))
    size = property(lambda self: self.device_array.size)
    nbytes = property(lambda self: self.device_array.nbytes)
    aval = property(lambda self: Aval(self.shape, self.dtype))

    @property
    def committed_sharding(self) -> Sharding:
        """The Sharding the shards are laid out by (read by ``ss.typeof``, ``tracing.committed``)."""
        return self.device_array.sharding

    @property
    def sharding(self):
        """JAX's ``NamedSharding`` of the array (``arr.sharding.spec``: its PartitionSpec)."""
        return named_sharding(self.committed_sharding)

    @property
    def mesh(self):
        return self.committed_sharding.mesh

    def devices(self) -> set[int]:
        return set(self.device_array.devices)

    def shard(self, device: int) -> np.ndarray:
        """The block ``device`` holds."""
        return self.device_array.shard(device)

    def block_until_ready(self) -> "Array":
        return self  # an eager op has finished when it returns

    # -- reading it -----------------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        a = self.device_array.gather()
        return a if dtype is None else a.astype(dtype)

    def tolist(self):
        return np.asarray(self).tolist()

    def item(self):
        return np.asarray(self).item()

    def __float__(self):
        return float(np.asarray(self))

    def __int__(self):
        return int(np.asarray(self))

    def __index__(self):
        return int(np.asarray(self).__index__())

    def __bool__(self):
        return bool(np.asarray(self))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        body = np.array2string(np.asarray(self), separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype.name})"

    # -- eager ops ------------------------------------------------------------------------------
    @classmethod
    def __simshard_eager__(cls, fun: Callable, args: tuple, kwargs: dict, **options) -> Any:
        """``fun`` run on the devices of the arrays among ``args``, its results Arrays (``tracing.committed``)."""
        return eager.call(fun, args, kwargs, wrap=cls, **options)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if trace_stack.current() is not None:
            return NotImplemented  # met inside a trace: the tracer takes it, as a constant
        if kwargs.get("out") is not None:
            raise TypeError(f"{ufunc.__name__}(..., out=...): an Array is immutable; use the result")
        return eager.call(UfuncCall(ufunc, method), inputs, kwargs, wrap=Array)

    def __array_function__(self, func, types, args, kwargs):
        if trace_stack.current() is not None:
            return NotImplemented
        if func in (np.shape, np.ndim, np.size):
            return func(np.empty(self.shape, dtype=np.bool_), *args[1:], **kwargs)
        return eager.call(func, args, kwargs, wrap=Array)

    def __getitem__(self, index):
        return eager.call(MethodCall("__getitem__"), (self, index), {}, wrap=Array)

    @property
    def at(self) -> IndexUpdate:
        """JAX's ``x.at[index].set(v)`` (and ``add``, ``multiply``, ...): a new Array, eagerly."""
        return IndexUpdate(self)

    def __setitem__(self, index, value):
        raise TypeError("an Array is immutable: use x.at[index].set(value) inside ss.jit, or np.asarray(x) to edit a copy")


def _method(name: str):
    def method(self, *args, **kwargs):
        return eager.call(MethodCall(name), (self, *args), kwargs, wrap=Array)

    method.__name__ = name
    method.__doc__ = f"``x.{name}(...)`` as an eager op on the devices."
    return method


def _attribute(name: str):
    return property(lambda self: eager.call(MethodCall(name, attribute=True), (self,), {}, wrap=Array),
                    doc=f"``x.{name}`` as an eager op on the devices.")


for _name in _METHODS:
    setattr(Array, _name, _method(_name))
for _name in _ATTRIBUTES:
    setattr(Array, _name, _attribute(_name))

__all__ = ["Array", "AtCall", "IndexUpdate", "MethodCall", "UfuncCall", "named_sharding"]
