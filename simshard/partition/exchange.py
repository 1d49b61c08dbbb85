"""Moved to ``simshard.partition.reshard.exchange`` (the reshard planner is one package now).

This module re-exports its public names.
"""

from .reshard.exchange import ExchangeData, Round, plan_exchange  # noqa: F401
from .reshard.exchange_emit import emit_exchange  # noqa: F401

__all__ = ["ExchangeData", "Round", "emit_exchange", "plan_exchange"]
