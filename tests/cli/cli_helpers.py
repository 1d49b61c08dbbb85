"""Running the command for the CLI tests: through the real entry point in a subprocess
(``python -m simshard``, the checkout on PYTHONPATH, the local backend unless asked), or in this
process through ``main(argv)`` for the many cases that only need the logic."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
DATA = Path(__file__).parent / "data"


@dataclass
class Ran:
    code: int
    out: str
    err: str


def simshard(*args: str, backend: str | None = "local", timeout: float = 120, cwd=None) -> Ran:
    """``python -m simshard ARGS`` as a user runs it; stdout and stderr captured (not a terminal)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    if backend is not None:
        env["SIMSHARD_BACKEND"] = backend
    p = subprocess.run([sys.executable, "-m", "simshard", *args], capture_output=True, text=True, env=env,
                       timeout=timeout, cwd=cwd or ROOT)
    return Ran(p.returncode, p.stdout, p.stderr)


def main_in_process(capsys, *args: str) -> Ran:
    """``main(argv)`` in this process (the suite's local backend), output captured."""
    from simshard.__main__ import main

    code = main(list(args))
    captured = capsys.readouterr()
    return Ran(code, captured.out, captured.err)


def doc_schema() -> dict:
    """The JSON Schema of docs/json-schema.md: the first ```json block under '## Schema'."""
    text = (ROOT / "docs" / "json-schema.md").read_text()
    section = text.split("## Schema", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
