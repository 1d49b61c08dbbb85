"""The device side of the Ray backend: the host process of one or more devices.

These modules (and ``ray/start.py``, ``ray/protocol.py``) travel to each device process by value
with the ``DeviceHost`` actor class (``RayMesh.start`` registers them with cloudpickle): a worker
must not import another checkout's ``simshard.runtime`` before ``bootstrap`` has bound the
driver's. So ``device_host`` imports at its top only what travels with it (``peers``,
``process``, ``protocol``, ``start``) and the standard library; ``device`` and ``transport``,
which build on the runtime's core, and the wire, are imported inside the methods that run after
``bootstrap``.

* ``device_host``: ``DeviceHost``, the actor: held arrays, sockets, run calls for its devices;
* ``device``: ``HostedDevice``, one logical device's programs, runs and mailboxes;
* ``peers``: how a device reaches another (same process, socket, Ray call);
* ``process``: the worker process's memory and collector settings;
* ``transport``: ``RayTransport``, one device's sends and receives (imported after ``bootstrap``).

Nothing here imports the driver side (``ray/driver/``).
"""

import sys

from .. import protocol, start

# What travels by value with the actor class (cloudpickle.register_pickle_by_value): this package
# with its modules, and the two it uses before ``bootstrap``.
HOST_MODULES = (start, protocol, sys.modules[__name__])
