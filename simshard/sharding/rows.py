"""Tables with a row per device: which row a device is, and the distinct rows of an integer
table, fast (the classes of devices, equal blocks, equal local shapes, equal groups, that layouts
and schedules share work between).

Per-device tables keep a row per device in ascending device id; ``rows_of`` finds them.

``np.unique(table, axis=0)`` sorts rows as opaque byte strings, slowly; a table whose columns
fit in one 63-bit mixed-radix number is sorted as that number instead, which orders rows the
same way (lexicographically, first column most significant)."""

from __future__ import annotations

import numpy as np


def distinct_rows(table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, first, inverse)`` of an int table [n, k]: its distinct rows in lexicographic
    order, the index of each one's first occurrence, and each row's number among them."""
    table = np.asarray(table, dtype=np.int64)
    if table.ndim != 2:
        raise ValueError(f"distinct_rows takes a 2-D table, got shape {table.shape}")
    n = table.shape[0]
    if n == 0 or table.shape[1] == 0:
        first = np.zeros(min(n, 1), dtype=np.int64)
        return table[:1], first, np.zeros(n, dtype=np.int64)
    lo = table.min(axis=0)
    span = table.max(axis=0) - lo + 1
    if float(np.prod(span.astype(np.float64))) < 2.0 ** 62:
        stride = np.ones_like(span)
        stride[:-1] = np.cumprod(span[::-1])[::-1][1:]  # the first column most significant
        key = (table - lo) @ stride
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    return table[first], first, inverse.reshape(-1)


def rows_of(ids: np.ndarray, devices) -> np.ndarray:
    """The rows of ``devices`` (device ids, any shape) in a table whose rows are the ascending
    device ids ``ids``: the ids themselves when they are 0..n-1 (a device is its row)."""
    devices = np.asarray(devices, dtype=np.int64)
    if len(ids) and int(ids[-1]) == len(ids) - 1:
        return devices
    return np.searchsorted(ids, devices)


def row_of(ids: np.ndarray, device: int) -> int:
    """The row of one device (KeyError when it has none)."""
    n = len(ids)
    row = device if n and ids[-1] == n - 1 else int(np.searchsorted(ids, device))
    if not (0 <= row < n) or ids[row] != device:
        raise KeyError(device)
    return row
