"""What the driver and a device process say to each other about a run: typed on both sides,
plain tuples on the wire.

A run call carries one ``RunPlan``; a device process answers with a ``DeviceSummary`` per device
it runs. Both cross the process boundary as plain tuples (``tuple(plan)``, ``summary.to_wire()``)
and are rebuilt on arrival (``RunPlan.of``, ``DeviceSummary.of``): this module travels to the
device processes by value (see ``ray/host/__init__.py``), and an object of a class pickled by
value would carry its class with it, on every run.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple


# The concurrency group of a device process's liveness probe (``DeviceHost.alive``): a thread and
# event loop of its own, so that it answers while the devices' loop is busy.
PROBE_GROUP = "probe"


def processes_on(node: str, sockets: dict) -> int:
    """How many device processes run on ``node``, from the map of the sockets data plane that the
    driver keeps and sends each process (device -> (node id, address, TCP address) of its
    process): one address per process. What decides who polls (``wire/polling``)."""
    return len({address for where, address, _ in sockets.values() if where == node})


class LoadArgs(NamedTuple):
    """What a device is sent when a program is loaded (``DeviceHost.load``, after the key), kept by
    the driver to load a restarted device again."""

    schedule: bytes  # the device's Schedule, msgpack
    capacity: int | None  # device memory, bytes (None: unbounded)
    algorithm: str  # collective algorithm
    trace: tuple  # checkpoint buffers to keep when a run traces values
    timeout: float | None  # receive timeout, seconds: also how long the driver waits on a silent process
    extras: bytes | None  # the user's own ops and reduce ops (``user_entries``)


class RunPlan(NamedTuple):
    """One run call to a device process, for the devices of its group that the program runs on."""

    key: int  # the loaded program (``RayMesh.load``)
    run_id: int  # this run; messages of other runs are told apart by it
    trace_values: bool  # keep every checkpoint buffer's first value (op-by-op verification)
    counts: tuple[tuple[int, int], ...]  # (device, number of its input shards), in the order of the shards
    held: tuple[tuple[int, int], ...]  # (position among the shards, id) of each shard the process keeps
    released: tuple[int, ...]  # ids of kept arrays the driver dropped: let go of first

    @classmethod
    def of(cls, wire: tuple) -> "RunPlan":
        return cls._make(wire)


class Status(str, Enum):
    """How one device's part of a run ended."""

    OK = "ok"  # it ran its whole schedule
    ERROR = "error"  # it failed (``DeviceSummary.error`` says how)
    ABORTED = "aborted"  # the driver or its process stopped it (a peer had failed or died)


class DeviceSummary(NamedTuple):
    """What a device process answers for one of its devices after a run: where it ended and, when
    it ran to the end, what the run cost (its outputs stay in the process, named by ids)."""

    status: Status
    where: str  # its position in its schedule when it stopped ("not started", "not answering", ...)
    error: BaseException | None = None  # what failed it (status ERROR)
    waits: tuple = ()  # (source, key) of the receives it was blocked in when it stopped
    outputs: tuple[int, ...] = ()  # ids of its output shards, kept by its process
    ran: tuple = ()  # ``records.Ran`` fields per collective run (the driver makes the records when asked)
    memory: Any = None  # its DeviceMemory, as ``DeviceMemory.to_wire``'s tuple
    transfers: tuple | bytes = ()  # its TransferLog rows (packed by a device process: ``packed_rows``)
    timeline: tuple | bytes = ()  # its executor's (position, start, end) per instruction (packed likewise)
    values: Any = None  # buffer -> first value (trace_values)
    undelivered: tuple = ()  # (source, key, note) of messages that arrived and were never received
    taken: tuple = ()  # (route, messages it sent to other devices by that route) pairs: ``RayTransport.taken``
    received: int = 0  # messages it took from other devices (``RayTransport.received``)
    # how often its process's polling stepped aside during the run (``wire/preemption``; on its
    # process's first device of the run only, so that the driver's sum counts each process once)
    stepped_aside: int = 0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_wire(self, outputs: tuple | None = None) -> tuple:
        """A plain tuple (the status as its string) for pickling across the process boundary;
        ``outputs``, where given, in place of the summary's own (the ids its host keeps them
        under: no ``_replace``, which rebuilds the tuple through a dict)."""
        if outputs is None:
            return (self.status.value, *self[1:])
        return (self.status.value, *self[1:_OUTPUTS], outputs, *self[_OUTPUTS + 1:])

    @classmethod
    def of(cls, wire: tuple) -> "DeviceSummary":
        return cls(Status(wire[0]), *wire[1:])

    @classmethod
    def failed(cls, error: BaseException, where: str = "unknown", waits: tuple = ()) -> "DeviceSummary":
        return cls(Status.ERROR, where, error=error, waits=tuple(waits))

    @classmethod
    def aborted(cls, where: str, waits: tuple = ()) -> "DeviceSummary":
        return cls(Status.ABORTED, where, waits=tuple(waits))


_OUTPUTS = DeviceSummary._fields.index("outputs")  # (``to_wire``)

class Unreached(NamedTuple):
    """A peer process a device process should reach by socket and does not: its devices' messages
    go by Ray calls instead, and the driver warns, naming the devices and why."""

    devices: tuple[int, ...]  # the devices of the process that could not connect
    peers: tuple[int, ...]  # the devices of the peer process it could not reach
    address: str  # the peer process's socket
    reason: str  # why not (the error, or that it did not answer in time)


class Connected(NamedTuple):
    """A device process's answer to ``DeviceHost.connect``: whether its loop polls for messages
    and how (``polling``: "selector", "turns" or "off"), how each of its devices reaches each peer
    (device -> peer -> route: ``peers.route``), the peers it failed to reach by socket, and the
    event loop Ray runs it on ("uvloop" wherever Ray could import it, else "asyncio")."""

    polling: str
    routes: dict
    unreached: tuple = ()
    loop: str = "asyncio"

    @property
    def polls(self) -> bool:
        return self.polling != "off"

    def to_wire(self) -> tuple:
        return self.polling, self.routes, tuple(tuple(u) for u in self.unreached), self.loop

    @classmethod
    def of(cls, wire: tuple) -> "Connected":
        polling, routes, unreached, loop = wire
        return cls(polling, routes, tuple(Unreached(*u) for u in unreached), loop)
