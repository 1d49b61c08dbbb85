"""The table from core ATen ops (``torch.export``'s graph after ``run_decompositions``) to simshard's
ops of the same meaning, keyed ``"name.overload"`` (``"add.Tensor"``, ``"native_layer_norm.default"``).

Each entry is ``rule(node, *args, **kwargs)``: ``node`` (``torch_graph.AtenNode``) carries the
results' types and the user's source line; tensors arrive as Tracers (or numpy constants), the
other arguments as the graph states them. Composite ops (softmax, layer norm, GELU, addmm) are
written with the registry's ops the way PyTorch's CPU kernels compute them. A missing op is
refused by the interpreter, naming it and the user's line.
"""

from __future__ import annotations

import math

import numpy as np

from ..tracing.lowering_common import astype, broadcast_to
from ..tracing.lowering_contractions import dot_general
from ..tracing.state import as_tracer, bind
from .common import unsupported
from .jax_gather import take_along
from .torch_more import MORE

UNARY = {"neg": "neg", "exp": "exp", "log": "log", "tanh": "tanh", "rsqrt": "rsqrt", "sqrt": "sqrt", "abs": "abs",
         "sin": "sin", "cos": "cos", "reciprocal": "reciprocal", "logical_not": "logical_not", "erf": "erf",
         "log1p": "log1p", "expm1": "expm1", "floor": "floor", "ceil": "ceil", "sign": "sign"}
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min", "eq": "eq",
          "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "logical_and": "and", "logical_or": "or",
          "pow": "pow", "atan2": "atan2"}


def _like(value, x):
    """A Python number as a scalar of ``x``'s dtype (PyTorch's wrapped-number rule), a tensor as is."""
    if isinstance(value, (bool, int, float)):
        dtype = np.dtype(x.dtype) if np.dtype(x.dtype).kind in "fc" or isinstance(value, (bool, int)) else np.float32
        return np.asarray(value, dtype=dtype)
    return value


def _fit(node, *xs) -> list:
    shape = node.out_types[0].shape
    return [x if np.ndim(x) == 0 or tuple(np.shape(x)) == shape else broadcast_to(as_tracer(x), shape) for x in xs]


def _binary(op):
    def rule(node, x, y, alpha=1, rounding_mode=None):
        x, y = (x, _like(y, x)) if not isinstance(x, (int, float)) else (_like(x, y), y)
        if alpha != 1:
            y = bind("mul", y, _like(alpha, y))
        x, y = _fit(node, x, y)
        if rounding_mode is not None:
            return _round(node, bind(op, x, y), rounding_mode)
        return bind(op, x, y)

    return rule


def _round(node, q, mode):
    if mode == "floor":
        return bind("floor", q)
    raise unsupported("PyTorch", "div", f"rounding_mode={mode!r}", node.where)


def _unary(op):
    return lambda node, x: bind(op, as_tracer(x))


def _dims(dims, ndim) -> tuple[int, ...]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims or range(ndim))
    return tuple(sorted(d % ndim for d in dims)) if ndim else ()


def _reshape_to_out(node, x, *_, **__):
    return bind("reshape", as_tracer(x), new_shape=node.out_types[0].shape)


def _keep(node, reduced, x, dims, keepdim):
    return bind("reshape", reduced, new_shape=node.out_types[0].shape) if keepdim else reduced


def _reduce(op):
    def rule(node, x, dims=None, keepdim=False, dtype=None):
        x = as_tracer(x)
        target = node.out_types[0].dtype
        if np.dtype(x.dtype) != target:  # PyTorch sums bools and small ints in int64, or in ``dtype``
            x = astype(x, target)
        axes = _dims(dims, x.ndim)
        return _keep(node, bind(op, x, axes=axes) if axes else x, x, axes, keepdim)

    return rule


def _mean(node, x, dims=None, keepdim=False, dtype=None):
    x = as_tracer(x)
    axes = _dims(dims, x.ndim)
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    total = bind("reduce_sum", x, axes=axes)
    return _keep(node, bind("div", total, np.asarray(n, total.dtype)), x, axes, keepdim)


def _any(node, x, dim=None, keepdim=False):
    x = as_tracer(x)
    truth = x if np.dtype(x.dtype) == np.bool_ else bind("ne", x, np.zeros((), x.dtype))
    axes = _dims(dim, x.ndim)
    return _keep(node, bind("reduce_max", truth, axes=axes), x, axes, keepdim)


def _bcast(reduced, x, axis):
    """A reduction over ``axis`` broadcast back to ``x``'s shape."""
    dims = tuple(d for d in range(x.ndim) if d != axis)
    return bind("broadcast_in_dim", reduced, shape=tuple(x.shape), broadcast_dimensions=dims)


def _softmax(node, x, dim, half_to_float=False):
    x = as_tracer(x)
    axis = dim % x.ndim
    e = bind("exp", bind("sub", x, _bcast(bind("reduce_max", x, axes=(axis,)), x, axis)))
    return bind("div", e, _bcast(bind("reduce_sum", e, axes=(axis,)), x, axis))


def _log_softmax(node, x, dim, half_to_float=False):
    x = as_tracer(x)
    axis = dim % x.ndim
    shifted = bind("sub", x, _bcast(bind("reduce_max", x, axes=(axis,)), x, axis))
    total = bind("reduce_sum", bind("exp", shifted), axes=(axis,))
    return bind("sub", shifted, _bcast(bind("log", total), x, axis))


def _layer_norm(node, x, shape, weight=None, bias=None, eps=1e-5):
    """(out, mean, rstd) over the trailing ``len(shape)`` dims, as ``native_layer_norm`` returns."""
    x = as_tracer(x)
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    lead = tuple(range(x.ndim - len(shape)))
    n = np.asarray(int(np.prod(shape, dtype=np.int64)), x.dtype)

    def back(v):
        return bind("broadcast_in_dim", v, shape=tuple(x.shape), broadcast_dimensions=lead)

    mean = bind("div", bind("reduce_sum", x, axes=axes), n)
    centred = bind("sub", x, back(mean))
    var = bind("div", bind("reduce_sum", bind("mul", centred, centred), axes=axes), n)
    rstd = bind("rsqrt", bind("add", var, np.asarray(eps, x.dtype)))
    out = bind("mul", centred, back(rstd))
    tail = tuple(range(len(lead), x.ndim))
    if weight is not None:
        out = bind("mul", out, bind("broadcast_in_dim", weight, shape=tuple(x.shape), broadcast_dimensions=tail))
    if bias is not None:
        out = bind("add", out, bind("broadcast_in_dim", bias, shape=tuple(x.shape), broadcast_dimensions=tail))
    keep = node.out_types[1].shape
    return [out, bind("reshape", mean, new_shape=keep), bind("reshape", rstd, new_shape=keep)]


def _gelu(node, x, approximate="none"):
    x = as_tracer(x)
    half, one = np.asarray(0.5, x.dtype), np.asarray(1.0, x.dtype)
    if approximate == "tanh":
        inner = bind("mul", np.asarray(math.sqrt(2 / math.pi), x.dtype),
                     bind("add", x, bind("mul", np.asarray(0.044715, x.dtype), bind("mul", bind("mul", x, x), x))))
        return bind("mul", bind("mul", x, half), bind("add", one, bind("tanh", inner)))
    erf = bind("erf", bind("mul", x, np.asarray(1 / math.sqrt(2), x.dtype)))
    return bind("mul", bind("mul", x, half), bind("add", one, erf))


def _matmul(node, a, b):
    return dot_general(a, b, ((a.ndim - 1,), (0,)))


def _bmm(node, a, b):
    return dot_general(a, b, ((2,), (1,)), ((0,), (0,)))


def _addmm(node, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise unsupported("PyTorch", "addmm", f"beta={beta}, alpha={alpha}", node.where)
    prod = dot_general(a, b, ((1,), (0,)))
    return bind("add", prod, broadcast_to(as_tracer(bias), tuple(prod.shape)))


def _permute(node, x, dims):
    x = as_tracer(x)
    return bind("transpose", x, perm=tuple(d % x.ndim for d in dims))


def _transpose(node, x, a=0, b=1):
    x = as_tracer(x)
    perm = list(range(x.ndim))
    if x.ndim > 1:
        perm[a % x.ndim], perm[b % x.ndim] = perm[b % x.ndim], perm[a % x.ndim]
    return bind("transpose", x, perm=tuple(perm))


def _expand(node, x, sizes, implicit=False):
    return broadcast_to(as_tracer(x), node.out_types[0].shape)


def _select(node, x, dim, index):
    x = as_tracer(x)
    d = dim % x.ndim
    i = index % x.shape[d]
    start, limit = [0] * x.ndim, list(x.shape)
    start[d], limit[d] = i, i + 1
    cut = bind("slice", x, start=tuple(start), limit=tuple(limit), strides=(1,) * x.ndim)
    return bind("reshape", cut, new_shape=node.out_types[0].shape)


def _slice(node, x, dim=0, start=None, end=None, step=1):
    x = as_tracer(x)
    d = dim % x.ndim
    lo, hi, st = slice(start, end, step).indices(x.shape[d])
    begin, limit, strides = [0] * x.ndim, list(x.shape), [1] * x.ndim
    begin[d], limit[d], strides[d] = lo, max(hi, lo), st
    return bind("slice", x, start=tuple(begin), limit=tuple(limit), strides=tuple(strides))


def _split(node, x, sizes, dim=0):
    x = as_tracer(x)
    d, outs, start = dim % x.ndim, [], 0
    for t in node.out_types:
        n = t.shape[d]
        outs.append(_slice(node, x, d, start, start + n))
        start += n
    return outs


def _cat(node, xs, dim=0):
    xs = [as_tracer(x) for x in xs if tuple(np.shape(x)) != (0,)]
    return bind("concatenate", *xs, axis=dim % xs[0].ndim)


def _where(node, cond, x, y):
    cond, x, y = _fit(node, cond, _like(x, y) if not hasattr(x, "shape") else x, _like(y, x) if not hasattr(y, "shape") else y)
    return bind("select", cond, x, y)


def _fill(node, value):
    t = node.out_types[0]
    if not t.shape:  # a scalar: a literal, as JAX's jaxprs and numpy's scalars give
        return np.asarray(value, t.dtype)
    return bind("full", shape=t.shape, fill_value=np.asarray(value, t.dtype).item(), dtype=t.dtype)


def _full_like(node, x, value, **_):
    return _fill(node, value)


def _scalar_tensor(node, value, **_):
    return _fill(node, value)


def _full(node, size, value, **_):
    return _fill(node, value)


def _rsub(node, x, y, alpha=1):
    """``y - alpha * x`` (a number minus a tensor)."""
    scaled = bind("mul", x, _like(alpha, x)) if alpha != 1 else x
    return bind("sub", _like(y, x), scaled)


def _to_copy(node, x, dtype=None, **_):
    target = node.out_types[0].dtype
    return as_tracer(x) if np.dtype(x.dtype) == target else astype(as_tracer(x), target)


def _gather(node, x, dim, index, sparse_grad=False):
    return take_along(x, index, dim % np.ndim(x))


def _embedding(node, weight, indices, *_):
    return bind("take", weight, indices, axis=0)


def _relu(node, x):
    return bind("max", x, np.zeros((), np.dtype(x.dtype)))


def _sigmoid(node, x):
    one = np.asarray(1, np.dtype(x.dtype))
    return bind("div", one, bind("add", one, bind("exp", bind("neg", x))))


def _identity(node, x, *_, **__):
    return x


def _dropout(node, x, p, train):
    if train and p > 0:
        raise unsupported("PyTorch", "native_dropout", "dropout in training mode (random masks): call model.eval()",
                          node.where)
    return [x, bind("full", shape=tuple(x.shape), fill_value=True, dtype=np.dtype(bool))]


def _argmax(op):
    def rule(node, x, dim=None, keepdim=False):
        x = as_tracer(x)
        if dim is None:
            x, dim = bind("reshape", x, new_shape=(x.size,)), 0
        out = bind(op, x, axis=dim % x.ndim, index_dtype=node.out_types[0].dtype)
        return bind("reshape", out, new_shape=node.out_types[0].shape) if keepdim else out

    return rule


ATEN = {
    **{f"{k}.default": _unary(v) for k, v in UNARY.items()},
    **{f"{k}.{o}": _binary(v) for k, v in BINARY.items() for o in ("Tensor", "Scalar", "Tensor_Scalar", "Tensor_mode",
                                                                     "Scalar_mode", "default", "Tensor_Tensor")},
    "rsub.Scalar": _rsub,
    "relu.default": _relu, "sigmoid.default": _sigmoid, "gelu.default": _gelu,
    "_softmax.default": _softmax, "_log_softmax.default": _log_softmax, "native_layer_norm.default": _layer_norm,
    "mm.default": _matmul, "bmm.default": _bmm, "addmm.default": _addmm,
    "permute.default": _permute, "transpose.int": _transpose, "t.default": _transpose, "expand.default": _expand,
    "view.default": _reshape_to_out, "_unsafe_view.default": _reshape_to_out, "reshape.default": _reshape_to_out,
    "unsqueeze.default": _reshape_to_out, "squeeze.dims": _reshape_to_out, "squeeze.dim": _reshape_to_out,
    "squeeze.default": _reshape_to_out, "select.int": _select, "slice.Tensor": _slice, "cat.default": _cat,
    "split.Tensor": _split, "split_with_sizes.default": _split, "where.self": _where,
    "clone.default": _identity, "alias.default": _identity, "detach.default": _identity, "lift_fresh_copy.default": _identity,
    "_to_copy.default": _to_copy, "full_like.default": _full_like, "scalar_tensor.default": _scalar_tensor, "full.default": _full,
    "gather.default": _gather, "embedding.default": _embedding, "native_dropout.default": _dropout,
    "sum.dim_IntList": _reduce("reduce_sum"), "sum.default": _reduce("reduce_sum"), "amax.default": _reduce("reduce_max"),
    "amin.default": _reduce("reduce_min"), "mean.dim": _mean, "any.dim": _any, "any.default": _any,
    "argmax.default": _argmax("argmax"), "argmin.default": _argmax("argmin"),
    **MORE,
}
