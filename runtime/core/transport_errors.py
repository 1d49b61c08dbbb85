"""Transport-level failures: what a send or receive can meet. The executor turns them into errors
naming the instruction (``runtime/errors.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from .transfer_log import Key

if TYPE_CHECKING:
    from .mailbox import Message


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
    def __init__(self, msg: "Message"):
        super().__init__(f"device {msg.src} sent message {msg.key} to device {msg.dst} twice")
        self.msg = msg


