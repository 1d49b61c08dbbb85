"""``simshard`` / ``python -m simshard``: the command line (``simshard.cli``; docs/cli.md).

With no command it runs the main job (``simshard mlp``): a Megatron-sharded MLP on the device
mesh, verified bit for bit, with its communication and memory tables.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """The console entry point (pyproject ``[project.scripts]``); returns the exit code."""
    from ._checkout import use_checkout_packages

    use_checkout_packages()
    from .cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
