"""Moved to ``simshard.runtime.wire.polling``: this module re-exports its public names for old
imports."""

from .wire.polling import SPIN_SECONDS, SWITCH_SECONDS, busy_poll, should_spin

__all__ = ["SPIN_SECONDS", "SWITCH_SECONDS", "busy_poll", "should_spin"]
