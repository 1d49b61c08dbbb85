"""Errors of explicit mode, named and worded as JAX words them.

``ShardingTypeError`` is a sharding rule refusing an op at trace time (JAX's
``jax.sharding.ShardingTypeError``). ``DuplicateSpecError`` is a ``P`` naming one mesh axis on two
dimensions. Both are raised while tracing, before anything runs.
"""

from __future__ import annotations

from ...errors import ShardingError


class ShardingTypeError(Exception):
    """An op whose operands' sharding types admit no result type (or an ambiguous one).

    ``op`` names the op; the message names the operands' types and, where JAX does, asks for
    ``out_sharding=``."""

    def __init__(self, message: str, *, op: str | None = None):
        super().__init__(message)
        self.op = op


class DuplicateSpecError(ShardingError):
    """``P("X", "X")``: one mesh axis on two dimensions of one spec."""

    def __init__(self, message: str, axis: str | None = None):
        super().__init__("duplicate-axis", message, axis=axis)

    def __str__(self) -> str:  # JAX prints the bare message
        return self.detail
