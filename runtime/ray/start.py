"""Starting Ray, on both sides: the driver connects to Ray or starts a private local one
(``ensure_ray``, on loopback only), and a device worker, before anything else, binds
``simshard.runtime`` to the driver's runtime folder and imports the compiler's packages lean
(``bootstrap``). Ray itself is imported on first use only (``import_ray``): the local backend
never needs it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import reaper


# Arrays from this size travel via ray.put, smaller ones inline in the call (one gRPC hop to the
# receiving actor, no object-store round trips: an MLP's 256 KiB all-reduce chunks arrive ~2x
# sooner). A local Ray started here inlines call arguments up to this size
# (max_direct_call_object_size, 100 KiB by default); on another cluster Ray promotes the larger
# ones to the object store itself.
INLINE_BYTES = 1 << 20
ACTOR_CPUS_MAX = 0.25
# The scheduling priority (``nice``) of the worker processes of a local Ray started here. Ray
# lowers its workers' to 15 by default (``worker_niceness``, ray-project/ray#24928: workers are
# background to the driver and Ray's own daemons), which makes a device process background to any
# other job on the machine as well: a scheduler weight of 36 against 1,024, so beside one busy
# process the devices got a sliver of its core. Here the device processes are the work; at 0 they
# share the cores fairly, as gloo's ranks or JAX do. Measured on this 2-core machine with one busy
# process beside (benchmarks/machine_costs.py --polling --beside 1): the Megatron MLP 512x1024x4096
# step on 2x4 took 64 to 71 ms at 0 against 110 to 113 ms at 15; quiet, the same within noise
# (docs/performance.md, "2026-11-28, thirteenth").
WORKER_NICENESS = 0
RUNTIME_DIR = str(Path(__file__).resolve().parent.parent)  # the runtime folder: ray/start.py is in ray/


def import_ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - ray is a dependency of this backend only
        raise ImportError("the Ray backend needs ray: pip install 'ray>=2.9'") from e
    return ray


# How long joining a cluster (``address=``) may wait for its address to answer, in seconds.
CONNECT_TIMEOUT = float(os.environ.get("SIMSHARD_CONNECT_TIMEOUT", "10"))


def ensure_ray(address: str | None = None, num_cpus: int | None = None, connect_timeout: float | None = None):
    """Connect to Ray: reuse an initialised Ray; with ``address`` join that cluster (refused with a
    ConnectionError naming the address when it does not answer within ``connect_timeout`` seconds,
    ``SIMSHARD_CONNECT_TIMEOUT``, 10 by default); otherwise start a local one, dashboard off, logs
    quiet, on loopback only (``_loopback_only``) and with token authentication (``_private_token``)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    if address is None:
        # "local": a new instance of our own, even when another one runs on this machine
        kw.update(address="local", num_cpus=num_cpus or max(os.cpu_count() or 1, 1), _node_ip_address="127.0.0.1",
                  _system_config={"max_direct_call_object_size": INLINE_BYTES,
                                  "worker_niceness": WORKER_NICENESS})
        _private_token()
        with _loopback_only(), _reaped():
            ray.init(**kw)
        return ray
    _check_reachable(address, CONNECT_TIMEOUT if connect_timeout is None else connect_timeout)
    _check_token(address)
    kw.update(address=address)
    try:
        ray.init(**kw)
    except Exception as e:  # refused (token authentication), or no Ray at that address
        auth = "auth" in f"{type(e).__name__} {e}".lower()
        how = _TOKEN_HINT if auth else " Is a Ray head running there? `ray start --head` prints the address to give."
        raise ConnectionError(f"could not join the Ray cluster at {address}: {type(e).__name__}: {e}.{how}") from e
    return ray


_TOKEN_HINT = (" The cluster uses token authentication: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to its token "
               "(`ray get-auth-token` on the head node prints it); docs/cluster.md says more.")


def _check_token(address: str) -> None:
    """Ask the cluster's GCS once whether this process may join, before ``ray.init``: a cluster with
    token authentication refuses a driver without its token, and ``ray.init`` reports that only as
    "Failed to connect" after 20 s of retries. The probe answers in milliseconds; a Ray without
    these (private) helpers, or an address it cannot resolve, is left to ``ray.init``."""
    if address.startswith("ray://"):
        return
    try:
        from ray._private.services import canonicalize_bootstrap_address
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # pragma: no cover - another Ray layout
        return
    try:
        # "auto": the cluster recorded on this machine; host:port as given (Ray would swap a
        # loopback host for the machine's address, where a loopback-only head does not listen)
        gcs = canonicalize_bootstrap_address(address) if address == "auto" else address.split("://", 1)[-1]
        if gcs is None:
            return
        GcsClient(address=gcs, cluster_id=None)
    except AuthenticationError as e:
        raise ConnectionError(f"the Ray cluster at {address} ({gcs}) refused this process: {e.message}.{_TOKEN_HINT}") from None
    except Exception:  # not found, not resolvable: ray.init says so in its own words
        return


def _check_reachable(address: str, timeout: float) -> None:
    """A TCP connection to ``host:port`` within ``timeout`` seconds, else ConnectionError: Ray itself
    retries an unreachable address for minutes. ``auto`` (the cluster started on this machine) and
    addresses that are not ``host:port`` are left to Ray."""
    import socket

    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if address in ("auto", "local") or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(
            f"cannot reach a Ray cluster at {address}: {e.strerror or type(e).__name__} (waited at most {timeout:g} s; "
            "SIMSHARD_CONNECT_TIMEOUT sets how long). Is a Ray head running there? `ray start --head` prints the "
            "address to give, and --address auto joins the one started on this machine."
        ) from None


def _private_token() -> None:
    """Token authentication for the local Ray started here: a random token in this process's
    environment, which the Ray processes it starts inherit, so that no other process on the
    machine can join the instance and run code in it. A token the user set is kept."""
    if os.environ.get("RAY_AUTH_MODE"):
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    try:  # the config this process already read says no authentication: read it again
        from ray._raylet import Config

        Config.initialize("")
    except (ImportError, AttributeError):  # pragma: no cover - a Ray without token authentication
        pass


_REAPERS: list = []  # the reaper of each private Ray this process started: its pipe stays open while we live


@contextlib.contextmanager
def _reaped():
    """While starting a private local Ray: mark the processes it starts (an environment variable
    they inherit, and nothing started later does) and start the reaper that kills every marked
    process once this one has exited, however it exits (``reaper.py``)."""
    os.environ[reaper.MARK] = secrets.token_hex(16)
    try:
        yield
        _REAPERS.append(subprocess.Popen(
            [sys.executable, reaper.__file__], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True))
    finally:
        del os.environ[reaper.MARK]


@contextlib.contextmanager
def _loopback_only():
    """While starting a private local Ray: keep ``_node_ip_address="127.0.0.1"``.

    On Linux, Ray (2.x) turns a loopback node address into the machine's routable one
    (``services.resolve_ip_for_localhost``) unless its cluster mode is off, which is what
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` does. That variable is read once, when ``ray`` is
    imported (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``), so it is set on the module for
    the ``ray.init`` call only. With the node address 127.0.0.1 the GCS, the raylet, the
    runtime-env agent and every worker (device actor) listen on 127.0.0.1 only, and the Ray
    state records 127.0.0.1. The address of a node started here is written down by Ray at start,
    so nothing else reads the flag later; joining a cluster (``address=``) never goes through
    here. A Ray without that module attribute just starts as before."""
    try:
        from ray._private import ray_constants
    except ImportError:  # pragma: no cover - another Ray layout
        yield
        return
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):  # pragma: no cover
        yield
        return
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


# -- the device side ---------------------------------------------------------------------------


def bootstrap(runtime_dir: str) -> None:
    """Make ``simshard.runtime`` in this worker the driver's runtime folder (a worker could find
    another checkout through an editable install)."""
    import importlib.util

    mod = sys.modules.get("simshard.runtime")
    if mod is not None:
        if Path(mod.__file__).resolve().parent == Path(runtime_dir):
            return
        raise ImportError(f"this Ray worker imported simshard.runtime from {mod.__file__}, the driver's is {runtime_dir}")
    for package in LEAN_PACKAGES:
        _lean_package(package)
    simshard = sys.modules["simshard"]  # registered (lean) just above

    found = importlib.util.find_spec("simshard.runtime")
    if found is not None and found.origin and Path(found.origin).resolve().parent == Path(runtime_dir):
        import simshard.runtime  # noqa: F401
        return
    init = Path(runtime_dir) / "__init__.py"
    spec = importlib.util.spec_from_file_location("simshard.runtime", init, submodule_search_locations=[runtime_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules["simshard.runtime"] = module
    spec.loader.exec_module(module)
    simshard.runtime = module


# Packages whose __init__ a device worker skips until something asks for a name it defines: a
# device needs the executor's modules, not the tracing / propagation API the package roots gather
# (half a worker's start-up CPU, which 64 workers on 2 cores pay in turn).
LEAN_PACKAGES = ("simshard", "simshard.partition", "simshard.report")


def _lean_package(name: str) -> None:
    """Register package ``name`` without running its ``__init__``: its submodules import as usual,
    and the first attribute it does not have yet runs the ``__init__`` into the same module (so
    user code in a manual region that uses ``simshard.…`` finds everything)."""
    import importlib.util

    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    module = importlib.util.module_from_spec(spec)

    def __getattr__(attr: str):
        if module.__dict__.pop("__getattr__", None) is not None:
            spec.loader.exec_module(module)
            if attr in module.__dict__:
                return module.__dict__[attr]
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    module.__getattr__ = __getattr__
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, module)
