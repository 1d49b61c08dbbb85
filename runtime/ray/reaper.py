"""The private Ray's reaper: every process of a local Ray that simshard started ends with the
driver that started it, even one killed with kill -9.

Ray makes its GCS and raylet share their driver's fate, but the agents the raylet starts (the
dashboard agent, the runtime-env agent) outlive a killed driver by a minute or more, trying to
report to a GCS that is gone. So ``ensure_ray`` starts this script beside a private Ray: it waits
until its standard input ends, which happens when the driver exits however it exits (meanwhile
listing the instance's processes every second, ``family``: the marked ones and their children),
gives Ray a moment to stop by itself, then kills those listed and every process that still carries the private instance's mark
(``SIMSHARD_PRIVATE_RAY``: a random value the driver's environment holds while it starts Ray, so
that every process of that Ray inherits it, and this one too, and nothing the driver starts
later). Then it removes the shared-memory files whose owners are gone: a device process removes
its own when its driver's line ends, but one killed before it got to it (by this script after
the grace, or by Ray's raylet as the driver died) leaves them, named by its pid
(``wire/shared_memory.py``). It imports
nothing but the standard library, and runs as a plain script.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time

GRACE_SECONDS = 1.0  # what Ray's own shutdown gets before the stragglers are killed


def carries(pid: int, mark: bytes) -> bool:
    """Whether process ``pid``'s environment holds ``mark`` (False where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return mark in f.read().split(b"\0")
    except OSError:
        return False


def marked_pids(mark: bytes) -> list[int]:
    """Every other process whose environment holds ``mark``."""
    me = os.getpid()
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != me and carries(int(e), mark)]


def kill(pids) -> list[int]:
    """SIGKILL each of ``pids``; those it reached."""
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed


def reap(mark: bytes) -> list[int]:
    """Kill every other process whose environment holds ``mark``; the pids killed."""
    return kill(marked_pids(mark))


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first); None where the
    process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def stat(pid: int) -> tuple[int, int] | None:
    """Process ``pid``'s parent and start time (clock ticks after boot: with the pid, it names one
    process, however the pid is reused later); None where it is gone."""
    fields = stat_fields(pid)
    try:
        return None if fields is None else (int(fields[1]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def family(mark: bytes) -> dict[int, int]:
    """pid -> start time of every other process that holds ``mark`` and of their descendants. A
    process may lose the mark from what /proc shows of its environment: Ray's agents set their
    titles over it (setproctitle writes into the memory the environment was in), one run in five
    here; their parent, the raylet, keeps it, so the watch (``main``) finds them as its children
    while it lives."""
    me, procs = os.getpid(), {}
    for e in os.listdir("/proc"):
        if e.isdigit() and (got := stat(int(e))) is not None:
            procs[int(e)] = got
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    todo = [pid for pid in procs if pid != me and carries(pid, mark)]
    out: dict[int, int] = {}
    while todo:
        pid = todo.pop()
        if pid not in out and pid != me:
            out[pid] = procs[pid][1]
            todo += children.get(pid, [])
    return out


def kill_known(known: dict[int, int]) -> list[int]:
    """Kill each process of ``known`` (pid -> start time) still running as the same process."""
    return kill(pid for pid, start in known.items() if (now := stat(pid)) is not None and now[1] == start)


WATCH_SECONDS = 1.0  # how often the watch lists the instance's processes while the driver lives
SWEEP_SECONDS = 0.2  # between two sweeps of ``reap_until_none``
REAP_SECONDS = 10.0  # how long it sweeps at most


def reap_until_none(mark: bytes) -> list[int]:
    """``reap`` again and again until two sweeps in a row find no process left (or
    ``REAP_SECONDS`` have passed): a process that a dying raylet was still starting when the
    first sweep ran (its dashboard and runtime-env agents, under load) is killed by a later one.
    The pids killed."""
    killed, quiet, deadline = [], 0, time.monotonic() + REAP_SECONDS
    while quiet < 2 and time.monotonic() < deadline:
        got = reap(mark)
        killed += got
        quiet = 0 if got else quiet + 1
        time.sleep(SWEEP_SECONDS)
    return killed


SHM_DIR = "/dev/shm"
OWNER = re.compile(r"simshard-[0-9a-f]{16}-p(\d{1,10})-")  # as wire/shared_memory.py names a file's owner
GONE_SECONDS = 5.0  # how long killed processes get to disappear before their files are removed


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (killed, its exit not yet collected by
    a parent: it holds no mapping any more)."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] != b"Z"


def remove_orphaned_files(pids: list[int]) -> int:
    """Once ``pids`` are gone, unlink every simshard shared-memory file whose owner no longer runs
    (a file of a process still alive stays); how many were removed. Not only those of ``pids``:
    Ray's raylet may kill a device process before this script lists the instance's processes,
    and a file whose owner is dead is nobody's (a peer that still maps it keeps its mapping)."""
    deadline = time.monotonic() + GONE_SECONDS
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    removed = 0
    for name in os.listdir(SHM_DIR) if os.path.isdir(SHM_DIR) else ():
        found = OWNER.match(name)
        if found and not running(int(found.group(1))):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed += 1
            except OSError:  # another user's, or removed meanwhile
                pass
    return removed


MARK = "SIMSHARD_PRIVATE_RAY"


def main() -> None:
    mark = os.environ.get(MARK)
    if not mark or not os.path.isdir("/proc"):
        return
    marked = f"{MARK}={mark}".encode()
    ended = threading.Event()  # the driver's end of the pipe closed: it has exited
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), ended.set()), daemon=True).start()
    known = family(marked)  # at once: a driver may be killed within a second of starting Ray
    while not ended.wait(WATCH_SECONDS):
        known.update(family(marked))
    known.update(family(marked))  # before the grace: Ray may end some of them itself meanwhile
    time.sleep(GRACE_SECONDS)
    killed = kill_known(known) + reap_until_none(marked)
    remove_orphaned_files(sorted(set(known) | set(killed)))


if __name__ == "__main__":
    main()
