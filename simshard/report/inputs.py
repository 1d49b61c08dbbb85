"""Exact-arithmetic inputs: integer-valued floats small enough that every sum stays exact.

With integer values of magnitude at most ``m``, a product of ``depth`` inputs is an integer of
magnitude at most ``m**depth``, and a sum of ``n`` such products stays below ``n * m**depth``.
When that is below ``2**p`` (``p`` = the float's significand bits: 11 for float16, 24 for
float32, 53 for float64) every intermediate is an exactly representable integer, so any order
of summation gives the same bits and a sharded run can be checked bitwise against plain numpy.
``exact_inputs`` picks the largest such ``m`` (at most 8) with ``n`` = the largest input size.
Programs that divide, take roots or exponentials are not made exact by any input; their checks
rely on the canonical reduction order instead.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_SIGNIFICAND = {2: 11, 4: 24, 8: 53}


def _aval_of(spec, dtype) -> tuple[tuple[int, ...], np.dtype]:
    if isinstance(spec, np.ndarray):
        return tuple(spec.shape), spec.dtype
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):  # Aval, ShapeDtype, jax-like structs
        return tuple(int(s) for s in spec.shape), np.dtype(spec.dtype)
    if isinstance(spec, (tuple, list)) and all(isinstance(s, (int, np.integer)) for s in spec):
        return tuple(int(s) for s in spec), np.dtype(dtype)
    raise TypeError(f"exact_inputs: cannot read a shape from {spec!r} (give a shape tuple, an Aval, a ShapeDtype or an array)")


def _is_one(spec) -> bool:
    return (
        isinstance(spec, np.ndarray)
        or (hasattr(spec, "shape") and hasattr(spec, "dtype"))
        or (isinstance(spec, tuple) and all(isinstance(s, (int, np.integer)) for s in spec))
    )


def exact_magnitude(dtype, terms: int, depth: int = 2, cap: int = 8) -> int:
    """The largest ``m <= cap`` with ``terms * m**depth < 2**p`` (at least 1)."""
    dtype = np.dtype(dtype)
    p = _SIGNIFICAND.get(dtype.itemsize, 53) if dtype.kind in "fc" else 62
    m = cap
    while m > 1 and max(terms, 1) * m**depth >= 2**p:
        m -= 1
    return m


def exact_inputs(specs: Any, seed: int = 0, *, dtype=np.float32, max_abs: int | None = None, depth: int = 2):
    """Random integer-valued inputs for ``specs``: one shape / Aval / ShapeDtype / array (one
    array back), a sequence of them (a list back), or a Program (one array per input).

    Values are integers in ``[-m, m]`` (``m = max_abs``, else ``exact_magnitude`` over the
    largest input size and ``depth``); bool inputs are random booleans, unsigned ones ``[0, m]``.
    A plain shape uses ``dtype``. The same seed gives the same arrays.
    """
    from ..ir.program import Program

    if isinstance(specs, Program):
        specs = [v.aval for v in specs.inputs]
        one = False
    else:
        one = _is_one(specs)
        specs = [specs] if one else list(specs)
    avals = [_aval_of(s, dtype) for s in specs]
    terms = max((math.prod(shape) for shape, _ in avals), default=1)
    rng = np.random.default_rng(seed)
    out = []
    for shape, dt in avals:
        m = max_abs if max_abs is not None else exact_magnitude(dt, terms, depth)
        if dt.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(bool))
        elif dt.kind == "u":
            out.append(rng.integers(0, m + 1, size=shape).astype(dt))
        elif dt.kind in "if":
            out.append(rng.integers(-m, m + 1, size=shape).astype(dt))
        elif dt.kind == "c":
            re = rng.integers(-m, m + 1, size=shape)
            im = rng.integers(-m, m + 1, size=shape)
            out.append((re + 1j * im).astype(dt))
        else:
            raise TypeError(f"exact_inputs: no exact values for dtype {dt}")
    return out[0] if one else out
