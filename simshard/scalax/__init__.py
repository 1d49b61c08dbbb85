"""scalax's sharding API over simshard programs.

``MeshShardingHelper(axis_dims, axis_names).sjit(fun, in_shardings=..., out_shardings=...,
static_argnums=..., args_sharding_constraint=..., annotation_shardings=...)`` traces plain numpy
functions with shardings given as ``ShardingRule``s (``FSDPShardingRule``,
``TreePathShardingRule``, ``PolicyShardingRule``), ``P``s or None, per argument or as pytrees of
them; model code marks points with ``with_sharding_constraint`` and ``with_sharding_annotation``.
Pytrees are dicts, lists, tuples, namedtuples and dataclasses; leaves are named by '/'-joined tree
paths as in scalax (``layers/0/kernel``).
"""

from .annotations import with_sharding_annotation, with_sharding_constraint
from .global_array import GlobalArray
from .helper import MeshShardingHelper
from .sjit import SJitted, UnusedAnnotationWarning
from .pytree import named_tree_map, register_dataclass
from .rules import FSDPShardingRule, PolicyShardingRule, ShardingRule, TreePathShardingRule

__all__ = [
    "FSDPShardingRule", "GlobalArray", "MeshShardingHelper", "PolicyShardingRule", "SJitted", "ShardingRule",
    "TreePathShardingRule", "UnusedAnnotationWarning", "named_tree_map", "register_dataclass",
    "with_sharding_annotation", "with_sharding_constraint",
]
