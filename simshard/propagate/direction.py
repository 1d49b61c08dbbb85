"""Propagation directions along a factor of an op.

FORWARD: only operands may grow the candidate axes (results are still checked for conflicts);
BACKWARD: only results may; BOTH; NONE: the factor carries nothing. Directions combine as sets.
"""

from __future__ import annotations

import enum


class Direction(enum.IntFlag):
    NONE = 0
    FORWARD = 1
    BACKWARD = 2
    BOTH = 3

    @staticmethod
    def parse(value) -> "Direction":
        if isinstance(value, Direction):
            return value
        if isinstance(value, str):
            try:
                return Direction[value.upper()]
            except KeyError:
                raise ValueError(f"unknown propagation direction {value!r}; use FORWARD, BACKWARD, BOTH or NONE") from None
        return Direction(int(value))
