"""The traces in progress, innermost last: what an op called inside a traced function records into.

A trace is any object with ``bind(op, *operands, **params)`` and a ``mesh``; the tracing layer
pushes one while it runs a function (``simshard.tracing.state``). Keeping the stack here, beside
the IR it builds, lets the op registry apply an op (``OpDef.__call__``) without importing tracing.
"""

from __future__ import annotations

import contextlib

from ..errors import TraceError

_STACK: list = []


def current():
    """The innermost trace in progress, or None outside every trace."""
    return _STACK[-1] if _STACK else None


def innermost(what: str = "simshard.numpy functions"):
    """The innermost trace; a TraceError saying ``what`` needs one when none is in progress."""
    if not _STACK:
        raise TraceError(f"no trace in progress: {what} work inside ss.jit / ss.trace")
    return _STACK[-1]


@contextlib.contextmanager
def tracing(trace):
    """Make ``trace`` the innermost trace for the duration of the block."""
    _STACK.append(trace)
    try:
        yield trace
    finally:
        _STACK.pop()
