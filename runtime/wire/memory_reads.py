"""Reads of another process's memory: a mid-sized message body read straight out of its sender.

Linux's ``process_vm_readv`` copies from another process's memory (one copy, by the kernel) where
its ptrace rules allow it: a probe on opening a connection asks (``probe_memory``: the mesh's
secret, read where the sender keeps its copy). A body the receiver has no place for yet stays in
its sender's memory as a ``Lent`` until the receiver names one.
"""

from __future__ import annotations

import ctypes
import hmac
import os
from typing import Callable

import numpy as np


class IoVec(ctypes.Structure):
    """One ``struct iovec``: a base address and a length."""

    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def load_process_vm_readv():
    """Linux's ``process_vm_readv`` (one copy from another process's memory, by the kernel), or
    None where the C library has none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(IoVec), ctypes.c_ulong, ctypes.POINTER(IoVec), ctypes.c_ulong,
                   ctypes.c_ulong]
    fn.restype = ctypes.c_ssize_t
    return fn


READV = load_process_vm_readv()


def memory_reads_possible() -> bool:
    """Whether this process could read a peer's memory (whether its peers may is up to the kernel:
    a probe asks each receiver)."""
    return READV is not None


def read_memory(pid: int, address: int, into: np.ndarray) -> None:
    """Copy ``into.nbytes`` bytes at ``address`` of process ``pid`` into ``into`` (C-contiguous)."""
    n, done = into.nbytes, 0
    base = into.ctypes.data
    while done < n:
        local, remote = IoVec(base + done, n - done), IoVec(address + done, n - done)
        got = READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) if READV else -1
        if got <= 0:
            err = ctypes.get_errno()
            raise OSError(err, f"reading {n} bytes of process {pid}'s memory: {os.strerror(err) if err else 'unavailable'}")
        done += got


def probe_memory(pid: int, address: int, secret: bytes) -> bool:
    """Whether this process may read process ``pid``'s memory (the kernel's ptrace rules decide):
    the mesh's secret, read at ``address`` there."""
    got = np.empty(len(secret), dtype=np.uint8)
    try:
        read_memory(pid, address, got)
    except OSError:
        return False
    return hmac.compare_digest(got.tobytes(), secret)  # (constant time: as every check of the secret)


def array_owner(array: np.ndarray) -> np.ndarray:
    """The array whose memory ``array`` views (itself if it owns its memory)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class Lent:
    """A message's body still in its sender's memory: ``fetch`` reads it (one copy, by the kernel)
    into the place its receiver names, or a new array, and tells the sender it may let go;
    ``release`` tells it so without reading (a message nobody will receive). Either happens once.
    (A receiver that arrives after its message names the place only when it receives: the body
    waits for it in the sender's memory rather than being read twice.)"""

    __slots__ = ("dtype", "shape", "pid", "address", "_done")

    def __init__(self, dtype, shape, pid: int, address: int, done: Callable[[], None]):
        self.dtype, self.shape, self.pid, self.address = np.dtype(dtype), tuple(shape), pid, address
        self._done = done

    def fetch(self, into: np.ndarray | None = None) -> np.ndarray:
        """The body, read into ``into`` when it fits (the dtype and shape, C-contiguous), else a new array."""
        if self._done is None:
            raise RuntimeError("a lent body was read or released already")
        if into is None or into.dtype != self.dtype or into.shape != self.shape or not into.flags.c_contiguous:
            into = np.empty(self.shape, dtype=self.dtype)
        try:
            read_memory(self.pid, self.address, into)
        finally:
            self.release()
        return into

    def release(self) -> None:
        """Tell the sender it may let go of the body (once; nothing after a ``fetch``)."""
        if self._done is not None:
            done, self._done = self._done, None
            done()
