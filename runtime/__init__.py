"""The runtime (imported as ``simshard.runtime``): partitioned programs run on devices, one room
per job. It imports the compiler's data types; the compiler never imports it.

* ``core/``: what every backend shares, with no Ray and no sockets: the ``Transport`` interface,
  mailboxes and the transfer log, the collectives (written once over a transport, reductions in
  the canonical group order), the ``Executor`` (one device running its schedule), ``Execution``
  (what a run produced) and ``placement`` (global arrays to shards and back);
* ``calls/``: a program compiled once and called again on either backend (``Compiled``), the
  arrays calls leave on the devices (``DeviceArray``), and ``CommDebugMode``, which watches calls;
* ``local/``: the local backend: every device an asyncio task of one event loop
  (``run_local``, ``LocalMesh``, ``InMemoryTransport``);
* ``wire``: sockets, frames, shared memory and the control line between processes (standard
  library and numpy only);
* ``ray/``: the Ray backend: ``start`` (starting Ray and a device process), ``protocol`` (what the
  driver and a device process say), ``host/`` (the device process), ``driver/`` (``RayMesh``,
  ``run_ray``), ``nodes`` (mesh axes onto cluster nodes); imported on first use, so only those who
  use it need ray;
* ``eager/``: eager sharded arrays (``ss.device_put``'s ``Array``; ``use_devices`` puts a mesh's
  arrays on a ``RayMesh``): an op on them is traced, partitioned and run on their devices, once
  per op and input types (``simshard.runtime.eager``; it imports the compiler, so this package
  does not import it);
* ``front/``: what users call: ``ss.run`` and its backend registry, DTensor's vocabulary
  (``simshard.dtensor``) and redistribution.
"""

from .calls.compiled import Compiled, Result
from .calls.device_array import DeviceArray
from .core.collectives import (
    Channel, all_gather, all_reduce, all_to_all, broadcast, collective_permute, reduce_in_order, reduce_scatter,
    run_collective,
)
from .core.execution import Execution
from .core.executor import Executor
from .core.mailbox import Mailbox, Message
from .core.placement import assemble_outputs, shard_inputs
from .core.transfer_log import TransferLog
from .core.transport import Transport
from .errors import (
    CollectiveError, DeviceLostError, DeviceOutOfMemoryError, ExecutionError, PeerTimeoutError, ScheduleMismatchError,
)
from .local.backend import execute_local, run_local
from .local.in_memory import InMemoryTransport
from .local.mesh import LocalMesh

__all__ = [
    "Channel", "CollectiveError", "Compiled", "DeviceArray", "DeviceLostError", "DeviceOutOfMemoryError", "Execution", "ExecutionError", "Executor",
    "InMemoryTransport", "LocalMesh", "Mailbox", "Message", "PeerTimeoutError", "Result", "ScheduleMismatchError", "TransferLog",
    "Transport", "all_gather", "all_reduce", "all_to_all", "assemble_outputs", "broadcast", "collective_permute",
    "execute_local", "reduce_in_order", "reduce_scatter", "run_collective", "run_local", "shard_inputs",
]


def __getattr__(name):
    # ss.runtime.RayMesh / run_ray without importing ray for the local backend
    if name == "RayMesh":
        from .ray.driver.mesh import RayMesh

        return RayMesh
    if name == "run_ray":
        from .ray.driver.run import run_ray

        return run_ray
    if name == "ensure_ray":
        from .ray.start import ensure_ray

        return ensure_ray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
