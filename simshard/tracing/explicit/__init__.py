"""Explicit sharding mode (JAX's "sharding in types").

With a mesh whose axes are ``AxisType.Explicit``, every traced value's type carries its sharding
over those axes, and each op's typing rule computes its result's sharding at trace time
(``rules``, ``op_rules``, ``reshape``, ``broadcast``); an ambiguous or illegal case is a ``ShardingTypeError``
at trace time that, where JAX does, asks for ``out_sharding=``. ``mode`` hooks this into tracing;
``api`` has ``typeof``, ``reshard``, ``auto_axes``, ``explicit_axes``, ``get_abstract_mesh``.
"""

from .api import auto_axes, explicit_axes, get_abstract_mesh, reshard, typeof
from .errors import DuplicateSpecError, ShardingTypeError
from .rules import OpCall, Operand, register_typing_rule
from .types import AbstractMesh, ArrayType, TypeSharding
from . import op_rules  # noqa: F401,E402  (registers the op-specific typing rules)

__all__ = [
    "AbstractMesh", "ArrayType", "DuplicateSpecError", "OpCall", "Operand", "ShardingTypeError", "TypeSharding",
    "auto_axes", "explicit_axes", "get_abstract_mesh", "register_typing_rule", "reshard", "typeof",
]
