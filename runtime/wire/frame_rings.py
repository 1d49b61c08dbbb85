"""Rings of small frames between two processes of one node: the socket's frames without its system
calls, while the receiving process polls.

A message in flight pays a write on the sender's side and a wakeup, a poll and a read on the
receiver's: on a virtual machine several microseconds of system calls per message, a quarter of
a hop's path (``benchmarks/hop_path.py``). Where the receiving process polls anyway
(``polling.py``), a sender may instead copy a small frame into a ring of shared memory that the
receiver reads on every turn of its loop: no system call on either side. Each connection has one
(``FrameRing``, the sender's, in a file of the node's shared memory named on the socket; the
receiver's ``RingReader`` hands its bytes to a ``Receiver`` of their own, as if they had come on
the socket), and so has the driver's control line each way (its calls read by the device
process's loop, its answers by the driver's wait as it polls: ``control_line``).

Only while the receiver polls: each ring says whether its reader's loop is awake (polling). A
sender puts a frame in the ring only when it is, and after putting it looks again; a reader that
stops polling says so, then reads the ring once more. Either the sender sees the reader asleep
(and rings its doorbell on the socket, a frame that makes the reader read the ring), or the
reader's last look finds the frame. That holds only if neither side's look is made before its own
write is seen, which x86-64 allows (a store may wait in its core's buffer while a later load
goes ahead); a full barrier between the two prevents it. Python has none to call, but taking a
lock is a locked instruction, which no load or store passes on x86-64 (Intel SDM vol. 3, 9.2.2:
"locked instructions have a total order"; ``fence``). The ring's own order (body before the
count that publishes it, count read before the body) holds by x86-64's ordering of stores among
stores and loads among loads. Other machines (ARM's weaker ordering) have no rings:
``rings_possible``.

A sync on the socket makes the reader empty the ring before it answers (every frame sent before
the sync, by either way, has then been handed on), so the socket's guarantees stay whole.
"""

from __future__ import annotations

import mmap
import os
import platform
import re
import threading
import logging
from typing import Callable, Sequence

from .frames import SMALL
from .shared_memory import SHM_DIR, owned, unlink_shared

RING_BYTES = 1 << 20  # a ring's frames (a frame that finds no room goes on the socket): 15 of the largest
LARGEST = SMALL + (1 << 12)  # the largest frame that may take a ring: a body sent inline (``frames.SMALL``), its header
_LINE = 64  # the ring's counters each on a cache line of its own: written, read, awake
WRITTEN, READ, AWAKE = 0, _LINE // 8, 2 * _LINE // 8  # their indices as 8-byte words
_HEAD = 3 * _LINE
_NAME = re.compile(r"simshard-[0-9a-f]{16}-p\d{1,10}-frames-[0-9a-f]{16}")
_BARRIER = threading.Lock()
LOG = logging.getLogger(__name__)


def rings_possible() -> bool:
    """Whether frames may go by ring here: x86-64 (see the module docstring) with a shared-memory directory."""
    return platform.machine().lower() in ("x86_64", "amd64") and os.path.isdir(SHM_DIR)


def fence() -> None:
    """A full memory barrier: taking a lock is a locked instruction (x86-64; module docstring)."""
    with _BARRIER:
        pass


def _mapped(name: str, create: bool) -> tuple[mmap.mmap, memoryview, memoryview]:
    """The ring's file mapped read-write: (the mapping, its counters as 8-byte words, its frames)."""
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(os.path.join(SHM_DIR, name), flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, _HEAD + RING_BYTES)
        elif os.fstat(fd).st_size != _HEAD + RING_BYTES:
            raise ValueError(f"{name} is not a ring of frames")
        mapping = mmap.mmap(fd, _HEAD + RING_BYTES)
    finally:
        os.close(fd)
    view = memoryview(mapping)
    return mapping, view[:_HEAD].cast("Q"), view[_HEAD:]


def new_ring(prefix: str, whose: str) -> "FrameRing | None":
    """A new ring of frames in the mesh's shared memory, or None with a warning naming ``whose``
    frames then go on the socket (no room in the node's shared memory, say)."""
    try:
        return FrameRing(prefix)
    except OSError as e:
        LOG.warning("simshard wire: no ring for %s (%s): they go on the socket", whose, e)
        return None


def reader_of(name: str, prefix: str, stream, whose: str) -> "RingReader | None":
    """The reader of the ring ``name`` another process named (``RingReader``: a name not of the
    mesh is refused), or None with a warning naming ``whose`` frames then come on the socket."""
    try:
        return RingReader(name, prefix, stream)
    except (OSError, ValueError) as e:
        LOG.warning("simshard wire: the ring for %s could not be read (%s): they come on the socket", whose, e)
        return None


class FrameRing:
    """The sender's end: frames put after the last, each published by the count of bytes written."""

    def __init__(self, prefix: str):
        self.name = f"{owned(prefix)}-frames-{os.urandom(8).hex()}"
        self.mapping, self.counters, self.frames = _mapped(self.name, create=True)
        self.written = 0
        self.linked = True

    def awake(self) -> bool:
        """Whether the reader's loop polls now."""
        return self.counters[AWAKE] == 1

    def put(self, frame: bytes) -> bool:
        """Copy ``frame`` in after the last and publish it; False when the unread ones leave no room."""
        n, start = len(frame), self.written
        if start + n - self.counters[READ] > RING_BYTES:
            return False
        at = start % RING_BYTES
        first = min(n, RING_BYTES - at)
        frame = memoryview(frame)
        self.frames[at:at + first] = frame[:first]
        if first < n:  # round the end of the ring
            self.frames[:n - first] = frame[first:]
        self.written = start + n
        self.counters[WRITTEN] = self.written  # (after the bytes: x86-64 keeps stores in order)
        return True

    def offer(self, parts: Sequence, doorbell: Callable[[], None]) -> bool:
        """Put the frame of ``parts`` (bytes-like, joined only if it goes) in the ring where its
        reader polls now and it fits (``LARGEST``); whether it went. After it goes, the reader is
        looked at again: asleep by then, it might have missed the frame (the module docstring), so
        ``doorbell()`` (a frame on the socket that makes it read the ring)."""
        if not self.awake() or sum(len(p) for p in parts) > LARGEST:
            return False
        if not self.put(parts[0] if len(parts) == 1 else b"".join(parts)):
            return False
        fence()
        if not self.awake():
            doorbell()
        return True

    def unlink(self) -> None:
        """Remove the file's name (both mappings stay)."""
        if self.linked:
            self.linked = False
            unlink_shared(self.name)


class RingReader:
    """The receiver's end of a sender's ring (named on the socket, with the mesh's prefix): its
    bytes handed to ``stream`` (an ``asyncio.BufferedProtocol``: a ``Receiver`` of their own)."""

    def __init__(self, name: str, prefix: str, stream):
        if not (_NAME.fullmatch(name) and name.startswith(prefix + "-")):
            raise ValueError(f"{name!r} is not a ring of this mesh")
        self.mapping, self.counters, self.frames = _mapped(name, create=False)
        self.stream = stream
        self.read = self.counters[READ]
        self.awake = bool(self.counters[AWAKE])  # what this reader last said (its word's own copy)

    def set_awake(self, awake: bool) -> None:
        self.counters[AWAKE] = int(awake)
        self.awake = awake

    def drain(self) -> bool:
        """Hand on every frame published since the last look; whether there were any."""
        written, read = self.counters[WRITTEN], self.read
        if written == read:
            return False
        stream = self.stream
        while read < written:
            at = read % RING_BYTES
            into = stream.get_buffer(-1)
            n = min(len(into), written - read, RING_BYTES - at)
            into[:n] = self.frames[at:at + n]
            read += n
            stream.buffer_updated(n)
        self.read = read
        self.counters[READ] = read
        return True

    def close(self) -> None:
        """Nobody reads this end any more: a sender still writing rings the doorbell for each frame."""
        self.set_awake(False)


class RingReaders:
    """A process's readers of its peers' rings, all awake or asleep together with its loop:
    ``wake`` as the loop starts polling, ``sleep`` before it stops (then a last look), ``drain``
    on every turn while it polls."""

    def __init__(self):
        self.readers: set[RingReader] = set()
        self.awake = False

    @classmethod
    def as_they_are(cls, readers) -> "RingReaders":
        """``readers`` taken as each last said (the driver's, from call to call), made one state:
        awake if any is (the others woken with it: a line opened since), so that ``wake`` has
        nothing left asleep and the next ``sleep`` puts each to sleep behind a barrier."""
        out = cls()
        out.readers.update(readers)
        out.awake = any(r.awake for r in out.readers)
        if out.awake:
            for reader in out.readers:
                if not reader.awake:
                    reader.set_awake(True)
        return out

    def add(self, reader: RingReader) -> None:
        """A new reader (asleep, as a ring is made) joins, awake if the others are."""
        if self.awake:
            reader.set_awake(True)
        self.readers.add(reader)

    def discard(self, reader: RingReader) -> None:
        self.readers.discard(reader)

    def drain(self) -> bool:
        """Hand on what every ring holds; whether any held something."""
        got = False
        for reader in tuple(self.readers):  # (a frame handed on may close a connection)
            got = reader.drain() or got
        return got

    def wake(self) -> None:
        if not self.awake:
            self.awake = True
            for reader in self.readers:
                if not reader.awake:
                    reader.set_awake(True)

    def sleep(self) -> bool:
        """Say asleep, then look once more (after a barrier: module docstring); whether anything came."""
        if self.awake:
            self.awake = False
            for reader in self.readers:
                if reader.awake:
                    reader.set_awake(False)
            fence()
        return self.drain()
