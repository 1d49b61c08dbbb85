"""The Ray backend, one Ray actor per logical device (or per ``devices_per_process`` devices),
in four modules: ``ray_start`` (starting Ray and a device worker), ``ray_transport`` (sending
between devices), ``ray_actor`` (the device host) and ``ray_mesh`` (``RayMesh``, the controller, ``run_ray``). This module keeps the names
users import from ``simshard.runtime.ray_backend``.
"""

from .ray_actor import DeviceHost
from .ray_mesh import Compiled, RayMesh, RayResult, run_ray
from .ray_start import ensure_ray

__all__ = ["Compiled", "DeviceHost", "RayMesh", "RayResult", "ensure_ray", "run_ray"]
