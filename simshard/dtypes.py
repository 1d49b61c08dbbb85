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


# -- JAX's dtype rules with 64-bit types off (``simshard.numpy``; numpy's own rules elsewhere) --------
def canonical(dtype) -> np.dtype:
    """JAX's dtype with x64 off: 64-bit types become their 32-bit kind (float64 -> float32, ...)."""
    dt = np.dtype(dtype)
    if dt.itemsize == 8 and dt.kind in "iuf":
        return np.dtype(f"{dt.kind}4")
    return np.dtype(np.complex64) if dt == np.complex128 else dt


def is_weak(x) -> bool:
    """A Python scalar: weakly typed, it takes the other operand's type where it fits (JAX, NEP 50)."""
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


_WEAK_KIND = {bool: "b", int: "i", float: "f", complex: "c"}
_KIND_ORDER = "biufc"


def _join_strong(dtypes: list[np.dtype]) -> np.dtype | None:
    """JAX's type lattice on strongly typed operands: bool < ints < floats < complex; a signed and
    an unsigned int join to the signed int wide enough for both; two floats to the wider one
    (float16 and bfloat16 to float32); a float and a complex to the complex holding both."""
    if not dtypes:
        return None
    kinds = {d.kind for d in dtypes}
    size = lambda ks: max((d.itemsize for d in dtypes if d.kind in ks), default=0)  # noqa: E731
    if "c" in kinds:
        return np.dtype(f"c{max(size('c'), 2 * size('f'))}")
    if "f" in kinds:
        named = {d.name for d in dtypes if d.kind == "f" and d.itemsize == 2}
        return np.dtype(np.float32) if len(named) > 1 else max((d for d in dtypes if d.kind == "f"), key=lambda d: d.itemsize)
    if kinds & set("iu"):
        signed, unsigned = size("i"), size("u")
        if not signed:
            return np.dtype(f"u{unsigned}")
        return np.dtype(f"i{min(8, max(signed, 2 * unsigned))}")
    return np.dtype(np.bool_)


def jax_result_type(*operands) -> np.dtype:
    """The dtype JAX (x64 off) gives an elementwise op of ``operands``: arrays and numpy scalars
    are strong (their dtypes made 32-bit), Python scalars weak: a weak scalar only raises the
    result's kind (an int array times 1.5 is float32, a float16 array plus 1.0 stays float16)."""
    strong = [canonical(np.result_type(x) if not hasattr(x, "dtype") else x.dtype) for x in operands if not is_weak(x)]
    out = _join_strong(strong)
    weak = [_WEAK_KIND[type(x)] for x in operands if is_weak(x)]
    top = max(weak, key=_KIND_ORDER.index, default=None)
    if top is None:
        return canonical(out)
    if out is None or _KIND_ORDER.index(out.kind) < _KIND_ORDER.index(top):
        if top == "c":
            return np.dtype(np.complex64)
        return np.dtype({"b": np.bool_, "i": np.int32, "f": np.float32}[top])
    return canonical(out)
