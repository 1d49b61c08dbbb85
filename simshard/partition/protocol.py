"""What ``loops`` and ``regions`` need of the partitioner: its builder, the copies of values, and
getting a value laid out as wanted. Declared here so they work on this, not on the
partitioner's class (``partition._Partitioner``), which imports them."""

from __future__ import annotations

from typing import Protocol

from ..ir.program import Eqn, Literal as PLiteral, Program, Value
from ..sharding.dims import Sharding
from .builder import ScheduleBuilder
from .copies import Copy


class Partitioner(Protocol):
    """A partitioner of one program (or body) into ``builder``."""

    builder: ScheduleBuilder
    copies: dict[Value, list[Copy]]  # value -> its copies, the first the one its op made
    users: dict[Value, list[Eqn]]  # value -> the ops reading it
    read_outputs: set[Value]  # the outputs someone reads (a loop body's: not its unread residuals)
    eqn_index: int  # index of the program eqn being partitioned
    checkpoints: list  # Checkpoint per op result partitioned so far (with the axes it split sums over)

    def sub(self, program: Program) -> "Partitioner":
        """A partitioner for a body on this one's devices and buffer numbers."""

    def eqn(self, e: Eqn) -> None:
        """Partition one op."""

    def get(self, v: Value, spec: Sharding, why: str, keep: bool = True) -> int:
        """A buffer holding ``v`` laid out as ``spec``."""

    def target(self, v: Value) -> Sharding:
        """``v``'s propagated sharding."""

    def primary(self, v: Value) -> Sharding:
        """The tensor-dim sharding ``v`` is held as."""

    def literal(self, lit: PLiteral) -> int:
        """The buffer holding a literal."""

    def name(self, v) -> str:
        """``v``'s name in the program's listing."""

    def source(self, e: Eqn) -> str:
        """How instructions name the op they come from."""

    def checkpoint(self, e: Eqn, reassociated: tuple[str, ...] = (), body: tuple = (), operands: tuple = ()) -> None:
        """Record where each result of ``e`` lives right after it ran."""
