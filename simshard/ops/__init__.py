"""The op registry and every built-in op. Importing this package registers them all."""

from . import (  # noqa: F401  (registration side effects)
    annotations, argsort, barrier, control, dot, dynamic, elementwise, indexing, nn, nullary, reductions, scans, shape,
)
from . import batching  # noqa: F401,E402  (after the ops it gives batching rules)
from .factors import FactorRule, RuleError, factor_rule
from .registry import OPS, OpDef, define_batch, define_vjp, get_op, register_op, register_rule

__all__ = ["FactorRule", "OPS", "OpDef", "RuleError", "factor_rule", "define_batch", "define_vjp", "get_op", "register_op", "register_rule"]
