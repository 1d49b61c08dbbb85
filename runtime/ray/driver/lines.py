"""The driver's control lines (``runtime/wire/control_line.py``) to the device processes of its node:
which process has one open, who may use them now, and whether a run can go on them.

One thread at a time is on the lines (``claim``): another thread's wait would take this one's
answers for stale ones and drop them, so a thread that finds them taken goes by Ray calls.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from enum import Enum
from typing import Any, Iterator, Mapping

from ...wire.control_line import INLINE_MAX, ControlLine
from ...wire.shared_memory import shared_memory_prefix
from ..start import import_ray
from .held import Held


class WhyRayCalls(str, Enum):
    """Why a run's calls went as Ray actor calls rather than on the control lines (its value says
    it in words, as ``Execution.control_reason`` and the benchmarks print it). None of these moves
    the run's messages between devices: they take their own routes (``Execution.messages``)."""

    LARGE_INPUTS = f"input shards of {INLINE_MAX >> 20} MiB or more go through Ray's object store"
    INPUTS_IN_STORE = "input shards given as Ray objects"
    NO_LINE = "a device process has no control line (on another node, or its line did not open: warned then)"
    LINE_FAILED = "a device process's control line failed"
    LINES_BUSY = "another thread's run or fetch was on the control lines"
    RAY_DATA_PLANE = "the mesh runs on the ray data plane"


class ControlFallbackWarning(RuntimeWarning):
    """A device process of the driver's node is run by Ray calls: its control line did not open."""


class ControlLines:
    """group (a tuple of devices sharing a process) -> the driver's line to that process."""

    def __init__(self, secret: bytes, enabled: bool):
        self.secret = secret
        self.enabled = enabled  # False on the ray data plane: every call is a Ray call
        self.by_group: dict[tuple[int, ...], ControlLine] = {}
        self.prefix = shared_memory_prefix(secret)  # the mesh's shared-memory files: the lines' rings
        self.lock = threading.Lock()  # held by the thread whose run or fetch is on the lines

    def open(self, group: tuple[int, ...], address: str | None, timeout: float | None) -> None:
        """The line to ``group``'s (new) process, at ``address`` (None: on another node, where its
        runs stay Ray calls); a line that does not open leaves Ray calls too."""
        old = self.by_group.pop(group, None)
        if old is not None:
            old.close()
        if address is not None:
            try:
                line = self.by_group[group] = ControlLine(address, self.secret, timeout=timeout or 10.0)
                line.open_rings(self.prefix)
            except OSError as e:  # never silently: the runs of these devices are Ray calls from now on
                warnings.warn(ControlFallbackWarning(
                    f"the driver's control line to the process of devices {list(group)} did not open ({e}): their "
                    "run calls and fetches go by Ray calls (a millisecond or more each way instead of tens of "
                    "microseconds); the results are the same"), stacklevel=3)

    def close(self) -> None:
        for line in self.by_group.values():
            line.close()
        self.by_group = {}

    @contextlib.contextmanager
    def claim(self) -> Iterator[bool]:
        """Whether this thread may use the lines, held until the block ends (see the module
        docstring): False for a thread that finds them taken, or a mesh on the ray data plane."""
        mine = self.enabled and self.lock.acquire(blocking=False)
        try:
            yield mine
        finally:
            if mine:
                self.lock.release()

    def for_run(self, groups, shards: Mapping[int, list]) -> tuple[dict | None, WhyRayCalls | None]:
        """The lines a run goes on (group -> line) and None, where every process it reaches has a
        line open and every shard is kept there or small enough to go by value (``INLINE_MAX``);
        otherwise None and why not (the run is Ray calls, its shards in the object store)."""
        ray = import_ray()
        for ins in shards.values():
            for a in ins:
                if isinstance(a, ray.ObjectRef):
                    return None, WhyRayCalls.INPUTS_IN_STORE
                if not isinstance(a, Held) and getattr(a, "nbytes", 0) >= INLINE_MAX:
                    return None, WhyRayCalls.LARGE_INPUTS
        lines = {}
        for group in groups:
            if any(d in shards for d in group):
                line = self.by_group.get(group)
                if line is None:
                    return None, WhyRayCalls.NO_LINE
                if line.failed is not None:
                    return None, WhyRayCalls.LINE_FAILED
                lines[group] = line
        return lines, None

    def of_hosts(self, actors: Mapping[int, Any], hosts) -> dict | None:
        """host handle -> its process's line, for each of ``hosts``; None where one has none open."""
        line_of = {actors[g[0]]: line for g, line in self.by_group.items() if g[0] in actors}
        lines = {host: line_of.get(host) for host in hosts}
        if any(ln is None or ln.failed is not None for ln in lines.values()):
            return None
        return lines
