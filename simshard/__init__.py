"""simshard: run sharded numpy programs on real collectives, verify them bitwise, report the cost.

The sharding model (this layer): meshes, tensor-dimension shardings (Shardy / JAX), placement
lists (DTensor), and the layout that says which elements each device holds.
"""

from .axes import AxisRef
from .errors import ReplicaMismatchError, ShardingError
from .fhe import Utilization, fhe_spec, utilization
from .layout import Layout, equivalent, layout
from .mesh import AxisType, Mesh, make_mesh
from .partition_spec import NamedSharding, P, parse_partition_spec
from .placements import DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard, parse_placement, parse_placements
from .ragged import RaggedShard
from .reduce_ops import REDUCE_OPS
from .sharding import DimSharding, Sharding
from .show import render, show
from .context import get_mesh, set_mesh, use_mesh
from .program import Aval, Program
from .trace import ShapeDtype, TraceError, jit, name, trace
from .interpret import evaluate
from .manual import shard_map
from . import ops
from .scalax import (
    FSDPShardingRule, MeshShardingHelper, PolicyShardingRule, ShardingRule, TreePathShardingRule,
    with_sharding_annotation, with_sharding_constraint,
)
from .explicit import (
    AbstractMesh, DuplicateSpecError, ShardingTypeError, auto_axes, explicit_axes, get_abstract_mesh, reshard, typeof,
)
from . import lax, nn, numpy  # noqa: E402  (simshard.lax / simshard.nn / simshard.numpy)
from .ops import register_op, register_rule

__all__ = [
    "AbstractMesh", "AxisType", "DuplicateSpecError", "ShapeDtype", "ShardingTypeError", "auto_axes",
    "explicit_axes", "get_abstract_mesh", "jit", "lax", "numpy", "reshard", "set_mesh", "trace", "typeof",
    "use_mesh",
    "AxisRef", "DimSharding", "DTensorSpec", "Layout", "Mesh", "NamedSharding", "P", "Partial",
    "Placement", "RaggedShard", "REDUCE_OPS", "ReplicaMismatchError", "Replicate", "Shard",
    "Sharding", "ShardingError", "StridedShard", "Utilization", "equivalent", "fhe_spec", "layout",
    "make_mesh", "parse_partition_spec", "parse_placement", "parse_placements", "render", "show", "utilization",
    "Aval", "Program", "ShapeDtype", "TraceError", "evaluate", "get_mesh", "jit", "name", "ops",
    "set_mesh", "shard_map", "trace", "use_mesh",
    "FSDPShardingRule", "MeshShardingHelper", "PolicyShardingRule", "ShardingRule", "TreePathShardingRule",
    "with_sharding_annotation", "with_sharding_constraint", "nn", "register_op", "register_rule",
]
__version__ = "0.1.0"

# Automatic sharding propagation (Shardy's algorithm). Note: this binds ``simshard.propagate`` to
# the function; import the modules with ``from simshard.propagate import engine`` etc.
from .propagate import explain, propagate  # noqa: E402

__all__ += ["explain", "propagate"]

# Partitioning: ``ss.partition(program)`` and ``ss.plan_reshard(src, dst, shape)``. As with
# propagate, this binds ``simshard.partition`` to the function; import the modules with
# ``from simshard.partition import reshard`` etc.
from .partition import partition, plan_reshard  # noqa: E402

__all__ += ["partition", "plan_reshard"]

# Reports of a run (communication, memory, bitwise verification) and exact-arithmetic inputs.
from .report import CommRecord, CommReport, Link, MemoryReport, Topology, VerifyReport, exact_inputs  # noqa: E402

__all__ += ["CommRecord", "CommReport", "Link", "MemoryReport", "Topology", "VerifyReport", "exact_inputs"]


def run(f, *args, **kwargs):
    """Run ``f(*args)`` sharded, verify it bit for bit and report its cost (see ``simshard.runtime.api.run``).

    The one entry point of the package root that executes; the compiler modules never import the runtime.
    """
    from .runtime.api import run as _run

    return _run(f, *args, **kwargs)


__all__ += ["run"]
