"""Tables with a row per device: which row a device is, and the distinct rows of an integer
table, fast (the classes of devices, equal blocks, equal local shapes, equal groups, that layouts
and schedules share work between).

Per-device tables keep a row per device in ascending device id; ``rows_of`` finds them.

``np.unique(table, axis=0)`` sorts rows as opaque byte strings, slowly; a table whose columns
fit in one 63-bit mixed-radix number is sorted as that number instead, which orders rows the
same way (lexicographically, first column most significant)."""

from __future__ import annotations

import math

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
    first, inverse = distinct_columns(list(table.T), table)
    return table[first], first, inverse


def distinct_columns(columns, table=None) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` of the rows that ``columns`` (int arrays of one length n > 0, the
    first most significant) form, as ``distinct_rows`` gives them: read column by column, never
    as an [n, k] table (numpy gathers, stacks and reduces a table of a few columns row by row,
    slowly: a large share of a call on thousands of devices). ``table``: the same as [n, k], if
    the caller has it (for rows whose columns overflow one 63-bit key)."""
    lo = [int(c.min()) for c in columns]
    span = [int(c.max()) - low + 1 for c, low in zip(columns, lo)]
    if math.prod(span) < 2 ** 62:
        key = np.zeros(len(columns[0]), dtype=np.int64)
        for column, low, n in zip(columns, lo, span):  # the first column most significant
            key *= n
            key += column - low  # every partial key < the product of the spans so far: no overflow
        return _first_and_inverse(key, math.prod(span))
    if table is None:
        table = np.stack([np.asarray(c, dtype=np.int64) for c in columns], axis=1)
    _, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


FEW_KEYS = 16  # up to this many distinct keys, each one's first row is found by a pass over the keys


def _first_and_inverse(key: np.ndarray, keys: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_index=True, return_inverse=True)[1:]`` for keys in
    ``[0, keys)``: by counting, without a sort, where there are no more possible keys than rows
    (the usual case: a few classes of devices among thousands)."""
    if keys > len(key):
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, inverse
    present = np.bincount(key, minlength=keys) > 0
    inverse = (np.cumsum(present) - 1)[key]  # a key's number among the distinct keys, ascending
    found = np.flatnonzero(present)
    if len(found) <= FEW_KEYS:  # a pass per key: cheaper than ``minimum.at`` over thousands of rows
        return np.asarray([int(np.argmax(key == k)) for k in found.tolist()], dtype=np.int64), inverse
    first = np.full(keys, len(key), dtype=np.int64)
    np.minimum.at(first, key, np.arange(len(key), dtype=np.int64))  # each key's first row
    return first[present], inverse


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
