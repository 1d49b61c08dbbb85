"""Eager sharded arrays: ops run on the devices one at a time, typed as under ``ss.jit``.

``put`` (``ss.device_put``) commits an array to the devices of a mesh (a ``LocalMesh`` per mesh by
default, a ``RayMesh`` where one is given or set with ``use_devices``); ``array.Array`` is the
JAX-spelled array it returns; ``call.call`` is the one eager mechanism, which DTensor's arithmetic
(``runtime/front/dtensor_ops``) uses too: an op on committed arrays is the op traced, propagated
(or typed in explicit mode), partitioned and executed on their devices, compiled once per op and
input types.
"""

from .array import Array
from .call import clear_cache
from .hosts import host_of, use_devices
from .put import device_put, reshard

__all__ = ["Array", "clear_cache", "device_put", "host_of", "reshard", "use_devices"]
