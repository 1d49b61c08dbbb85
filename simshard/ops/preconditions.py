"""Parameter checks shared by the op families; every message names the op."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def int_tuple(op: str, what: str, value, length: int | None = None) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        raise ValueError(f"{op}: {what} must be a sequence of ints, got {value!r}") from None
    if any(isinstance(v, (bool, np.bool_)) for v in value):
        raise ValueError(f"{op}: {what} must be ints, got {value!r}")
    if length is not None and len(out) != length:
        raise ValueError(f"{op}: {what} {out} must have {length} entries (one per dimension), got {len(out)}")
    return out


def axis(op: str, value, ndim: int, what: str = "axis") -> int:
    """A normalized axis: ``0 <= axis < ndim`` (the tracer normalizes negative axes)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{op}: {what} must be an int, got {value!r}")
    if not 0 <= int(value) < ndim:
        raise ValueError(f"{op}: {what} {value} is out of range for an operand of rank {ndim} (expected 0..{ndim - 1})")
    return int(value)


def axes(op: str, value, ndim: int) -> tuple[int, ...]:
    out = int_tuple(op, "axes", value)
    for a in out:
        axis(op, a, ndim, "axes entry")
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axes {out} repeat an axis")
    return out


def shape(op: str, value, what: str = "shape") -> tuple[int, ...]:
    out = int_tuple(op, what, value)
    if any(n < 0 for n in out):
        raise ValueError(f"{op}: {what} {out} has a negative size")
    return out


def arity(op: str, avals: Sequence, n: int) -> None:
    if len(avals) != n:
        raise ValueError(f"{op}: expected {n} operand{'s' if n != 1 else ''}, got {len(avals)}")
