"""Moved: ``RayMesh`` is ``simshard.runtime.ray.driver.mesh``, ``run_ray``
``simshard.runtime.ray.driver.run``. This old path re-exports their names."""

from .calls.compiled import Compiled, Result
from .ray.driver.groups import auto_per_process
from .ray.driver.held import Held
from .ray.driver.mesh import DATA_PLANES, RayMesh
from .ray.driver.run import run_ray

RayResult = Result  # the name a run on a RayMesh has always had

__all__ = ["Compiled", "DATA_PLANES", "Held", "RayMesh", "RayResult", "auto_per_process", "run_ray"]
