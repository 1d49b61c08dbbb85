"""A receiving process's mappings of the senders' shared files, kept from message to message.

A large body travels in a file of its sender's ``SharedBlocks`` (``shared_memory.py``), and the
sender writes the same few files again run after run. Mapping a file afresh for every message
costs its page tables each time: with ``MAP_POPULATE``, about 0.7 ms for 8 MiB on the 16-core
machine (a host's profile of the 64 MiB all-reduce, 8 devices: 4.9 ms of its 65 ms went to
mapping; docs/performance.md), and without it a fault per page on the first read. ``SharedMaps``
maps each file once, whole, and hands out a view of it per message.

A message's reader slot is still cleared only once nothing reads its body: each view is made
from a ``MessageView`` (an ndarray subclass over the mapping), and numpy's views of views stop at
a change of class, so every array made from the body holds its ``MessageView``, whose finalizer
clears the slot. A file the sender removed is unmapped when next a file is mapped (with the
least recently used past ``MAPS_BYTES``); views still alive keep their mapping until they go.
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections import OrderedDict

import numpy as np

MAPS_BYTES = 1 << 30  # bytes of senders' files a process keeps mapped, at most (least recently used go first)


class MessageView(np.ndarray):
    """One message's body in a sender's file, while its reader holds it (module docstring)."""


class SharedMaps:
    """One process's kept mappings of shared files, by name (only its event loop's thread uses
    them; a slot is cleared on whichever thread lets go of the last view)."""

    def __init__(self, directory: str, offset: int, let_go, limit: int = MAPS_BYTES):
        self.directory, self.offset, self.let_go, self.limit = directory, offset, let_go, limit
        self.maps: OrderedDict[str, mmap.mmap] = OrderedDict()
        self.bytes = 0

    def view(self, name: str, dtype, shape, slot: int) -> np.ndarray:
        """A read-only array of ``shape`` over the body of file ``name`` (from ``offset`` on);
        reader ``slot`` is cleared when the last array made from it goes."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        mm = self.maps.get(name)
        if mm is None or len(mm) < self.offset + nbytes:
            mm = self._map(name)
        else:
            self.maps.move_to_end(name)
        body = np.frombuffer(mm, dtype=np.uint8, count=nbytes, offset=self.offset).view(MessageView)
        weakref.finalize(body, self.let_go, name, slot)
        return body.view(dtype).view(np.ndarray).reshape(shape)

    def _map(self, name: str) -> mmap.mmap:
        """Map file ``name`` whole, its page tables filled at once; first unmap what is gone or
        past the limit."""
        self._forget(name)
        fd = os.open(os.path.join(self.directory, name), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        for old in [n for n in self.maps if not os.path.exists(os.path.join(self.directory, n))]:
            self._forget(old)
        while self.maps and self.bytes + size > self.limit:
            self._forget(next(iter(self.maps)))
        self.maps[name] = mm
        self.bytes += size
        return mm

    def _forget(self, name: str) -> None:
        """Stop keeping file ``name``'s mapping (views still alive keep it mapped until they go)."""
        mm = self.maps.pop(name, None)
        if mm is not None:
            self.bytes -= len(mm)
