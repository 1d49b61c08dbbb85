"""The ambient mesh: ``ss.set_mesh(mesh)`` / ``with ss.use_mesh(mesh):``, read by tracing."""

from __future__ import annotations

import contextlib
import threading

_state = threading.local()


def get_mesh():
    """The mesh set by set_mesh / use_mesh, or None."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


def set_mesh(mesh):
    """Make ``mesh`` the ambient mesh (also usable as a context manager, like jax.set_mesh)."""
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    previous = list(stack)
    stack.append(mesh)

    @contextlib.contextmanager
    def restore():
        try:
            yield mesh
        finally:
            _state.stack = previous

    return restore()


@contextlib.contextmanager
def use_mesh(mesh):
    with set_mesh(mesh):
        yield mesh
