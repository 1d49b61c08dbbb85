"""The sharding model, the bottom of the pipeline: meshes, both dialects of sharding, and layouts.

* ``axes``: mesh axes and sub-axes (``"x":(2)4``);
* ``mesh``: the named device mesh; ``syntax``: Shardy's text grammar, parsed and printed;
* ``dims``: tensor-dimension shardings (Shardy / JAX); ``partition_spec``: JAX's ``P`` and
  ``NamedSharding``; ``placements``, ``ragged``: mesh-dimension placements (DTensor);
* ``layout``: which global elements each device holds, the one truth both views derive from;
  ``convert``: exact conversion between the views; ``reduce_ops``: pending-reduction ops;
* ``show``: drawings of a layout over the mesh.
"""

from .axes import AxisRef
from .dims import DimSharding, Sharding
from .layout import Layout, equivalent, layout
from .mesh import AxisType, Mesh, make_mesh
from .partition_spec import NamedSharding, P, parse_partition_spec
from .placements import DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard, parse_placement, parse_placements
from .ragged import RaggedShard
from .reduce_ops import REDUCE_OPS
from .show import render, show

__all__ = [
    "AxisRef", "AxisType", "DTensorSpec", "DimSharding", "Layout", "Mesh", "NamedSharding", "P", "Partial",
    "Placement", "REDUCE_OPS", "RaggedShard", "Replicate", "Shard", "Sharding", "StridedShard", "equivalent",
    "layout", "make_mesh", "parse_partition_spec", "parse_placement", "parse_placements", "render", "show",
]
