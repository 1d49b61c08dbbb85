"""Transports: how one device's array reaches another, and the record of every transfer.

The collective library (``collectives.py``) talks only to this interface::

    await transport.send(src, dst, key, array, tag=..., note=...)
    array = await transport.recv(dst, src, key, tag=...)

``key`` names the message: ``(instruction id, step)`` for a collective (a step distinguishes the
phases of one collective, e.g. an all-reduce's reduce-scatter and all-gather). Receivers match
messages by ``(source, key)`` in a per-device ``Mailbox``. ``tag`` describes the collective the
sender ran (kind, group, parameters, dtype); the receiver passes the tag it expects, and a
different one is a ``TagMismatch`` (two devices ran different collectives under one id). ``note``
says where the sender was (its schedule position), for error messages.

``Transport`` does the bookkeeping once for every backend: each send and each receive is
recorded in ``log`` (a ``TransferLog``: logical payload bytes, ``array.nbytes``, and message
counts per device, per peer, per key). A backend supplies two primitives: ``_deliver(message)``
(put it in the receiver's mailbox: a dict here; a remote call on the receiver's actor for Ray)
and ``_collect(dst, src, key, timeout)`` (wait for it in ``dst``'s mailbox).

``InMemoryTransport`` serves every device of one event loop (the local backend). Because it sees
all devices, it detects a deadlock the moment it happens (every unfinished device waits for a
message nobody has sent) and a wait on a device that has already finished, instead of waiting
for the timeout.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, NamedTuple

import numpy as np

Key = tuple  # (instruction id, step)


@dataclass(eq=False, slots=True)
class Message:
    """One array in flight. Never changed once made (not ``frozen``: a frozen dataclass costs
    four times as much to make, and a message is made on every send)."""

    src: int
    dst: int
    key: Key
    array: np.ndarray
    tag: Hashable = None
    note: str = ""


# -- transport-level failures (the executor turns them into errors naming instructions) ----------


class TransportError(Exception):
    pass


class RecvTimeout(TransportError):
    def __init__(self, dst: int, src: int, key: Key, timeout: float):
        super().__init__(f"device {dst} waited {timeout:g} s for message {key} from device {src}")
        self.dst, self.src, self.key, self.timeout = dst, src, key, timeout


class TagMismatch(TransportError):
    def __init__(self, dst: int, src: int, key: Key, expected, got, note: str):
        super().__init__(f"device {dst} expected {expected} for {key} from device {src}, which sent {got}")
        self.dst, self.src, self.key, self.expected, self.got, self.note = dst, src, key, expected, got, note


class PeerFinished(TransportError):
    def __init__(self, dst: int, src: int, key: Key):
        super().__init__(f"device {dst} waits for message {key} from device {src}, which has finished its schedule")
        self.dst, self.src, self.key = dst, src, key


class PeerLost(TransportError):
    """The peer's process is gone (a Ray device actor that died): its message will never come."""

    def __init__(self, dst: int, src: int, key: Key):
        super().__init__(f"device {dst} waits for message {key} from device {src}, whose process has died")
        self.dst, self.src, self.key = dst, src, key


class Deadlock(TransportError):
    """Every unfinished device waits for a message that no one has sent."""

    def __init__(self, waits: dict[int, tuple[int, Key]], finished: Iterable[int]):
        desc = "; ".join(f"device {d} waits for {k} from device {s}" for d, (s, k) in sorted(waits.items()))
        super().__init__(f"deadlock: {desc}")
        self.waits = dict(waits)
        self.finished = set(finished)


class DuplicateMessage(TransportError):
    def __init__(self, msg: Message):
        super().__init__(f"device {msg.src} sent message {msg.key} to device {msg.dst} twice")
        self.msg = msg


# -- the transfer record -----------------------------------------------------------------------


class Transfer(NamedTuple):
    """One message as seen by one side: ``device`` sent it to / received it from ``peer``. (A
    named tuple: a run records two per message, and a log keeps and ships them as plain rows.)"""

    device: int
    peer: int
    direction: str  # "sent" or "received"
    key: Key
    nbytes: int


@dataclass
class PeerTotals:
    sent: int = 0
    received: int = 0
    messages_sent: int = 0
    messages_received: int = 0


@dataclass
class Totals:
    """What one device moved for one instruction (or over a run), per peer and in sum."""

    peers: dict[int, PeerTotals] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return sum(p.sent for p in self.peers.values())

    @property
    def received(self) -> int:
        return sum(p.received for p in self.peers.values())

    @property
    def messages_sent(self) -> int:
        return sum(p.messages_sent for p in self.peers.values())

    @property
    def messages_received(self) -> int:
        return sum(p.messages_received for p in self.peers.values())

    def peer_rows(self) -> tuple[tuple[int, int, int], ...]:
        return tuple((p, t.sent, t.received) for p, t in sorted(self.peers.items()))


class TransferLog:
    """Every transfer a transport made, aggregated per (device, instruction).

    The local transport's one log holds every device's side; a Ray device's transport holds only
    its own, and the driver's log of a Ray run joins the devices' ``rows`` (``of_rows``). Either way
    ``totals(device, instr)`` is the same. A log keeps a row per transfer and aggregates the rows
    when first asked (a message costs its sender and receiver one append each; a run that nobody
    asks about its transfers pays nothing more for them)."""

    def __init__(self, keep_entries: bool = True):
        self.keep_entries = keep_entries
        self.rows: list[tuple] = []  # each entry's fields (``Transfer``), plain tuples: cheap to keep and ship
        # (device, instruction) -> peer -> [bytes sent, bytes received, messages sent, messages
        # received]: plain lists, as every message adds to them (``Totals`` are made when asked for)
        self._agg: dict[tuple[int, Any], dict[int, list[int]]] = {}
        self._summed = 0  # rows[:_summed] are in _agg

    @classmethod
    def of_rows(cls, rows: list[tuple]) -> "TransferLog":
        """A log of the transfers ``rows`` (``Transfer`` fields), aggregated on first use."""
        log = cls()
        log.rows = rows
        return log

    @property
    def entries(self) -> list[Transfer]:
        """Every transfer, in the order recorded (built on each access)."""
        return [Transfer._make(r) for r in self.rows]

    def record(self, device: int, peer: int, direction: str, key: Key, nbytes: int) -> None:
        if self.keep_entries:  # summed when first asked for (not between two messages)
            self.rows.append((device, peer, direction, key, nbytes))
        else:
            self._add(device, peer, direction, key, nbytes)

    def _add(self, device: int, peer: int, direction: str, key: Key, nbytes: int) -> None:
        per = self._agg.get((device, key[0]))
        if per is None:
            per = self._agg[(device, key[0])] = {}
        counts = per.get(peer)
        if counts is None:
            counts = per[peer] = [0, 0, 0, 0]
        if direction == "sent":
            counts[0] += nbytes
            counts[2] += 1
        else:
            counts[1] += nbytes
            counts[3] += 1

    @property
    def _totals(self) -> dict[tuple[int, Any], dict[int, list[int]]]:
        """The aggregates, with any rows joined since they were last summed."""
        if self._summed < len(self.rows):
            for row in self.rows[self._summed:]:
                self._add(*row)
            self._summed = len(self.rows)
        return self._agg

    def totals(self, device: int, instr) -> Totals:
        """What ``device`` sent and received for instruction ``instr`` (the key's first part)."""
        per = self._totals.get((device, instr), {})
        return Totals({p: PeerTotals(*counts) for p, counts in per.items()})

    def counts(self, device: int, instr) -> tuple[int, int, int, int, tuple[tuple[int, int, int], ...]]:
        """``totals(device, instr)``'s figures in one pass: bytes sent, bytes received, messages
        sent, messages received and the peer rows (``Totals.peer_rows``), what a ``CommRecord``
        holds (an executor asks after every collective: no ``Totals`` made for it)."""
        per = self._totals.get((device, instr))
        if not per:
            return 0, 0, 0, 0, ()
        if len(per) == 1:  # one peer (a permute, a two-device group): its figures are the sums
            for p, (s, r, ms, mr) in per.items():
                return s, r, ms, mr, ((p, s, r),)
        sent = received = messages_sent = messages_received = 0
        for s, r, ms, mr in per.values():
            sent += s
            received += r
            messages_sent += ms
            messages_received += mr
        rows = tuple((p, c[0], c[1]) for p, c in sorted(per.items()))
        return sent, received, messages_sent, messages_received, rows

    def device_totals(self, device: int) -> Totals:
        out = Totals()
        for (d, _), per in self._totals.items():
            if d != device:
                continue
            for p, (s, r, ms, mr) in per.items():
                o = out.peers.get(p)
                if o is None:
                    o = out.peers[p] = PeerTotals()
                o.sent += s
                o.received += r
                o.messages_sent += ms
                o.messages_received += mr
        return out

    def bytes_sent(self, device: int | None = None) -> int:
        return sum(c[0] for (d, _), per in self._totals.items() if device is None or d == device for c in per.values())

    def bytes_received(self, device: int | None = None) -> int:
        return sum(c[1] for (d, _), per in self._totals.items() if device is None or d == device for c in per.values())

    def matrix(self) -> dict[tuple[int, int], int]:
        """``(src, dst) -> bytes`` sent."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for (d, _), per in self._totals.items():
            for p, c in per.items():
                if c[0]:
                    out[(d, p)] += c[0]
        return dict(out)

    def merge(self, other: "TransferLog") -> None:
        for row in other.rows:
            self.record(*row)


# -- mailboxes -------------------------------------------------------------------------------


class _Expired(Exception):
    """A receive's time ran out (the mailbox's watchdog: the receiver raises its ``RecvTimeout``)."""


class Mailbox:
    """One device's incoming messages, matched by ``(source, key)``; a receive waits on a future.

    A receive awaits its future itself, rather than through ``asyncio.wait`` or ``wait_for``: a
    message's arrival then wakes its receiver in the next turn of the event loop (``asyncio.wait``
    takes two turns more and a future of its own per receive), and cancelling the waiting task
    always propagates (3.10/3.11's ``wait_for`` can swallow a cancellation). Its timeout is a
    deadline the mailbox's one timer (``_watchdog``) checks: a timer per receive, made and
    cancelled again for nearly every message, would cost more than the rest of the receive.

    Works in any asyncio event loop (a Ray asyncio actor has one mailbox)."""

    def __init__(self, device: int):
        self.device = device
        self._slots: dict[tuple[int, Key], asyncio.Future] = {}
        self._places: dict[tuple[int, Key], np.ndarray] = {}  # (source, key) -> where the receiver wants it
        self._deadlines: dict[asyncio.Future, float] = {}  # a waiting receive's future -> when it expires
        # fires no later than the earliest deadline; left armed between receives (a later one
        # re-arms it for its own deadline when it fires early)
        self._watchdog: asyncio.TimerHandle | None = None

    def _slot(self, src: int, key: Key) -> asyncio.Future:
        fut = self._slots.get((src, key))
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._slots[(src, key)] = fut
        return fut

    def put(self, msg: Message) -> None:
        fut = self._slot(msg.src, msg.key)
        if fut.done():
            _release(msg.array)  # not kept: a body still in its sender's memory will not be read
            raise DuplicateMessage(msg)
        fut.set_result(msg)

    def arrive(self, src: int, key: Key, array: np.ndarray, tag: Hashable, note: str) -> None:
        """``put`` the message ``src`` sent to this mailbox's device."""
        self.put(Message(src, self.device, key, array, tag, note))

    def expect(self, src: int, key: Key, out: np.ndarray) -> None:
        """The receiver offers ``out`` as the place of the message from ``src`` under ``key`` (see
        ``Transport.expect``), unless that has arrived already (and is not still to be read from
        its sender's memory: a ``fetch``-able body, read into its place when received)."""
        fut = self._slots.get((src, key))
        if fut is None or not fut.done() or is_lent(_array_of(fut)):
            self._places[(src, key)] = out

    def place(self, src: int, key: Key, dtype, shape) -> np.ndarray | None:
        """Where the message from ``src`` under ``key`` goes: the place its receiver offered, if
        that has the message's dtype and shape (taken: it serves once); else None."""
        out = self._places.pop((src, key), None)
        if out is not None and out.dtype == dtype and out.shape == tuple(shape) and out.flags.c_contiguous:
            return out
        return None

    def copy_in(self, src: int, key: Key, array: np.ndarray) -> np.ndarray:
        """The receiver's own copy of ``array`` (a sender's): written into its offered place when
        that fits, else a new array."""
        out = self.place(src, key, array.dtype, array.shape)
        if out is None:
            return np.array(array, copy=True)
        np.copyto(out, array)
        return out

    def has(self, src: int, key: Key) -> bool:
        fut = self._slots.get((src, key))
        return fut is not None and fut.done()

    def slot(self, src: int, key: Key) -> asyncio.Future:
        return self._slot(src, key)

    def take(self, src: int, key: Key) -> Message:
        return self._slots.pop((src, key)).result()

    def fail(self, src: int, key: Key, error: BaseException) -> bool:
        """Make a pending receive of ``(src, key)`` raise ``error``; False if it has arrived."""
        fut = self._slot(src, key)
        if fut.done():
            return False
        fut.set_exception(error)
        return True

    def discard(self, src: int, key: Key) -> None:
        fut = self._slots.pop((src, key), None)
        if fut is not None and not fut.done():
            fut.cancel()
        elif fut is not None:
            _let_go(fut)

    async def get(self, src: int, key: Key, timeout: float | None) -> Message:
        """The message from ``src`` under ``key``: at once if it has arrived, else when it does (a
        ``RecvTimeout`` after ``timeout`` seconds; whatever ``fail`` set, raised). A body still in
        its sender's memory is read now, into the place offered for it if there is one."""
        fut = self._slot(src, key)
        try:
            if not fut.done():
                if timeout is None:
                    await fut
                else:
                    self._wait_until(fut, timeout)
                    try:
                        await fut
                    finally:
                        del self._deadlines[fut]
            msg = fut.result()
            if is_lent(msg.array):
                msg = Message(msg.src, msg.dst, msg.key, msg.array.fetch(self._places.get((src, key))), msg.tag,
                              msg.note)
            return msg
        except _Expired:
            raise RecvTimeout(self.device, src, key, timeout) from None
        finally:
            self._slots.pop((src, key), None)
            self._places.pop((src, key), None)

    def _wait_until(self, fut: asyncio.Future, timeout: float) -> None:
        """``fut`` fails with ``_Expired`` unless it is done within ``timeout`` seconds."""
        loop = fut.get_loop()
        deadline = self._deadlines[fut] = loop.time() + timeout
        dog = self._watchdog
        if dog is None or dog.when() > deadline:  # none armed, or armed too late for this one
            if dog is not None:
                dog.cancel()
            self._watchdog = loop.call_at(deadline, self._expire_due)

    def _expire_due(self) -> None:
        """The watchdog: fail every receive whose deadline has passed, and re-arm for the next."""
        self._watchdog = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        later = [d for d in self._deadlines.values() if d > now]
        for fut, deadline in self._deadlines.items():
            if deadline <= now and not fut.done():
                fut.set_exception(_Expired())
        if later:
            self._watchdog = loop.call_at(min(later), self._expire_due)

    def close(self) -> None:
        """No more receives: stop the watchdog (a finished run leaves no timer in the loop), and
        tell the senders of bodies nobody read that they may let go of them."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for fut in self._slots.values():
            _let_go(fut)

    def undelivered(self) -> list[Message]:
        """Messages that arrived and were never received."""
        return [f.result() for f in self._slots.values() if f.done() and not f.cancelled() and f.exception() is None]


def is_lent(array) -> bool:
    """Whether a message's array is a body still in its sender's memory (``wire.memory_reads.Lent``:
    read by ``fetch`` into the place its receiver names, or let go by ``release``)."""
    return hasattr(array, "fetch")


def _array_of(fut: asyncio.Future):
    """The array of the message a done mailbox slot holds (None for a failed or cancelled one)."""
    if fut.cancelled() or fut.exception() is not None:
        return None
    return fut.result().array


def _let_go(fut: asyncio.Future) -> None:
    """Release a received message's body still in its sender's memory (it will not be read)."""
    if fut.done():
        _release(_array_of(fut))


def _release(array) -> None:
    """Tell the sender of a body still in its memory (a ``wire.memory_reads.Lent``) it will not be read."""
    if is_lent(array):
        array.release()


# -- the interface -------------------------------------------------------------------------------


class Transport(ABC):
    """Send / receive numpy arrays between device ids, recording every transfer."""

    def __init__(self, timeout: float | None = 10.0):
        self.timeout = timeout
        self.log = TransferLog()

    async def send(self, src: int, dst: int, key: Key, array: np.ndarray, *, tag: Hashable = None, note: str = "") -> None:
        array = np.ascontiguousarray(array)
        self.log.record(src, dst, "sent", key, int(array.nbytes))
        await self._deliver(Message(src, dst, key, array, tag, note))

    async def recv(self, dst: int, src: int, key: Key, *, tag: Hashable = None) -> np.ndarray:
        msg = await self._collect(dst, src, key, self.timeout)
        if tag is not None and msg.tag != tag:
            raise TagMismatch(dst, src, key, tag, msg.tag, msg.note)
        self.log.record(dst, src, "received", key, int(msg.array.nbytes))
        return msg.array

    def expect(self, dst: int, src: int, key: Key, out: np.ndarray) -> None:
        """A hint before ``recv``: the message from ``src`` under ``key`` will probably have
        ``out``'s dtype and shape, and ``out`` (C-contiguous, held by ``dst`` alone, written by
        nothing else until that receive) is where ``dst`` will put it. A transport may write the
        message straight into ``out`` and have ``recv`` return ``out`` itself, sparing the
        receiver a copy; a message of another dtype or shape arrives as usual. This one ignores it."""

    def lends(self, owner: np.ndarray) -> bool:
        """Whether a message still to be read from this process's memory views ``owner``'s memory
        (a transport that sends copies: never). The executor writes no such array in place."""
        return False

    def finished(self, device: int) -> None:
        """``device`` has run its whole schedule (it will send nothing more)."""

    @abstractmethod
    async def _deliver(self, msg: Message) -> None: ...

    @abstractmethod
    async def _collect(self, dst: int, src: int, key: Key, timeout: float | None) -> Message: ...


class InMemoryTransport(Transport):
    """Every device in one event loop: a mailbox per device, arrays copied on send (a receiver
    never shares memory with its sender, as on separate devices)."""

    def __init__(self, devices: Iterable[int], timeout: float | None = 10.0, copy: bool = True):
        super().__init__(timeout)
        self.devices = tuple(devices)
        self.copy = copy
        self.boxes: dict[int, Mailbox] = {d: Mailbox(d) for d in self.devices}
        self._finished: set[int] = set()
        # device -> the receives it is blocked in: (source, key) -> future
        self._waiting: dict[int, dict[tuple[int, Key], asyncio.Future]] = defaultdict(dict)
        self._n_waiting = 0  # receives in progress: a deadlock needs one per unfinished device

    def _box(self, device: int) -> Mailbox:
        try:
            return self.boxes[device]
        except KeyError:
            raise TransportError(f"device {device} is not one of this transport's devices {list(self.devices)}") from None

    def expect(self, dst: int, src: int, key: Key, out: np.ndarray) -> None:
        if self.copy:  # the copy every message gets is made into ``out``
            self._box(dst).expect(src, key, out)

    async def _deliver(self, msg: Message) -> None:
        box = self._box(msg.dst)
        if self.copy:
            msg = Message(msg.src, msg.dst, msg.key, box.copy_in(msg.src, msg.key, msg.array), msg.tag, msg.note)
        box.put(msg)

    async def _collect(self, dst: int, src: int, key: Key, timeout: float | None) -> Message:
        box = self._box(dst)
        self._box(src)
        if box.has(src, key):
            return box.take(src, key)
        if src in self._finished:
            raise PeerFinished(dst, src, key)
        self._waiting[dst][(src, key)] = box.slot(src, key)
        self._n_waiting += 1
        try:
            self._check_deadlock(caller=dst)
            return await box.get(src, key, timeout)
        finally:
            self._waiting[dst].pop((src, key), None)
            self._n_waiting -= 1

    def _stuck(self, device: int) -> bool:
        """Blocked in a receive whose message has not arrived. (Collectives finish their sends
        before they receive, so a blocked device has nothing left to send in this step.)"""
        return any(not f.done() for f in self._waiting.get(device, {}).values())

    def _check_deadlock(self, caller: int | None = None) -> None:
        if self._n_waiting < len(self.devices) - len(self._finished):
            return  # some unfinished device is not in a receive: it can still send (O(1) per receive)
        live = [d for d in self.devices if d not in self._finished]
        if not live or not all(self._stuck(d) for d in live):
            return
        waits = {d: next(sk for sk, f in self._waiting[d].items() if not f.done()) for d in live}
        err = Deadlock(waits, self._finished)
        for d in live:
            if d == caller:
                continue
            for f in self._waiting[d].values():
                if not f.done():
                    f.set_exception(err)
        if caller is not None:
            raise err

    def finished(self, device: int) -> None:
        self._finished.add(device)
        for dst, waits in self._waiting.items():
            for (src, key), fut in waits.items():
                if src == device and not fut.done():
                    fut.set_exception(PeerFinished(dst, src, key))
        self._check_deadlock()

    def undelivered(self) -> list[Message]:
        return [m for box in self.boxes.values() for m in box.undelivered()]

    def close(self) -> None:
        """The run is over: stop the mailboxes' timers."""
        for box in self.boxes.values():
            box.close()
