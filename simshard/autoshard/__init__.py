"""Automatic sharding: ``autoshard`` searches the strategy of least estimated step time within a
memory budget, as an integer program over each op's factor strategies (``api``)."""

from .api import autoshard
from .strategy import AutoStrategy

__all__ = ["AutoStrategy", "autoshard"]
