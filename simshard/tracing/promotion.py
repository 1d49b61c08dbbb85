"""JAX's dtype rules (x64 off) for ``simshard.numpy``'s functions of several operands.

``simshard.numpy`` is jax.numpy's spelling, so its functions give JAX's dtypes: the operands are
first cast to the type JAX's promotion lattice gives them together (``dtypes.jax_result_type``:
Python scalars weak, 64-bit types made 32-bit), then numpy's function runs on operands of one
dtype, where numpy's and JAX's rules agree. Functions JAX computes in floating point (``sin``,
``sqrt``, ``divide``, ...) take integer operands as float32. numpy's own functions on traced
values (``np.sin(x)``, ``x + 1.5``) keep numpy's rules: docs/dtypes.md sets the two side by side.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..dtypes import canonical, is_weak, jax_result_type
from .lowering import astype
from .state import Tracer


def cast(x, dtype: np.dtype):
    """``x`` (a Tracer, an array, a Python or numpy scalar) as ``dtype``."""
    if isinstance(x, Tracer):
        return x if x.dtype == dtype else astype(x, dtype)
    if is_weak(x) or np.ndim(x) == 0:
        return np.asarray(x, dtype=dtype)[()] if not isinstance(x, np.ndarray) else np.asarray(x, dtype=dtype)
    return np.asarray(x).astype(dtype, copy=False)


def promote(*operands, inexact: bool = False) -> list:
    """``operands`` cast to the dtype JAX gives them together (a float one when ``inexact``)."""
    dt = jax_result_type(*operands)
    if inexact and dt.kind in "biu":
        dt = np.dtype(np.float32)
    return [cast(x, dt) for x in operands]


def strong(x):
    """A numpy array argument as JAX takes it: its dtype made 32-bit (Tracers and scalars as given)."""
    if isinstance(x, np.ndarray) and canonical(x.dtype) != x.dtype:
        return x.astype(canonical(x.dtype))
    return x


def jax_ufunc(uf: np.ufunc, *, inexact: bool = False, integers_kept: bool = False) -> Callable:
    """numpy's ufunc ``uf`` with JAX's dtype rules: operands promoted together first (to a float
    type when ``inexact``; ``integers_kept``: an integer operand is returned as it is, as JAX's
    ``floor`` / ``ceil`` do)."""

    def f(*args):
        if integers_kept and len(args) == 1 and jax_result_type(*args).kind in "biu":
            return strong(args[0])
        return uf(*promote(*args, inexact=inexact))

    f.__name__ = uf.__name__
    f.__doc__ = f"jnp.{uf.__name__}: numpy's ufunc on operands promoted as JAX promotes them (x64 off)."
    return f


__all__ = ["cast", "jax_ufunc", "promote", "strong"]
