"""The local backend's transport: every device of one event loop, a mailbox each.

It sees all devices, so it detects a deadlock the moment it happens (every unfinished device waits
for a message nobody has sent) and a wait on a device that has already finished, instead of
waiting for the timeout.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Iterable

import numpy as np

from ..core.mailbox import Mailbox, Message
from ..core.transfer_log import Key
from ..core.transport import Transport
from ..core.transport_errors import Deadlock, PeerFinished, TransportError


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

    def _deliver(self, msg: Message) -> None:
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
