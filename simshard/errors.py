"""Errors users read: each names the rule that broke and where."""

from __future__ import annotations


class ShardingError(ValueError):
    """A sharding, placement list or mesh that breaks a rule of the model.

    ``rule`` is a short stable id (e.g. ``"duplicate-axis"``); ``axis`` and ``dim`` say where,
    when the rule is about one axis or one tensor dimension.
    """

    def __init__(self, rule: str, message: str, *, axis: str | None = None, dim: int | None = None):
        self.rule = rule
        self.axis = axis
        self.dim = dim
        self.detail = message
        super().__init__(f"{rule}: {message}")


class ReplicaMismatchError(ValueError):
    """Shards that should hold the same data (replicas) differ bit for bit."""


class TraceError(TypeError):
    """A numpy call or Python operation that cannot be traced, named with where it happened."""


class UnsupportedAttributeError(TraceError, AttributeError):
    """An ndarray method or attribute a traced array does not have: a TraceError naming it, and an
    AttributeError too, so ``hasattr`` and duck typing keep working."""
