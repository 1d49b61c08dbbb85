"""Moved to ``simshard.partition.reshard.greedy`` (the reshard planner is one package now).

This module re-exports its public names.
"""

from .reshard.greedy import Move, next_move, pending_plan  # noqa: F401

__all__ = ["Move", "next_move", "pending_plan"]
