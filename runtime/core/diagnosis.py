"""Words for what a device was doing and what went wrong: an instruction described for a reader,
when it ran (``Span``), and a transport's failure turned into the error that names the
instruction, both devices and where each one was."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Callable, NamedTuple

import numpy as np

from simshard.spmd import Instr

from ..errors import ExecutionError, PeerTimeoutError, ScheduleMismatchError
from .packed_rows import unpack
from .transport_errors import Deadlock, DuplicateMessage, PeerFinished, PeerLost, RecvTimeout, TagMismatch, TransportError


def describe(instr: Instr) -> str:
    """``[7] all_gather over (0, 1) along 0 from '%3 dot'``."""
    extra = ""
    if instr.is_collective:
        if instr.kind == "collective_permute":
            extra = f" pairs {tuple(instr.pairs)}"
        else:
            extra = f" over {tuple(instr.group)}"
            if getattr(instr, "axes", ()):
                extra += f" (axes {','.join(instr.axes)})"
    elif instr.kind == "compute":
        extra = f" {instr.op}"
    src = f" from {instr.source!r}" if instr.source else ""
    return f"[{instr.id}] {instr.kind}{extra}{src}"


def aval(a: np.ndarray) -> str:
    """``float32[4, 8]``: an array's dtype and shape, for messages."""
    return f"{a.dtype}{list(a.shape)}"


class Span(NamedTuple):
    """When one device ran one instruction: wall-clock seconds (``time.time``), so the spans of
    devices in different processes of one machine line up (a timeline, a measured trace). A
    device keeps only (position, start, end) per instruction, and a Ray device ships those: the
    rest is its schedule's (``spans_of``)."""

    device: int
    position: int
    instr: int
    kind: str
    source: str
    start: float
    end: float


def spans_of(device: int, schedule, rows: Sequence[tuple]) -> tuple[Span, ...]:
    """``device``'s Spans from the (position, start, end) it kept per instruction of ``schedule``."""
    instrs = schedule.instrs
    return tuple(Span(device, pos, ins.id, ins.kind, ins.source, start, end)
                 for pos, start, end in rows for ins in (instrs[pos],))


class Timeline(Mapping):
    """device -> its ``Span``s, from the rows the devices shipped (plain, or packed:
    ``packed_rows``) and their schedules (``schedule_of(device)``), each device's made into Spans
    when first read: a run whose timeline nobody reads (most steps of a loop) pays nothing for
    it (measured: the driver's result of a run of 8 devices of 9 instructions each took a median
    153 us with the Spans made at once, 119 us without)."""

    def __init__(self, rows: Mapping[int, Sequence[tuple]], schedule_of: Callable):
        self.rows, self.schedule_of, self.made = rows, schedule_of, {}

    def __getitem__(self, device: int) -> tuple:
        spans = self.made.get(device)
        if spans is None:
            spans = self.made[device] = spans_of(device, self.schedule_of(device), unpack(self.rows[device]))
        return spans

    def __iter__(self) -> Iterator[int]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def schedule_error(e: TransportError, me: int, where: str, where_of: Callable[[int], str],
                   fail: Callable[..., ExecutionError]) -> ExecutionError:
    """What a transport's failure ``e`` on device ``me`` (at ``where``) means for the schedules: a
    ``ScheduleMismatchError`` naming both devices and where each was (``where_of(device)``), a
    ``PeerTimeoutError``, or an ``ExecutionError``; ``fail(cls, message, **fields)`` makes it."""
    here = f"device {me} {where}"
    if isinstance(e, TagMismatch):
        return fail(
            ScheduleMismatchError,
            f"schedules disagree at instruction id {e.key[0]}: {here} expects {_sig(e.expected)}, but device "
            f"{e.src} {e.note} sent {_sig(e.got)}",
            devices=(me, e.src), positions={me: where, e.src: e.note},
        )
    if isinstance(e, PeerFinished):
        return fail(
            ScheduleMismatchError,
            f"schedules do not match: {here} waits for device {e.src}'s part of instruction id {e.key[0]}, but "
            f"device {e.src} finished its schedule without sending it",
            devices=(me, e.src), positions={me: where, e.src: where_of(e.src)},
        )
    if isinstance(e, PeerLost):
        return fail(
            ExecutionError,
            f"{here} waits for device {e.src}'s part of instruction id {e.key[0]}, but device {e.src}'s "
            "process has died",
        )
    if isinstance(e, Deadlock):
        parts = [
            f"device {d} waits for device {src} (message {key}) while {where_of(d)}"
            for d, (src, key) in sorted(e.waits.items())
        ]
        return fail(
            ScheduleMismatchError,
            "schedules do not match (deadlock: every unfinished device waits for a message no one will "
            "send): " + "; ".join(parts),
            devices=tuple(sorted(e.waits)), positions={d: where_of(d) for d in e.waits},
        )
    if isinstance(e, RecvTimeout):
        return fail(
            PeerTimeoutError,
            f"{here} waited {e.timeout:g} s for device {e.src}'s part of instruction id {e.key[0]}; "
            f"device {e.src} is {where_of(e.src)}",
            devices=(me, e.src), positions={me: where, e.src: where_of(e.src)},
        )
    if isinstance(e, DuplicateMessage):
        return fail(
            ScheduleMismatchError,
            f"{here}: device {e.msg.src} sent message {e.msg.key} to device {e.msg.dst} twice",
            devices=(e.msg.src, e.msg.dst),
        )
    return fail(ExecutionError, f"{here}: transport failure: {e}")


def _sig(sig) -> str:
    if not isinstance(sig, tuple) or not sig:
        return repr(sig)
    kind, *rest = sig
    return f"{kind}{tuple(rest)}"
