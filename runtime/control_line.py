"""Moved to ``simshard.runtime.wire.control_line`` (the host's end to ``wire.control_server``): this
module re-exports their public names for old imports."""

from .wire.control_line import (INLINE_MAX, ControlLine, HostError, Outcome, OutcomeKind, Payload, RawAnswer, Request,
                                wait)
from .wire.control_server import ControlServer

__all__ = ["INLINE_MAX", "ControlLine", "ControlServer", "HostError", "Outcome", "OutcomeKind", "Payload", "RawAnswer",
           "Request", "wait"]
