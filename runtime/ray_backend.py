"""The Ray backend's public names in one place (``simshard.runtime.ray`` holds them)."""

from .calls.compiled import Compiled, Result
from .ray.driver.mesh import RayMesh
from .ray.driver.run import run_ray
from .ray.host.device_host import DeviceHost
from .ray.start import ensure_ray

RayResult = Result  # the name a run on a RayMesh has always had

__all__ = ["Compiled", "DeviceHost", "RayMesh", "RayResult", "ensure_ray", "run_ray"]
