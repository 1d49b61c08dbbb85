"""The private Ray's reaper: every process of a local Ray that simshard started ends with the
driver that started it, even one killed with kill -9.

Ray makes its GCS and raylet share their driver's fate, but the agents the raylet starts (the
dashboard agent, the runtime-env agent) outlive a killed driver by a minute or more, trying to
report to a GCS that is gone. So ``ensure_ray`` starts this script beside a private Ray: it waits
until its standard input ends, which happens when the driver exits however it exits, gives Ray a
moment to stop by itself, then kills every process that still carries the private instance's mark
(``SIMSHARD_PRIVATE_RAY``: a random value the driver's environment holds while it starts Ray, so
that every process of that Ray inherits it, and this one too, and nothing the driver starts
later). It imports nothing but the standard library, and runs as a plain script.
"""

from __future__ import annotations

import os
import signal
import sys
import time

GRACE_SECONDS = 1.0  # what Ray's own shutdown gets before the stragglers are killed


def carries(pid: int, mark: bytes) -> bool:
    """Whether process ``pid``'s environment holds ``mark`` (False where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return mark in f.read().split(b"\0")
    except OSError:
        return False


def reap(mark: bytes) -> int:
    """Kill every other process whose environment holds ``mark``; how many were killed."""
    me, killed = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and carries(int(entry), mark):
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


MARK = "SIMSHARD_PRIVATE_RAY"


def main() -> None:
    mark = os.environ.get(MARK)
    if not mark or not os.path.isdir("/proc"):
        return
    sys.stdin.buffer.read()  # until the driver's end of the pipe closes: it has exited
    time.sleep(GRACE_SECONDS)
    reap(f"{MARK}={mark}".encode())


if __name__ == "__main__":
    main()
