"""Rewrite the example outputs of docs/cli.md from real runs (after a program or a report changes).

Run from the checkout: ``PYTHONPATH=. python tests/tools/update_cli_docs.py``. Every ```console
block that starts with ``$ simshard ...`` gets that command's output (stdout then stderr, local
backend, 110 columns); a block cut short with a ``...`` line keeps as many lines as before it.
tests/cli/test_cli_docs.py checks the page against the same runs.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "cli.md"


def output(command: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SIMSHARD_BACKEND="local", COLUMNS="110")
    p = subprocess.run([sys.executable, "-m", "simshard", *shlex.split(command)], capture_output=True, text=True,
                       env=env, cwd=ROOT)
    return [line.rstrip() for line in (p.stdout + p.stderr).rstrip("\n").splitlines()]


def update(match: re.Match) -> str:
    command, shown = match[1], match[2].rstrip("\n").splitlines()
    lines = output(command)
    if "..." in shown:
        lines = lines[: shown.index("...")] + ["..."]
    return "```console\n$ simshard " + command + "\n" + "\n".join(lines) + "\n```"


if __name__ == "__main__":
    text = PAGE.read_text()
    new = re.sub(r"```console\n\$ simshard (.*?)\n(.*?)```", update, text, flags=re.S)
    PAGE.write_text(new)
    print("docs/cli.md", "updated" if new != text else "unchanged")
