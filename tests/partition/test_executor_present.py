"""The partition tests run every schedule on the real local executor too (after the runtime merge)."""

from .helpers import run_local


def test_run_local_is_available():
    assert run_local is not None
