"""A driver killed with kill -9 leaves nothing behind: its device processes see their line to it end
and remove the mesh's files, what processes killed before they could clean up left is removed by
the next simshard start (each file's name carries its owner's process id), and every process of
the private Ray it started is killed by that Ray's reaper (``runtime/ray/reaper.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from simshard.runtime.wire import shared_memory


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_next_start_removes_files_whose_owner_is_dead(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_memory, "SHM_DIR", str(tmp_path))
    prefix = "simshard-" + "0123456789abcdef"
    orphan = tmp_path / f"{prefix}-p{dead_pid()}-ring-00"
    mine = tmp_path / f"{shared_memory.owned(prefix)}-11"
    stranger = tmp_path / "another-program-p1-file"
    for f in (orphan, mine, stranger):
        f.write_bytes(b"x")
    assert shared_memory.remove_orphans() == 1
    assert not orphan.exists() and mine.exists() and stranger.exists()


def test_files_are_named_by_their_owner(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_memory, "SHM_DIR", str(tmp_path))
    prefix = "simshard-" + "0123456789abcdef"
    ring = shared_memory.Ring(prefix)
    try:
        assert ring.name.startswith(f"{prefix}-p{os.getpid()}-")
    finally:
        ring.unlink()


DRIVER = textwrap.dedent("""
    import sys, time
    import numpy as np
    import simshard as ss
    from simshard import P
    from simshard.runtime.ray.driver.mesh import RayMesh
    from simshard.runtime.wire.shared_memory import shared_memory_prefix

    devices = RayMesh(ss.Mesh({"x": 2}), devices_per_process=1).start()
    x = np.ones((2, 1 << 20), np.float32)  # 4 MiB a device: its all-gather goes through shared files
    gather = devices.compile(lambda a: a + 0, x, in_shardings=(P("x", None),), out_shardings=P(None, None))
    res = gather(x)
    res.execution.outputs  # held on the devices
    print(shared_memory_prefix(devices.secret), flush=True)
    time.sleep(600)
""")


# The reaper and the device processes clean up within a second or two on a quiet machine; on a
# 2-core machine running the suite beside other work (load 15) a Ray teardown took over 10 s.
CLEANUP_S = 30


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no shared memory directory here")
def test_a_driver_killed_with_kill_9_leaves_no_shared_memory_and_no_process():
    pytest.importorskip("ray")
    token = os.urandom(16).hex()  # the private Ray's processes carry it: they can be found
    env = {**os.environ, "SIMSHARD_BACKEND": "ray", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        prefix = driver.stdout.readline().strip()
        assert prefix.startswith("simshard-"), f"the driver did not start (exit {driver.poll()})"
        files = [n for n in os.listdir("/dev/shm") if n.startswith(prefix + "-")]
        assert files, "the run left nothing in shared memory to check"
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + CLEANUP_S
    while time.monotonic() < deadline:
        left = [n for n in os.listdir("/dev/shm") if n.startswith(prefix + "-")]
        alive = carrying(f"RAY_AUTH_TOKEN={token}")
        if not left and not alive:
            break
        time.sleep(0.2)
    assert not left, f"{CLEANUP_S} s after the driver was killed, /dev/shm still holds {left}"
    assert not alive, f"{CLEANUP_S} s after the driver was killed, its Ray's processes {alive} still run"


def carrying(mark: str) -> dict[int, str]:
    """pid -> command of every process whose environment holds ``mark``."""
    found = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark.encode() in f.read().split(b"\0"):
                    with open(f"/proc/{entry}/cmdline", "rb") as c:
                        found[int(entry)] = c.read().replace(b"\0", b" ").decode(errors="replace")[:80]
        except (OSError, ValueError):
            pass
    return found


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no shared memory directory here")
def test_the_reaper_removes_the_files_whose_owners_are_gone_and_no_others():
    """The files of the processes it killed, of one gone before it looked (Ray's raylet may kill a
    device process first), of a zombie (killed, not yet collected), and none of a process still
    running."""
    from simshard.runtime.ray import reaper

    gone = []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()  # a pid that is gone
        gone.append(child.pid)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # ended, its exit not collected yet
    while reaper.running(zombie.pid):
        time.sleep(0.01)
    tag = os.urandom(8).hex()
    paths = [f"/dev/shm/simshard-{tag}-p{pid}-{tag}" for pid in (*gone, zombie.pid, os.getpid())]
    for path in paths:
        open(path, "wb").close()
    try:
        assert os.path.exists(f"/proc/{zombie.pid}")
        assert reaper.remove_orphaned_files([gone[0]]) >= 3
        assert [os.path.exists(p) for p in paths] == [False, False, False, True]  # killed, unseen, zombie; mine
    finally:
        zombie.wait()
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)


def test_the_reaper_lists_the_children_of_marked_processes_that_lost_the_mark():
    """Ray's agents set their titles over their environment (setproctitle), which can wipe the
    mark from what /proc shows; their parent keeps it, and the watch lists them as its children."""
    from simshard.runtime.ray import reaper

    mark = f"SIMSHARD_TEST_MARK={os.urandom(8).hex()}"
    parent_code = ("import subprocess, sys, time\n"
                   "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env={})\n"
                   "print(child.pid, flush=True)\n"
                   "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, mark.split("=")[0]: mark.split("=")[1]})
    try:
        child = int(parent.stdout.readline())
        assert not reaper.carries(child, mark.encode())
        found = reaper.family(mark.encode())
        assert set(found) == {parent.pid, child}
        assert sorted(reaper.kill_known(found)) == sorted([parent.pid, child])
    finally:
        parent.kill()
        parent.wait()
