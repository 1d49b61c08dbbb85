"""DTensor's arithmetic: ops on DTensors run on the devices, their results placed by DTensor's rules.

    d = distribute_tensor(x, mesh, [Shard(1)]); w = distribute_tensor(y, mesh, [Shard(0)])
    (d @ w).placements       # (Partial(sum),): the contraction is sharded, nothing moved
    (d + d).placements, (d * 2.0).placements, d.sum().placements, d.T.placements, d.softmax(0)

An op on DTensors is the eager call of JAX's eager arrays (``runtime/eager/call``: the op traced
with the inputs' layouts, partitioned and run on their devices, compiled once per op and input
types), with one difference: the output placements are DTensor's (``dtensor_strategy``: output
placements from input placements, Partial where a contraction is sharded), handed to the
partitioner as the outputs' layouts, so it redistributes only what the strategy demands. The
operators and the torch-spelled methods below are each one such op; numpy functions on
DTensors (``np.concatenate``, ``np.exp``) are too.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, NamedTuple

import numpy as np
import optree

from simshard.errors import ShardingError
from simshard.sharding.placements import DTensorSpec, Replicate

from ..eager import call as eager  # the module (the package's names do not include the function)
from ..eager.array import MethodCall, UfuncCall
from .dtensor_strategy import output_placements

_STRATEGIES: OrderedDict = OrderedDict()  # eager cache key -> output placements (each op traced once for them)


def _placements_in(parts: eager.Split, mesh=None) -> list[tuple]:
    out = []
    for i in parts.dynamic:
        x = parts.leaves[i]
        if not hasattr(x, "placements"):
            raise ShardingError("mixed-tensors", f"an op got a DTensor and a {type(x).__name__} of shape {x.shape}: "
                                "distribute the array first (distribute_tensor(x, mesh, [Replicate()]))")
        out.append(tuple(x.placements))
    return out


def _strategy(fun, parts: eager.Split, host) -> list[DTensorSpec]:
    """The outputs' DTensorSpecs by DTensor's rules for this op on these input placements."""
    key = eager.cache_key(fun, parts, ("dtensor", id(host)))
    if key is not None and key in _STRATEGIES:
        return _STRATEGIES[key]
    from simshard.tracing.tracer import trace

    program = trace(eager.flat_function(fun, parts), *eager.abstract_inputs(parts, eager.in_specs(parts, None)),
                    mesh=host.mesh)
    placed = output_placements(program, _placements_in(parts, host.mesh), host.mesh.axis_sizes)
    specs = [DTensorSpec(host.mesh, p).normalized(v.aval.ndim) for p, v in zip(placed, program.outputs)]
    specs = optree.tree_unflatten(program.out_tree, specs) if program.out_tree is not None else specs
    if key is not None:
        _STRATEGIES[key] = specs
        while len(_STRATEGIES) > eager.CACHE_SIZE:
            _STRATEGIES.popitem(last=False)
    return specs


def run_op(fun: Callable, args: tuple, kwargs: dict | None = None) -> Any:
    """``fun(*args, **kwargs)`` on DTensors, on their devices; DTensors out, placed by DTensor's rules."""
    kwargs = kwargs or {}
    parts = eager.split(args, kwargs)
    _placements_in(parts, None)  # DTensors only (an array among them is named)
    tensors = [parts.leaves[i] for i in parts.dynamic]
    host, made = eager.host_of_arrays(tensors), type(tensors[0])  # the results: DTensors like the inputs
    specs = _strategy(fun, parts, host)
    flat = iter(optree.tree_leaves(specs, is_leaf=lambda s: isinstance(s, DTensorSpec), none_is_leaf=False))

    def wrap(arr, host):
        return made(arr.shape, arr.dtype, next(flat), arr.shards, arr.fetch, host)

    return eager.call(fun, args, kwargs, wrap=wrap, out_shardings=specs)


class MaxResult(NamedTuple):
    """``d.max(dim)``: torch's (values, indices)."""

    values: Any
    indices: Any


# -- the functions the methods trace (module level: hashable, so each op is compiled once) ---------------
def _sum(x, dim=None, keepdim=False):
    return np.sum(x, axis=dim, keepdims=keepdim)


def _mean(x, dim=None, keepdim=False):
    return np.mean(x, axis=dim, keepdims=keepdim)


def _amax(x, dim=None, keepdim=False):
    return np.max(x, axis=dim, keepdims=keepdim)


def _amin(x, dim=None, keepdim=False):
    return np.min(x, axis=dim, keepdims=keepdim)


def _argmax(x, dim=None, keepdim=False):
    return np.argmax(x, axis=dim, keepdims=keepdim)


def _softmax(x, dim):
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def _reshape(x, shape):
    return np.reshape(x, shape)


def _transpose(x, dim0, dim1):
    return np.swapaxes(x, dim0, dim1)


def _permute(x, dims):
    return np.transpose(x, dims)


def _unsqueeze(x, dim):
    return np.expand_dims(x, dim)


def _cumsum(x, dim):
    return np.cumsum(x, axis=dim)


def _relu(x):
    return np.maximum(x, 0)


def _shape(args) -> tuple[int, ...]:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


class DTensorOps(np.lib.mixins.NDArrayOperatorsMixin):
    """The arithmetic of a DTensor (``+ - * / @ **``, comparisons, numpy's functions and torch's
    methods), each one op run by ``run_op``."""

    __array_priority__ = 100
    __hash__ = object.__hash__  # the operators' __eq__ is elementwise; a DTensor is still an object

    @property
    def device_array(self):
        """The arrays on the devices (the eager call's view of its inputs): the DTensor itself."""
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if kwargs.get("out") is not None:
            raise TypeError(f"{ufunc.__name__}(..., out=...): a DTensor op makes a new DTensor; use the result")
        return run_op(UfuncCall(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.shape, np.ndim, np.size):
            return func(np.empty(self.shape, dtype=np.bool_), *args[1:], **kwargs)
        return run_op(func, args, kwargs)

    def __getitem__(self, index):
        return run_op(MethodCall("__getitem__"), (self, index))

    # -- torch's methods ------------------------------------------------------------------------
    def sum(self, dim=None, keepdim=False):
        return run_op(_sum, (self, dim, keepdim))

    def mean(self, dim=None, keepdim=False):
        return run_op(_mean, (self, dim, keepdim))

    def amax(self, dim=None, keepdim=False):
        return run_op(_amax, (self, dim, keepdim))

    def amin(self, dim=None, keepdim=False):
        return run_op(_amin, (self, dim, keepdim))

    def max(self, dim=None, keepdim=False):
        """The largest element; with ``dim``, torch's (values, indices) along it."""
        if dim is None:
            return self.amax()
        return MaxResult(self.amax(dim, keepdim), run_op(_argmax, (self, dim, keepdim)))

    def softmax(self, dim):
        return run_op(_softmax, (self, dim))

    def matmul(self, other):
        return self @ other

    def t(self):
        if len(self.shape) > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dimensions, but self is {len(self.shape)}D")
        return run_op(_permute, (self, tuple(reversed(range(len(self.shape))))))

    @property
    def T(self):
        return run_op(_permute, (self, tuple(reversed(range(len(self.shape))))))

    def transpose(self, dim0, dim1):
        return run_op(_transpose, (self, dim0, dim1))

    def permute(self, *dims):
        return run_op(_permute, (self, _shape(dims)))

    def view(self, *shape):
        return run_op(_reshape, (self, _shape(shape)))

    def reshape(self, *shape):
        return run_op(_reshape, (self, _shape(shape)))

    def unsqueeze(self, dim):
        return run_op(_unsqueeze, (self, dim))

    def cumsum(self, dim):
        return run_op(_cumsum, (self, dim))

    def exp(self):
        return np.exp(self)

    def tanh(self):
        return np.tanh(self)

    def relu(self):
        return run_op(_relu, (self,))

    def size(self, dim=None):
        """torch's ``size()``: the global shape (or one dim's size)."""
        return tuple(self.shape) if dim is None else self.shape[dim]


def is_replicated(d) -> bool:
    return all(isinstance(p, Replicate) for p in d.placements)


__all__ = ["DTensorOps", "MaxResult", "is_replicated", "run_op"]
