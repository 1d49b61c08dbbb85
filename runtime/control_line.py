"""Moved to ``simshard.runtime.wire.control_line``: this module re-exports its public names for
old imports."""

from .wire.control_line import (INLINE_MAX, ControlLine, ControlServer, HostError, Outcome, OutcomeKind, Payload,
                                RawAnswer, Request, wait)

__all__ = ["INLINE_MAX", "ControlLine", "ControlServer", "HostError", "Outcome", "OutcomeKind", "Payload", "RawAnswer",
           "Request", "wait"]
