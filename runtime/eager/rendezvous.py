"""Per-rank code run by one controller: the ranks meet at every eager call.

Torch's DTensor code is written per rank: every rank runs the same function, hands
``DTensor.from_local`` its own shard and calls the same DTensor ops in the same order.
simshard plays that with one thread per rank (``dtensor.run_per_rank``). The threads meet here,
in a ``Rendezvous``: the k-th meeting of every rank is one slot; each rank puts its part in the
slot, the last to arrive combines the parts (every rank's shard into one DTensor; for an eager
op, the one run all ranks share), and every rank takes the same result. So an op runs once, not
once per rank, and a rank that calls something else, or nothing, is named instead of waited on
for ever.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

_ACTIVE: contextvars.ContextVar["Member | None"] = contextvars.ContextVar("simshard_rendezvous", default=None)


class RendezvousError(RuntimeError):
    """The ranks did not make the same calls in the same order (or one stopped early)."""


@dataclass
class Slot:
    """The k-th meeting: what each rank brought, and the combined result once all have."""

    what: str
    parts: dict[int, Any] = field(default_factory=dict)
    done: bool = False
    result: Any = None
    error: BaseException | None = None


class Rendezvous:
    """Where the threads of ``ranks`` meet, slot by slot, waiting at most ``timeout`` seconds each time."""

    def __init__(self, ranks: Sequence[int], timeout: float):
        self.ranks = tuple(ranks)
        self.timeout = timeout
        self.slots: dict[int, Slot] = {}
        self.cond = threading.Condition()
        self.failed: BaseException | None = None
        self.finished: set[int] = set()

    def meet(self, rank: int, number: int, what: str, part: Any, combine: Callable[[dict[int, Any]], Any]) -> Any:
        """Rank ``rank``'s ``number``-th meeting, named ``what``: its ``part`` in, the shared result out."""
        with self.cond:
            slot = self.slots.setdefault(number, Slot(what))
            if slot.what != what:
                raise self.fail(RendezvousError(
                    f"rank {rank}'s DTensor call #{number + 1} is {what}, another rank's is {slot.what}: per-rank code "
                    "must make the same DTensor calls in the same order on every rank"))
            slot.parts[rank] = part
            if len(slot.parts) == len(self.ranks):
                token = _ACTIVE.set(None)  # the combination is the controller's own work, not a rank's
                try:
                    slot.result = combine(slot.parts)
                except BaseException as e:  # every rank raises what the combination raised
                    slot.error = e
                finally:
                    _ACTIVE.reset(token)
                slot.done = True
                self.cond.notify_all()
            else:
                self.await_slot(rank, number, slot)
            if self.failed is not None and not slot.done:
                raise self.failed
            if slot.error is not None:
                raise slot.error
            return slot.result

    def await_slot(self, rank: int, number: int, slot: Slot) -> None:
        """Wait (holding ``cond``) until ``slot`` is done, a rank failed, or a missing rank can no longer come."""
        def gone() -> list[int]:
            return sorted(r for r in self.finished if r not in slot.parts)

        if not self.cond.wait_for(lambda: slot.done or self.failed is not None or gone(), self.timeout):
            missing = sorted(set(self.ranks) - set(slot.parts))
            raise self.fail(RendezvousError(
                f"rank {rank} waited {self.timeout:g} s at DTensor call #{number + 1} ({slot.what}) for ranks {missing}, "
                "which never made it: per-rank code must make the same DTensor calls on every rank"))
        if not slot.done and self.failed is None:
            raise self.fail(RendezvousError(
                f"ranks {gone()} finished without DTensor call #{number + 1} ({slot.what}), which rank {rank} made: "
                "per-rank code must make the same DTensor calls on every rank"))

    def finish(self, rank: int) -> None:
        """``rank``'s code returned: it comes to no more meetings."""
        with self.cond:
            self.finished.add(rank)
            self.cond.notify_all()

    def fail(self, error: BaseException) -> BaseException:
        """End every rank's wait with ``error`` (a rank that raised, or calls that do not match); returns it."""
        with self.cond:
            if self.failed is None:
                self.failed = error
            self.cond.notify_all()
        return error


@dataclass
class Member:
    """One rank's thread in a rendezvous: its rank and how many meetings it has been to."""

    rendezvous: Rendezvous
    rank: int
    count: int = 0

    def meet(self, what: str, part: Any, combine: Callable[[dict[int, Any]], Any]) -> Any:
        number, self.count = self.count, self.count + 1
        return self.rendezvous.meet(self.rank, number, what, part, combine)


def member() -> Member | None:
    """This thread's place in a rendezvous, or None outside per-rank code."""
    return _ACTIVE.get()


def join(m: Member) -> contextvars.Token:
    """Make ``m`` this thread's member (``leave`` with the token)."""
    return _ACTIVE.set(m)


def leave(token: contextvars.Token) -> None:
    _ACTIVE.reset(token)


__all__ = ["Member", "Rendezvous", "RendezvousError", "Slot", "join", "leave", "member"]
