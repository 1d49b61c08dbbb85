"""cluster/launch_local.py: several Ray nodes on one machine, connectable, cleanly stopped."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent

pytestmark = pytest.mark.ray_cluster


def test_two_nodes_up_connected_and_shut_down(two_node_cluster):
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    assert len(alive) == 2
    assert len({n["NodeID"] for n in alive}) == 2
    assert all(n["Resources"].get("CPU") == 1.0 for n in alive)
    assert ray.cluster_resources().get("CPU") == 2.0
    two_node_cluster.shutdown()
    assert not ray.is_initialized()
    two_node_cluster.shutdown()  # idempotent


def test_cli_prints_address_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "cluster" / "launch_local.py"), "--nodes", "2", "--cpus", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        lines, deadline = [], time.monotonic() + 40
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        address = [l.split(": ", 1)[1].strip() for l in lines if l.startswith("address: ")]
        if not address:
            pytest.skip(f"the launcher could not start a local cluster here: {''.join(lines)!r}")
        assert ":" in address[0]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "all nodes stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
