"""The executor (imported as ``simshard.runtime``): local and Ray backends run SPMD schedules.

It imports the compiler's data types; the compiler never imports it.

* ``transport``: the send / receive interface, mailboxes, the transfer log, the in-memory transport;
* ``collectives``: all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute and
  broadcast, written once over a transport, reductions in the canonical (group) order;
* ``executor``: one device running its Schedule (buffers, compute, collectives, memory);
* ``local``: ``run_local``, every device as an asyncio task in one event loop;
* ``placement``: global arrays to input shards and output shards back to global arrays;
* ``device_array``, ``compiled``, ``local_mesh``: arrays that live on the devices, a program
  compiled once and run again on either backend, and the local backend's ``LocalMesh``;
* the Ray backend, one Ray actor per device (or per ``devices_per_process``), imported on first use so that ray is needed only by
  those who use it: ``ray_start`` (starting Ray and a device worker), ``ray_transport`` (sending
  between devices), ``wire`` (the sockets between processes of a node and the driver's control line), ``ray_actor`` (the
  device host process), ``ray_mesh`` (``RayMesh``, ``run_ray``);
  ``ray_backend`` gathers their public names.
"""

from .collectives import (
    Channel, all_gather, all_reduce, all_to_all, broadcast, collective_permute, reduce_in_order, reduce_scatter,
    run_collective,
)
from .errors import (
    CollectiveError, DeviceLostError, DeviceOutOfMemoryError, ExecutionError, PeerTimeoutError, ScheduleMismatchError,
)
from .executor import Executor
from .compiled import Compiled, Result
from .device_array import DeviceArray
from .local import Execution, execute_local, run_local
from .local_mesh import LocalMesh
from .placement import assemble_outputs, shard_inputs
from .transport import InMemoryTransport, Mailbox, Message, Transport, TransferLog

__all__ = [
    "Channel", "CollectiveError", "Compiled", "DeviceArray", "DeviceLostError", "DeviceOutOfMemoryError", "Execution", "ExecutionError", "Executor",
    "InMemoryTransport", "LocalMesh", "Mailbox", "Message", "PeerTimeoutError", "Result", "ScheduleMismatchError", "TransferLog",
    "Transport", "all_gather", "all_reduce", "all_to_all", "assemble_outputs", "broadcast", "collective_permute",
    "execute_local", "reduce_in_order", "reduce_scatter", "run_collective", "run_local", "shard_inputs",
]


def __getattr__(name):
    # ss.runtime.RayMesh / run_ray without importing ray for the local backend
    if name in ("RayMesh", "run_ray"):
        from . import ray_mesh

        return getattr(ray_mesh, name)
    if name == "ensure_ray":
        from .ray_start import ensure_ray

        return ensure_ray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
