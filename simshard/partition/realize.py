"""Moved to ``simshard.partition.reshard.realize`` (the reshard planner is one package now).

This module re-exports its public names.
"""

from .reshard.realize import realize, slice_positions  # noqa: F401
from .reshard.layout_checks import as_positions, positions  # noqa: F401
from .reshard.reductions import all_reduce_step, contribution_class, permute_pairs, scatter_step  # noqa: F401

__all__ = [
    "all_reduce_step", "as_positions", "contribution_class", "permute_pairs", "positions", "realize", "scatter_step",
    "slice_positions",
]
