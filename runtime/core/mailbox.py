"""One device's incoming messages: ``Message``, the ``Mailbox`` that matches them by (source, key),
and the helpers for bodies still in their sender's memory (``is_lent``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Hashable

import numpy as np

from .transfer_log import Key
from .transport_errors import DuplicateMessage, RecvTimeout


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
        # the loop of the run this mailbox serves, asked once: ``get_running_loop`` makes a
        # system call (getpid, its check against a fork) each time, one per message otherwise
        self._loop: asyncio.AbstractEventLoop | None = None

    def _slot(self, src: int, key: Key) -> asyncio.Future:
        fut = self._slots.get((src, key))
        if fut is None:
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            fut = loop.create_future()
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


