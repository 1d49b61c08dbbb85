"""Transports: how one device's array reaches another, and the record of every transfer.

The collective library (``collectives.py``) talks only to this interface::

    transport.send(src, dst, key, array, tag=..., note=...)   # never waits
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
(put it in the receiver's mailbox, or on its way there: a plain call, it never waits)
and ``_collect(dst, src, key, timeout)`` (wait for it in ``dst``'s mailbox).

``InMemoryTransport`` serves every device of one event loop (the local backend). Because it sees
all devices, it detects a deadlock the moment it happens (every unfinished device waits for a
message nobody has sent) and a wait on a device that has already finished, instead of waiting
for the timeout.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Hashable

import numpy as np

from .mailbox import Message
from .transfer_log import Key, TransferLog
from .transport_errors import TagMismatch


# -- the interface -------------------------------------------------------------------------------


class Transport(ABC):
    """Send / receive numpy arrays between device ids, recording every transfer."""

    def __init__(self, timeout: float | None = 10.0):
        self.timeout = timeout
        self.log = TransferLog()

    def send(self, src: int, dst: int, key: Key, array: np.ndarray, *, tag: Hashable = None, note: str = "") -> None:
        """Hand ``array`` to the backend for ``dst`` and return: a send never waits (each backend
        puts it in a mailbox, writes it to a socket or makes a Ray call, none of which blocks), so
        it is a plain call, not a coroutine: a collective pays no coroutine per message."""
        array = np.ascontiguousarray(array)
        self.log.record(src, dst, "sent", key, int(array.nbytes))
        self._deliver(Message(src, dst, key, array, tag, note))

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
    def _deliver(self, msg: Message) -> None: ...

    @abstractmethod
    async def _collect(self, dst: int, src: int, key: Key, timeout: float | None) -> Message: ...


