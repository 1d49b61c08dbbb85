"""The node's shared memory (``SHM_DIR``): where mid-sized and large bodies travel between the
device processes of a node without crossing the socket.

A sender's ``Ring`` (one per connection) takes mid-sized bodies where the receiver may not read
the sender's memory: the frame names the offset, the receiver copies it out. A large array is
written once into a file of a device's ``SharedBlocks`` (one file per array however many peers it
goes to) and the frame names the file and the reader's slot in it; the receiver maps it read-only,
once for all its messages (``map_shared``, ``shared_maps``), and clears its slot when the last view
of the message's body goes, so the sender writes the file again (warm pages) once every slot is
clear. Every file's name starts with the mesh's prefix (``shared_memory_prefix``), so the driver
removes what crashed processes left (``remove_shared``).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re

import numpy as np

from .frames import Storage, Stored
from .shared_maps import SharedMaps

SHM_DIR = "/dev/shm"  # the node's shared memory (Linux); without it every body goes through the socket
SHM_BYTES = 2 << 20  # an array from this size up travels in shared memory (SharedBlocks)
RING_BYTES = 16 << 20  # each connection's ring of shared memory (Ring), its pages touched as it is used
RING_MIN = 1 << 16  # a body from this size up to SHM_BYTES is read from the sender's memory, or goes through the ring
RING_ALIGN = 64  # ring offsets start on a cache line
READERS = 4096  # a shared file's first page: one byte per reader slot (1 while its mapping lives)
FILE_GRAIN = 1 << 20  # shared files are made in whole MiB, so a file fits arrays of nearby sizes
POOL_BYTES = 256 << 20  # a device keeps its idle shared files up to this many bytes


class Ring:
    """A sender's ring of shared memory on one connection (a file of the node's shared memory,
    mapped by both processes). A body is copied into it and its frame names the offset; the
    receiver copies it out, into its place, as it hands the frame on. Both copies are plain
    copies between mapped pages, where a body through the socket costs the kernel's two copies,
    its buffers and a wakeup of the receiver every few dozen KiB, and a file per message costs
    fresh pages every time. The space of a body is written again only once a sync sent after it
    has been answered (``free``). ``RING_BYTES`` bounds it; a body that finds no room crosses the
    socket instead."""

    def __init__(self, prefix: str):
        self.name = f"{owned(prefix)}-ring-{os.urandom(8).hex()}"  # the mesh's prefix: a leftover is found
        self.bytes = np.frombuffer(new_shared_file(self.name, RING_BYTES), dtype=np.uint8)
        self.linked = True
        self.head = self.tail = 0  # positions (offset + laps x RING_BYTES): [tail, head) may be unread

    def put(self, array: np.ndarray) -> int | None:
        """Copy ``array`` (C-contiguous) in after what was written last: its offset, or None when
        the unread bodies leave no room for it."""
        n = array.nbytes
        start = self.head
        if self.tail >= start or start % RING_BYTES + n > RING_BYTES:
            # all read, or it would wrap: start at the beginning (where the pages are mapped already)
            start = -(-start // RING_BYTES) * RING_BYTES
            if self.tail >= self.head:  # all read: the whole ring is free, not only what is past the tail
                self.tail = start
        if start + n - self.tail > RING_BYTES:
            return None
        offset = start % RING_BYTES
        self.bytes[offset:offset + n] = array.reshape(-1).view(np.uint8)
        self.head = start + -(-n // RING_ALIGN) * RING_ALIGN
        return offset

    def free(self, upto: int) -> None:
        """Everything written before position ``upto`` has been copied out."""
        self.tail = max(self.tail, upto)

    def unlink(self) -> None:
        """Remove the file's name (both mappings stay)."""
        if self.linked:
            self.linked = False
            unlink_shared(self.name)


def new_shared_file(name: str, nbytes: int) -> mmap.mmap:
    """A new file ``name`` of ``nbytes`` in the node's shared memory, mapped read-write (only
    this process's user may open it)."""
    fd = os.open(os.path.join(SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


class SharedFile:
    """One shared file of a ``SharedBlocks``: a page of reader slots, then the body."""

    def __init__(self, prefix: str, capacity: int):
        self.name = f"{owned(prefix)}-{os.urandom(8).hex()}"  # unique across the devices of a process
        self.capacity = capacity
        self.mm = new_shared_file(self.name, READERS + capacity)
        self.slots = np.frombuffer(self.mm, dtype=np.uint8, count=READERS)
        self.body = np.frombuffer(self.mm, dtype=np.uint8, offset=READERS)

    def idle(self) -> bool:
        """Whether every reader has let go of its mapping (the file may be written again)."""
        return not self.slots.any()

    def remove(self) -> None:
        """Remove the file's name (its readers' mappings stay valid)."""
        unlink_shared(self.name)


class SharedBlocks:
    """A device's files of the node's shared memory for arrays from ``SHM_BYTES`` up, kept from
    run to run: ``put`` writes an array once per instruction (by identity: an all-gather's block
    sent to seven peers is one file, each peer a slot in it) into an idle file, one whose every
    reader has let go of its mapping. Idle files beyond ``POOL_BYTES`` are removed; the driver
    removes the rest, by the mesh's prefix, when the mesh closes."""

    def __init__(self, prefix: str):
        self.prefix = prefix  # the mesh's: what is left after a crash can be found and removed
        self.files: list[SharedFile] = []
        self.scope, self.written = None, {}  # id(array) -> [array, file, next slot] within one instruction

    def put(self, array: np.ndarray, scope=None) -> Stored:
        """A file holding ``array`` for one more reader (``Storage.FILE``: its name, the reader's
        slot), written on the array's first ``put`` in ``scope`` (an instruction)."""
        if scope != self.scope:
            self.scope, self.written = scope, {}
        hit = self.written.get(id(array))
        if hit is None or hit[2] == READERS:
            flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            file = self._idle(flat.size)
            file.body[:flat.size] = flat
            hit = self.written[id(array)] = [array, file, 0]  # the array kept: its id is not reused meanwhile
        _, file, slot = hit
        file.slots[slot] = 1  # before the frame goes: the receiver clears it
        hit[2] += 1
        return Stored(Storage.FILE, file.name, slot)

    def _idle(self, nbytes: int) -> SharedFile:
        """The smallest idle file that fits ``nbytes`` and this instruction has not written, or a
        new one (after removing idle files beyond ``POOL_BYTES``)."""
        busy = {id(f) for _, f, _ in self.written.values()}
        idle = [f for f in self.files if id(f) not in busy and f.idle()]
        fits = [f for f in idle if f.capacity >= nbytes]
        if fits:
            return min(fits, key=lambda f: f.capacity)
        kept = sum(f.capacity for f in self.files)
        for f in sorted(idle, key=lambda f: f.capacity):
            if kept + nbytes <= POOL_BYTES:
                break
            f.remove()
            self.files.remove(f)
            kept -= f.capacity
        file = SharedFile(self.prefix, -(-nbytes // FILE_GRAIN) * FILE_GRAIN)
        self.files.append(file)
        return file

    def release(self) -> None:
        """Forget this run's arrays (the files stay for the next run)."""
        self.scope, self.written = None, {}

    def close(self) -> None:
        """Remove every file (their readers' mappings stay valid)."""
        for f in self.files:
            f.remove()
        self.files = []
        self.release()


def shared_memory_prefix(secret: bytes) -> str | None:
    """The name prefix of one mesh's shared-memory files (derived from its secret, so the driver
    can find leftovers), or None where the node has no shared-memory directory."""
    if not os.path.isdir(SHM_DIR):
        return None
    return "simshard-" + hashlib.sha256(secret).hexdigest()[:16]


def map_shared(name: str, dtype, shape, slot: int) -> np.ndarray:
    """A read-only array over the body of the shared file ``name`` (``SharedBlocks``), from this
    process's kept mapping of it (``shared_maps.SharedMaps``); reader ``slot`` is cleared when the
    last view of the body goes, so the sender may write it again."""
    global _MAPS
    shape = tuple(shape)
    if int(np.prod(shape, dtype=np.int64)) == 0:
        let_go(name, slot)
        return np.empty(shape, dtype=dtype)
    if _MAPS is None or _MAPS.directory != SHM_DIR:  # (a test may point SHM_DIR elsewhere)
        _MAPS = SharedMaps(SHM_DIR, READERS, let_go)
    try:
        return _MAPS.view(name, dtype, shape, slot)
    except BaseException:
        let_go(name, slot)
        raise


_MAPS: SharedMaps | None = None  # this process's kept mappings (``map_shared``)


def let_go(name: str, slot: int) -> None:
    """Clear a reader's slot of a shared file (its mapping is gone); nothing if the file is."""
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_WRONLY)
    except FileNotFoundError:  # the mesh closed (its files removed) before this view went
        return
    try:
        os.pwrite(fd, b"\0", slot)
    finally:
        os.close(fd)


def map_ring(name: str) -> np.ndarray:
    """A read-only view of a sender's ring (``Ring``), its pages mapped as they are read."""
    fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY)
    try:
        return np.frombuffer(mmap.mmap(fd, RING_BYTES, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ), dtype=np.uint8)
    finally:
        os.close(fd)


def owned(prefix: str) -> str:
    """A mesh's prefix with this process's id: the name says whose a file is, so that one whose
    owner died without removing it (killed, with its driver) is found later (``remove_orphans``)."""
    return f"{prefix}-p{os.getpid()}"


_OWNER = re.compile(r"simshard-[0-9a-f]{16}-p(\d{1,10})-")


def remove_orphans() -> int:
    """Unlink the node's simshard files whose owner process is gone (killed before it could remove
    them, say with its driver); the number removed. Files of live processes stay."""
    if not os.path.isdir(SHM_DIR):
        return 0
    gone = 0
    for name in os.listdir(SHM_DIR):
        found = _OWNER.match(name)
        if found and not alive(int(found.group(1))):
            gone += unlink_shared(name)
    return gone


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (as far as this process may see)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True


def remove_shared(prefix: str) -> int:
    """Unlink every file a mesh's runs left in shared memory (a process that died mid-run)."""
    if not os.path.isdir(SHM_DIR):
        return 0
    gone = 0
    for name in os.listdir(SHM_DIR):
        if name.startswith(prefix + "-"):
            gone += unlink_shared(name)
    return gone


def unlink_shared(name: str) -> bool:
    """Remove the name of a file of the node's shared memory (its mappings stay); False if it was gone."""
    try:
        os.unlink(os.path.join(SHM_DIR, name))
    except FileNotFoundError:
        return False
    return True
