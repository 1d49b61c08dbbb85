"""``Channel``: what a collective needs to talk (the transport, who I am, which instruction, my
tag), and the names of the algorithms a collective may run under."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Hashable

import numpy as np

from ...errors import CollectiveError
from ..transport import Transport

ALGORITHMS = ("direct", "ring", "oneshot")


@dataclass(slots=True)
class Channel:
    """What a collective needs to talk: the transport, who I am, which instruction, my tag."""

    transport: Transport
    me: int
    instr: int | str
    tag: Hashable = None
    note: str = ""

    def send(self, peer: int, step: int, array: np.ndarray) -> None:
        """Send ``array`` to ``peer`` as this collective's message ``step`` (it never waits)."""
        self.transport.send(self.me, peer, (self.instr, step), array, tag=self.tag, note=self.note)

    def recv(self, peer: int, step: int) -> Awaitable[np.ndarray]:
        return self.transport.recv(self.me, peer, (self.instr, step), tag=self.tag)

    def expect(self, peer: int, step: int, out: np.ndarray) -> None:
        self.transport.expect(self.me, peer, (self.instr, step), out)


def check_algorithm(algorithm: str) -> None:
    """Refuse an algorithm name this library does not have."""
    if algorithm not in ALGORITHMS:
        raise CollectiveError(f"unknown collective algorithm {algorithm!r} (available: {', '.join(ALGORITHMS)})")
