"""What a device works out about one collective instruction once, not every time it runs it.

A training step's schedule runs thousands of times; every run of a collective instruction used to
recompute what its instruction alone decides: the signature its messages carry (a permute's does
not depend on the buffer), whether this device reads its source buffer (a permute's device that
only receives does not), the words of the note each message carries, and which of the library's
collectives runs it (``run_collective``'s choice by kind). ``Prepared`` keeps them
per instruction id (unique within a schedule, a loop's iterations included), filled as the
instructions first run; a host keeps one per loaded program, so every run after the first finds
them made (``runtime/ray/host/device.py``). Worth about a microsecond a message of the executor's
path (docs/performance.md).
"""

from __future__ import annotations

from typing import Awaitable, Callable, NamedTuple

from .run import runner, signature


class PreparedCollective(NamedTuple):
    """One collective instruction as one device runs it."""

    tag: tuple | None  # its messages' signature where the instruction alone decides it, else None
    reads: bool  # whether this device reads the instruction's source buffer
    run: Callable[..., Awaitable]  # (channel, instruction, buffer, algorithm) -> the result: ``run.runner``
    what: str  # the note's words after the device's position (``note``)


def what(instr) -> str:
    """The words of a message's note after the position: the instruction's id, kind and op."""
    source = f" from {instr.source!r}" if instr.source else ""
    return f" [{instr.id}] {instr.kind}{source}"


def at(position: int, what_: str) -> str:
    """The note itself: the position, then the instruction's words (``what``)."""
    return f"at position {position}{what_}"


def note(position: int, instr) -> str:
    """Where a device running ``instr`` at ``position`` (a loop's or branch's, inside one) is, in
    the few words each of its messages carries for the receiver's errors."""
    return at(position, what(instr))


def prepare(instr, device: int) -> PreparedCollective:
    """``instr`` as ``device`` runs it. A permute's signature holds no dtype (a device that only
    receives holds no buffer), so it is made here; every other kind's names the buffer's dtype
    (an all-reduce's, its shape too), which a run supplies."""
    if instr.kind == "collective_permute":
        return PreparedCollective(signature(instr), any(s == device for s, _ in instr.pairs), runner(instr.kind),
                                  what(instr))
    return PreparedCollective(None, True, runner(instr.kind), what(instr))


class Prepared:
    """One device's ``PreparedCollective`` per instruction id, each made when first asked for."""

    def __init__(self, device: int):
        self.device = device
        self.collectives: dict[int, PreparedCollective] = {}

    def of(self, instr) -> PreparedCollective:
        got = self.collectives.get(instr.id)
        if got is None:
            got = self.collectives[instr.id] = prepare(instr, self.device)
        return got
