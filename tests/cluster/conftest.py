"""Tests that start real multi-node Ray clusters on this machine (a few seconds each).

Marked ``ray_cluster``: ``-m "not ray_cluster"`` leaves them out. A sandbox where Ray nodes
cannot start skips them, saying why; it does not fail them."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent


def pytest_configure(config):
    config.addinivalue_line("markers", "ray_cluster: starts a local multi-node Ray cluster (a few seconds)")


def load_launch_local():
    """cluster/launch_local.py is a script, not a package module: load it by path."""
    path = ROOT / "cluster" / "launch_local.py"
    spec = importlib.util.spec_from_file_location("launch_local", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _two_node_cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    launch = load_launch_local()
    try:
        cluster = launch.start_local_cluster(nodes=2, cpus=1, timeout=30)
    except Exception as e:  # pragma: no cover - depends on the sandbox
        pytest.skip(f"a local 2-node Ray cluster cannot start here: {type(e).__name__}: {e}")
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def two_node_cluster():
    """A fresh 2-node local cluster (1 CPU each), this process connected to it; stopped after."""
    yield from _two_node_cluster()


@pytest.fixture(scope="module")
def shared_two_node_cluster():
    """One 2-node local cluster for a whole test module (tests must leave it as they found it)."""
    yield from _two_node_cluster()
