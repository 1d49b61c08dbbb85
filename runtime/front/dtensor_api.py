"""``simshard.dtensor``: PyTorch DTensor's vocabulary in one place, as a torch user imports it.

DTensors and their layouts (``dtensor``), their arithmetic (``dtensor_ops``), building them from
shards and sub-meshes (``dtensor_build``), tensor parallelism over ``simshard.nn`` modules
(``dtensor_parallel``) and ``CommDebugMode`` (``calls.comm_debug``). See docs/dtensor.md.
"""

from simshard.sharding.mesh_view import MeshView

from .dtensor import (
    CommDebugMode, DTensor, DTensorSpec, NormPartial, Partial, Placement, ReduceOp, Replicate, Shard, StridedShard,
    distribute_tensor, init_device_mesh, redistribute, register_reduce_op,
)
from .dtensor_build import current_rank, rank
from .dtensor_ops import MaxResult
from .dtensor_spmd import run_per_rank
from .dtensor_parallel import (
    ColwiseParallel, ParallelStyle, RowwiseParallel, SequenceParallel, distribute_module, parallelize_module,
)

__all__ = [
    "ColwiseParallel", "CommDebugMode", "DTensor", "DTensorSpec", "MaxResult", "MeshView", "NormPartial", "Partial",
    "ParallelStyle", "Placement", "ReduceOp", "Replicate", "RowwiseParallel", "SequenceParallel", "Shard",
    "StridedShard", "current_rank", "distribute_module", "distribute_tensor", "init_device_mesh", "parallelize_module",
    "rank", "redistribute", "register_reduce_op", "run_per_rank",
]
