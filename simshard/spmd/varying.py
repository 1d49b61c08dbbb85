"""Fields of one SPMD step that differ per device, held as a table (``Varying``).

A collective over mesh axes holds its groups so (each device indexes the table of groups, as
replica groups do in XLA), a slice the positions of each device's block, a literal each
device's offset: one instruction serves every device, and devices that differ only there stay
in one class. ``simshard.spmd.resolve`` gives a device its own instruction.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..sharding.rows import row_of


class Varying:
    """A field of one SPMD step's instruction that depends on the device: a value per class of
    devices and each device's class (``codes``, a row per device of ``ids``, ascending). A
    collective over mesh axes holds its groups so (each device indexes the table of groups, as
    replica groups do in XLA), a slice the positions of each device's block, a literal each
    device's offset: one instruction serves every device, and devices that differ only there
    stay in one class. ``resolved`` gives a device its own instruction."""

    __slots__ = ("ids", "codes", "values")

    def __init__(self, ids: np.ndarray, codes: np.ndarray, values: Sequence):
        self.ids, self.codes, self.values = ids, codes, tuple(values)

    def code(self, device: int) -> int:
        return int(self.codes[row_of(self.ids, device)])

    def of(self, device: int):
        return self.values[self.code(device)]

    def map(self, fn):
        """``fn`` of each device's value: a Varying on the same classes, or the one result all share."""
        out = [fn(v) for v in self.values]
        if all(o == out[0] for o in out[1:]):
            return out[0]
        return Varying(self.ids, self.codes, out)

    def __repr__(self) -> str:
        return f"Varying({len(self.values)} values over {len(self.ids)} devices)"


def field_of(value, fn):
    """``fn`` of a field's value, per class where the value is ``Varying``."""
    return value.map(fn) if isinstance(value, Varying) else fn(value)


# the fields the partitioner may make Varying: a collective's groups, a slice's positions, a literal's value
VARYING_FIELDS = ("group", "splits", "reduce_order", "index", "value", "src")
