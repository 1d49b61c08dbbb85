"""What the device processes answered when told where every device is (``DeviceHost.connect``):
whether each polls for messages, how each device reaches each peer, and a warning for every peer
reached by Ray calls where it should have been by socket (never a silent fallback: a measurement
over Ray calls must not pass for one over sockets)."""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Iterable, Mapping, Sequence

from ..protocol import Connected


class SocketFallbackWarning(RuntimeWarning):
    """A device process reaches a peer process by Ray calls because the socket to it did not open."""


def heard(groups: Sequence[tuple[int, ...]], answers: Sequence[tuple]) -> tuple[dict[int, Connected], dict[int, dict]]:
    """Each device's process's answer (device -> its ``Connected``: how it polls, its event loop)
    and routes (device -> peer -> route), from each group's answer; a ``SocketFallbackWarning`` per
    peer process that a process could not reach by socket, naming the devices on both ends and why."""
    processes, routes = {}, {}
    for group, wire in zip(groups, answers):
        connected = Connected.of(wire)
        for d in group:
            processes[d] = connected
        routes.update({int(d): dict(r) for d, r in connected.routes.items()})
        for u in connected.unreached:
            warnings.warn(SocketFallbackWarning(
                f"devices {list(u.devices)} reach devices {list(u.peers)} by Ray calls, not by the socket to their "
                f"process ({u.address.lstrip(chr(0))}): {u.reason}. Messages between them are several times "
                "slower; the run's results are the same."), stacklevel=3)
    return processes, routes


def routes_used(routes: Mapping[int, Mapping[int, str]], devices: Sequence[int]) -> dict[str, int]:
    """How many ordered pairs of ``devices`` each route joins ("process", "unix", "tcp", "ray")."""
    among = set(devices)
    return dict(Counter(r for d in devices for p, r in routes.get(d, {}).items() if p in among))


def messages_taken(taken: Iterable[Iterable[tuple[str, int]]]) -> dict[str, int]:
    """The messages a run's devices sent per route, from each device's (route, messages) pairs
    (``DeviceSummary.taken``; "unix ring": by the socket's ring of frames, ``wire/frame_rings``)."""
    out: Counter = Counter()
    for pairs in taken:
        for route, n in pairs:
            out[route] += n
    return dict(out)
