"""Moved to ``simshard.partition.reshard.plan`` (the reshard planner is one package now).

This module re-exports its public names.
"""

from .reshard.plan import (  # noqa: F401
    Group, ReshardPlan, ShapeView, Shapes, Step, axes_label, block_size, by_block, by_shape_class, common_count,
    largest_block, layout_of, local_shapes, shapes_of, span, split_even,
)

__all__ = [
    "Group", "ReshardPlan", "ShapeView", "Shapes", "Step", "axes_label", "block_size", "by_block", "by_shape_class",
    "common_count", "largest_block", "layout_of", "local_shapes", "shapes_of", "span", "split_even",
]
