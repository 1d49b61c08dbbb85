"""simshard: run sharded numpy programs on real collectives, verify them bitwise, report the cost.

The sharding model (this layer): meshes, tensor-dimension shardings (Shardy / JAX), placement
lists (DTensor), and the layout that says which elements each device holds.
"""

from .axes import AxisRef
from .errors import ReplicaMismatchError, ShardingError
from .fhe import Utilization, fhe_spec, utilization
from .layout import Layout, equivalent, layout
from .mesh import Mesh, make_mesh
from .partition_spec import NamedSharding, P
from .placements import DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard
from .ragged import RaggedShard
from .reduce_ops import REDUCE_OPS
from .sharding import DimSharding, Sharding
from .show import render, show

__all__ = [
    "AxisRef", "DimSharding", "DTensorSpec", "Layout", "Mesh", "NamedSharding", "P", "Partial",
    "Placement", "RaggedShard", "REDUCE_OPS", "ReplicaMismatchError", "Replicate", "Shard",
    "Sharding", "ShardingError", "StridedShard", "Utilization", "equivalent", "fhe_spec", "layout",
    "make_mesh", "render", "show", "utilization",
]
__version__ = "0.1.0"

# Automatic sharding propagation (Shardy's algorithm). Note: this binds ``simshard.propagate`` to
# the function; import the modules with ``from simshard.propagate import engine`` etc.
from .propagate import explain, propagate  # noqa: E402

__all__ += ["explain", "propagate"]
