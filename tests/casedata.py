"""Conformance data recorded from real JAX, PyTorch and Shardy runs (tests/data/).

A module of its own, not conftest: several conftest.py files exist, and ``from conftest import``
would pick whichever was imported last.
"""

import json
from pathlib import Path

DATA = Path(__file__).parent / "data"


def load_cases(name: str) -> list[dict]:
    """Conformance cases recorded from the real systems (one test id per case)."""
    return json.loads((DATA / name).read_text())["cases"]
