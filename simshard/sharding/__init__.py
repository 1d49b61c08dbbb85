"""The sharding model, the bottom of the pipeline: meshes, both dialects of sharding, and layouts.

* ``axes``: mesh axes and sub-axes (``"x":(2)4``);
* ``mesh``: the named device mesh; ``syntax``: Shardy's text grammar, parsed and printed;
* ``placements``, ``ragged``: mesh-dimension placements (DTensor);
* ``layout``: which global elements each device holds, the one truth both views derive from;
* ``convert``: the conversion algorithms between the views, exact or refused;
* ``partition_spec``: JAX's ``P``; ``dims``: tensor-dimension shardings, Shardy's ``Sharding``
  and JAX's ``NamedSharding`` (a mesh and a ``P``), with their conversions;
* ``reduce_ops``: pending-reduction ops; ``show``: drawings of a layout over the mesh.

Bottom up: ``axes``, ``reduce_ops``, ``syntax`` (text to plain data) → ``mesh`` →
``placements`` → ``layout`` → ``convert`` → ``partition_spec`` → ``dims`` → ``show``. A
tensor-dimension sharding tells ``layout`` how it lays out (its ``layout`` method), so the layout
and conversion algorithms never import the classes that offer them as methods.
"""

from .axes import AxisRef
from .dims import NamedSharding, Sharding
from .dim_sharding import DimSharding
from .layout import equivalent, layout
from .layout_model import Layout
from .mesh import AxisType, Mesh, make_mesh
from .partition_spec import P, parse_partition_spec
from .placements import DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard, parse_placement, parse_placements
from .ragged import RaggedShard
from .reduce_ops import REDUCE_OPS, ReduceOp, register_reduce_op
from .show import render, show

__all__ = [
    "AxisRef", "AxisType", "DTensorSpec", "DimSharding", "Layout", "Mesh", "NamedSharding", "P", "Partial",
    "Placement", "REDUCE_OPS", "RaggedShard", "ReduceOp", "register_reduce_op", "Replicate", "Shard", "Sharding", "StridedShard", "equivalent",
    "layout", "make_mesh", "parse_partition_spec", "parse_placement", "parse_placements", "render", "show",
]
