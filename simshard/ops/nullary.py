"""Ops without operands: ``iota``, ``full`` and ``constant``.

Every result dim is its own pass-through factor (``()->([a, b])``): any sharding works and each
device builds just its block. Their kernels take an optional ``out_index`` keyword: per dim, the
global indices of the block to produce (a device's ``Layout.indices``); without it they build the
whole array, and their ``abstract_eval`` gives that block's shape (the whole result's without it).
Their params stay global on every device (``local_params`` is the identity).
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .builder import RuleBuilder
from .registry import register_op


def nullary_rule(in_avals, out_avals, **_):
    out = out_avals[0]
    return RuleBuilder([], [out.shape]).add_pointwise(out.shape).build()


def _block_shape(shape, out_index) -> tuple[int, ...]:
    return tuple(shape) if out_index is None else tuple(len(ix) for ix in out_index)


def _dtype(op: str, dtype) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ValueError(f"{op}: dtype {dtype!r} is not a dtype") from None


def _check_out_index(op: str, shape, out_index) -> None:
    if out_index is not None and len(out_index) != len(shape):
        raise ValueError(f"{op}: out_index has {len(out_index)} index arrays for a result of rank {len(shape)}")


# -- iota --------------------------------------------------------------------------------------
def _iota_eval(*avals, shape, dimension, dtype, out_index=None, **_):
    preconditions.arity("iota", avals, 0)
    shape = preconditions.shape("iota", shape)
    if not shape:
        raise ValueError("iota: shape must have rank >= 1")
    preconditions.axis("iota", dimension, len(shape), "dimension")
    _check_out_index("iota", shape, out_index)
    return (Aval(_block_shape(shape, out_index), _dtype("iota", dtype)),)


def _iota_kernel(*, shape, dimension, dtype, out_index=None, **_):
    _check_out_index("iota", shape, out_index)
    ix = np.arange(shape[dimension]) if out_index is None else np.asarray(out_index[dimension])
    view = [1] * len(shape)
    view[dimension] = len(ix)
    block = _block_shape(shape, out_index)
    return (np.array(np.broadcast_to(ix.astype(dtype).reshape(view), block)),)


register_op("iota", _iota_eval, _iota_kernel, nullary_rule, doc="0, 1, 2, ... along `dimension`, broadcast to `shape`")


# -- full --------------------------------------------------------------------------------------
def _full_eval(*avals, shape, fill_value, dtype, out_index=None, **_):
    preconditions.arity("full", avals, 0)
    shape = preconditions.shape("full", shape)
    if np.ndim(fill_value) != 0:
        raise ValueError(f"full: fill_value must be a scalar, got shape {np.shape(fill_value)}")
    _check_out_index("full", shape, out_index)
    return (Aval(_block_shape(shape, out_index), _dtype("full", dtype)),)


def _full_kernel(*, shape, fill_value, dtype, out_index=None, **_):
    _check_out_index("full", shape, out_index)
    return (np.full(_block_shape(shape, out_index), fill_value, dtype=dtype),)


register_op("full", _full_eval, _full_kernel, nullary_rule, doc="`shape` filled with `fill_value` (zeros, ones, full)")


# -- constant ----------------------------------------------------------------------------------
def _constant_eval(*avals, value, out_index=None, **_):
    preconditions.arity("constant", avals, 0)
    if not isinstance(value, np.ndarray):
        raise ValueError(f"constant: value must be a numpy array, got {type(value).__name__}")
    _check_out_index("constant", value.shape, out_index)
    shape = value.shape if value.ndim == 0 else _block_shape(value.shape, out_index)
    return (Aval(shape, value.dtype),)


def _constant_kernel(*, value, out_index=None, **_):
    _check_out_index("constant", value.shape, out_index)
    if out_index is None or value.ndim == 0:
        return (np.array(value, copy=True),)
    return (np.array(value[np.ix_(*out_index)]),)


register_op("constant", _constant_eval, _constant_kernel, nullary_rule, doc="a captured numpy array")
