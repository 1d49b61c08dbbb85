import json
from pathlib import Path

DATA = Path(__file__).parent / "data"


def load_cases(name: str) -> list[dict]:
    """Conformance cases recorded from the real systems (one test id per case)."""
    return json.loads((DATA / name).read_text())["cases"]
