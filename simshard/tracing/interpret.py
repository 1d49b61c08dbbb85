"""Evaluate a Program on whole arrays (``simshard.ops.evaluate``: the registry's kernels, one op
at a time), re-exported where tracing's users look for it."""

from ..ops.evaluate import evaluate

__all__ = ["evaluate"]
