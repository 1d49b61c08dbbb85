"""Tables from instruction kind to handler, checked against the instruction set when built.

The executor, the estimate and the collective library each run schedule instructions by their
``kind``. A module builds its table at import time with ``dispatch_table``, which refuses one that
misses a kind of the instruction set (``instructions.INSTRUCTIONS``, each class's
``kind``) or names a kind the set does not have: a new instruction added there fails the import
of every module that has not learnt it, instead of an error deep inside a run.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Collection, Mapping, TypeVar

from .instructions import INSTRUCTIONS

Handler = TypeVar("Handler")

INSTRUCTION_KINDS: frozenset[str] = frozenset(cls.kind for cls in INSTRUCTIONS.values())
COLLECTIVE_KINDS: frozenset[str] = frozenset(cls.kind for cls in INSTRUCTIONS.values() if cls.is_collective)


class DispatchError(TypeError):
    """A dispatch table that misses a kind of the instruction set or names one it lacks."""


def dispatch_table(handlers: Mapping[str, Handler], where: str,
                   kinds: Collection[str] = INSTRUCTION_KINDS) -> Mapping[str, Handler]:
    """``handlers`` (kind -> handler) as a read-only table, after checking it covers ``kinds``
    exactly (every instruction kind by default; ``COLLECTIVE_KINDS`` for a table of collectives).
    ``where`` names the table's module in the error."""
    expected = frozenset(kinds)
    missing = sorted(expected - handlers.keys())
    unknown = sorted(handlers.keys() - expected)
    if missing or unknown:
        parts = ([f"no handler for {', '.join(missing)}"] if missing else []) + \
                ([f"handlers for kinds the instruction set lacks: {', '.join(unknown)}"] if unknown else [])
        raise DispatchError(f"{where}: {'; '.join(parts)} (instruction kinds: {', '.join(sorted(expected))})")
    return MappingProxyType(dict(handlers))


__all__ = ["COLLECTIVE_KINDS", "DispatchError", "INSTRUCTION_KINDS", "dispatch_table"]
