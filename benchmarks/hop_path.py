"""A message's whole path on the sockets data plane, timed on one core.

Two device hosts (``DeviceHost``, the class Ray runs as each device process) live in this one
process and one event loop, joined by their real Unix sockets, and run the one-message-in-flight
program of ``peers.py`` (``permute_chain`` along ``hop_pairs``: devices 0 and 1 pass a 4-element
array back and forth, one collective-permute per hop). Every hop then runs both sides' code one after the other: the
executor, the collective, the transport, the frame, the write and read, the receiver, the
mailbox, the wake of the receiving device. Its time per hop is that whole path's cost, which two
processes on two cores overlap only in part (the sender's work after its write), and which,
unlike a two-process hop, does not move with the machine's other load or its cores' wakeups. A
bare hop over the same loop and a socket pair (a write, a read, a future: nothing of simshard's)
is the floor under it.

With ``--segments``, the path's public joints are stamped (the transport's send, the socket
connection's send, the receiver's read, the mailbox's put, and a receive's start and end) and
the time between each two consecutive stamps is reported (medians; each stamp costs about 0.2
us, which lands in its segments).

    python benchmarks/hop_path.py [--hops 2000] [--seconds 5] [--loop uvloop|asyncio] [--segments] [--poll]

No Ray: the hosts are given their node's id and address instead of asking Ray for them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import socket
import statistics
import struct
import time

import sys
from pathlib import Path

import numpy as np

import simshard.runtime as runtime
from simshard.runtime.core.mailbox import Mailbox
from simshard.runtime.core.transport import Transport
from simshard.runtime.ray.host import device_host
from simshard.runtime.ray.protocol import RunPlan
from simshard.runtime.wire.receiver import Receiver
from simshard.runtime.wire.sockets import Connection

sys.path.insert(0, str(Path(__file__).parent))
import peers  # noqa: E402  (beside this file: the hop program, ``permute_chain``)


class NoRay:
    """What a host asks Ray for, answered here: its node's address (for its TCP listener)."""

    class util:
        @staticmethod
        def get_node_ip_address() -> str:
            return "127.0.0.1"


@contextlib.contextmanager
def without_ray():
    """Hosts set up here ask this process, not Ray, for their node's id and address."""
    ask_ray, node_id = device_host.import_ray, device_host.DeviceHost.node_id
    device_host.import_ray = lambda: NoRay  # (the module-level name the host asks for Ray by)
    device_host.DeviceHost.node_id = lambda self, device=None: "this node"
    try:
        yield
    finally:
        device_host.import_ray, device_host.DeviceHost.node_id = ask_ray, node_id


async def connected_hosts(hops: int, poll: bool) -> list:
    """Two hosts of one device each, listening, connected to each other by socket, the hop program
    loaded; ``poll``: their loops poll during runs, as on a node with a core for each (and the
    small frames go by the sockets' rings: ``wire/frame_rings``)."""
    secret = os.urandom(32)
    with without_ray():
        hosts = [device_host.DeviceHost([d], os.path.dirname(runtime.__file__)) for d in (0, 1)]
        addresses = [await h.listen(secret) for h in hosts]
        sockets = {d: ("this node", addresses[d][1], addresses[d][2]) for d in (0, 1)}
        for h in hosts:
            await h.connect({0: None, 1: None}, 0, sockets, secret, poll)
    program = peers.permute_chain((0, 1), peers.hop_pairs, hops)
    for d, h in enumerate(hosts):
        await h.load(d, "hops", program.schedule(d).to_bytes(), None, "direct", (), 10.0, None)
    return hosts


def close(hosts) -> None:
    """Close the hosts' sockets (their listeners, control lines and connections)."""
    for h in hosts:
        h.listener.close()
        h.control.close()
        for connection in h.connections.values():
            connection.close()


async def simshard_hops(hops: int, seconds: float, poll: bool = False) -> list[float]:
    """Seconds per hop of each run of the hop program, for ``seconds`` (``poll``: ``connected_hosts``)."""
    hosts = await connected_hosts(hops, poll)
    per_hop, run_id, start = [], 0, time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            run_id += 1
            began = time.perf_counter()
            await asyncio.gather(*[h.run(tuple(RunPlan("hops", run_id, False, ((d, 1),), (), ())),
                                         np.full(4, d, np.float32)) for d, h in enumerate(hosts)])
            per_hop.append((time.perf_counter() - began) / hops)
    finally:
        close(hosts)
    return per_hop


async def bare_hops(hops: int, seconds: float) -> list[float]:
    """Seconds per hop of the floor: a 16-byte prefix and a 16-byte body written to a socket,
    read by a protocol on the same loop and handed to the waiting side by a future."""
    loop, frame = asyncio.get_running_loop(), struct.Struct("<QII")
    waiting: list = [None, None]

    class Bare(asyncio.BufferedProtocol):
        def __init__(self, side: int):
            self.side, self.buffer, self.end = side, bytearray(1 << 16), 0

        def get_buffer(self, sizehint: int):
            return memoryview(self.buffer)[self.end:]

        def buffer_updated(self, nbytes: int) -> None:
            self.end += nbytes
            while self.end >= 32:
                frame.unpack_from(self.buffer, 0)
                array = np.frombuffer(self.buffer, np.float32, 4, 16).copy()
                self.buffer[:self.end - 32] = self.buffer[32:self.end]
                self.end -= 32
                waiting[self.side].set_result(array)

    a, b = socket.socketpair()
    ends = [await loop.create_connection(lambda side=side: Bare(side), sock=s) for side, s in enumerate((a, b))]
    per_hop, start = [], time.perf_counter()
    array = np.zeros(4, np.float32)
    while time.perf_counter() - start < seconds:
        began = time.perf_counter()
        for k in range(hops):
            sender, receiver = k % 2, 1 - k % 2
            waiting[receiver] = loop.create_future()
            ends[sender][0].write(frame.pack(k, 0, 16) + array.tobytes())
            array = await waiting[receiver]
        per_hop.append((time.perf_counter() - began) / hops)
    for transport, _ in ends:
        transport.close()
    return per_hop


# the path's public joints, stamped with --segments: (class, method, label)
JOINTS = ((Transport, "send", "transport send"), (Connection, "send", "connection send"),
          (Receiver, "buffer_updated", "read"), (Mailbox, "put", "mailbox put"), (Mailbox, "get", "receive"))


@contextlib.contextmanager
def joints_stamped(stamps: list):
    """Each joint wrapped, while in effect, so that its start (and its end: label + " done") is
    stamped in ``stamps``."""
    clock, originals = time.perf_counter_ns, [(cls, name, getattr(cls, name)) for cls, name, _ in JOINTS]
    for cls, name, label in JOINTS:
        method = getattr(cls, name)
        if asyncio.iscoroutinefunction(method):
            async def stamped(*args, _method=method, _label=label, **kwargs):
                stamps.append((_label, clock()))
                result = await _method(*args, **kwargs)
                stamps.append((_label + " done", clock()))
                return result
        else:
            def stamped(*args, _method=method, _label=label, **kwargs):
                stamps.append((_label, clock()))
                result = _method(*args, **kwargs)
                stamps.append((_label + " done", clock()))
                return result
        setattr(cls, name, stamped)
    try:
        yield
    finally:
        for cls, name, method in originals:
            setattr(cls, name, method)


def segment_lines(stamps: list, shown: int = 12) -> list[str]:
    """The segments between consecutive stamps that take most of the time, each with its median
    (a gap of over a millisecond is between two runs, not on a hop's path: left out)."""
    between = collections.defaultdict(list)
    for (a, at), (b, bt) in zip(stamps, stamps[1:]):
        if bt - at < 1_000_000:
            between[(a, b)].append(bt - at)
    total = sum(sum(v) for v in between.values())
    ranked = sorted(between.items(), key=lambda kv: -sum(kv[1]))[:shown]
    return [f"  {a:>22s} -> {b:<22s} {statistics.median(v) / 1e3:6.2f} us  ({100 * sum(v) / total:4.1f}% of the time)"
            for (a, b), v in ranked]


def summary(name: str, per_hop: list[float]) -> str:
    per_hop = sorted(per_hop)
    return (f"{name}: {per_hop[0] * 1e6:.1f} us per hop best, {statistics.median(per_hop) * 1e6:.1f} us median "
            f"({len(per_hop)} runs)")


async def measure(args) -> list[str]:
    lines = [summary("bare hop (a write, a read, a future)", await bare_hops(args.hops, args.seconds)),
             summary("simshard hop (both hosts' whole path)", await simshard_hops(args.hops, args.seconds))]
    if args.poll:
        lines.append(summary("simshard hop, both hosts polling (small frames by ring)",
                             await simshard_hops(args.hops, args.seconds, poll=True)))
    if args.segments:
        stamps: list = []
        with joints_stamped(stamps):
            await simshard_hops(args.hops, min(args.seconds, 2.0))
        lines += ["where a simshard hop's time goes (stamped; between consecutive joints):", *segment_lines(stamps)]
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hops", type=int, default=2000, help="hops per run")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each side is timed")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="the event loop (Ray runs its actors on uvloop wherever it is installed)")
    parser.add_argument("--segments", action="store_true", help="also stamp the path's joints")
    parser.add_argument("--poll", action="store_true",
                        help="also with both hosts polling (uvloop only: each host's loop polls by turns of its own)")
    args = parser.parse_args(argv)
    if args.poll and args.loop != "uvloop":
        parser.error("--poll needs --loop uvloop (asyncio's one selector would poll for one host only)")
    if args.loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise SystemExit("uvloop is not installed: --loop asyncio") from None
        run = uvloop.run
    else:
        run = asyncio.run
    print(f"{args.loop} loop, {os.cpu_count()} cores; one process, one core")
    for line in run(measure(args)):
        print(line)


if __name__ == "__main__":
    main()
