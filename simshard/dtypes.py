"""Short dtype names as JAX prints them in type strings (``f32``, ``bf16``, ``i32``, ``bool``)."""

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
