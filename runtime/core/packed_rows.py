"""Rows a device process ships packed: its transfer rows and its timeline, each one pickled blob
inside its run's summary, unpickled by the driver only when someone reads them.

A run's summary holds a row per message side and a span per instruction of each device; the
driver reads the summaries of a step's processes one after another, and most steps of a training
loop never look at either. Packed, the driver's unpickling of an answer is the few fields every
run needs (status, outputs, counts); the rows are unpacked when a report, a timeline or a failure
asks for them (``TransferLog.of_packed``, ``diagnosis.Timeline``, ``failures.never_taken``).
"""

from __future__ import annotations

import pickle
from typing import Iterable


def pack(rows: Iterable[tuple]) -> bytes:
    """``rows`` (plain tuples) as one blob."""
    return pickle.dumps(tuple(rows), protocol=5)


def unpack(rows) -> tuple:
    """The rows of a blob ``pack`` made, or ``rows`` as they are (a local run's, never packed)."""
    return pickle.loads(rows) if isinstance(rows, (bytes, bytearray)) else rows
