"""Dtypes: short names as JAX prints them in type strings (``f32``, ``bf16``, ``i32``, ``bool``),
and what "the same value, bit for bit" means for each (``bit_equal``)."""

from __future__ import annotations

import numpy as np

_KIND = {"f": "f", "i": "i", "u": "u", "c": "c"}


def short_name(dtype) -> str:
    if isinstance(dtype, str) and dtype in ("bf16", "bfloat16"):
        return "bf16"
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return "bool"
    if dt.kind in _KIND:
        return f"{_KIND[dt.kind]}{dt.itemsize * 8}"
    return str(dt)


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bit_equal(a, b) -> np.ndarray:
    """Elementwise: do ``a`` and ``b`` (one shape) hold the same value, bit for bit?

    Every bit counts (signed zeros, the last ULP), with two exceptions where bits carry no value:
    NaNs compare by class, any NaN equal to any NaN (a NaN's payload depends on the path that made
    it, not on the partition); and an x87 long double's padding bytes (float128 holds 80 bits in
    16 bytes) are not compared.
    """
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(np.asarray(b, dtype=a.dtype))
    if a.size == 0:
        return np.ones(a.shape, dtype=bool)
    if a.dtype.kind == "c":  # each part as a float
        part = np.dtype(f"f{a.dtype.itemsize // 2}")
        pa, pb = a.view(part).reshape(a.shape + (2,)), b.view(part).reshape(b.shape + (2,))
        return bit_equal(pa, pb).all(axis=-1) | (np.isnan(a) & np.isnan(b))
    if a.dtype.kind == "f" and a.dtype.itemsize not in _UINT:  # long double: values, and zero signs
        same = (a == b) & (np.signbit(a) == np.signbit(b))
    elif a.dtype.itemsize in _UINT and a.dtype.kind not in "OUSV":
        same = a.view(_UINT[a.dtype.itemsize]) == b.view(_UINT[a.dtype.itemsize])
    else:
        w = a.dtype.itemsize
        same = (a.reshape(-1).view(np.uint8).reshape(a.shape + (w,)) ==
                b.reshape(-1).view(np.uint8).reshape(b.shape + (w,))).all(axis=-1)
    if a.dtype.kind == "f":
        same |= np.isnan(a) & np.isnan(b)
    return same
