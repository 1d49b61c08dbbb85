"""``simshard`` / ``python -m simshard``: the command line (``simshard.cli``; docs/cli.md).

With no command it runs the main job (``simshard mlp``): a Megatron-sharded MLP on the device
mesh, verified bit for bit, with its communication and memory tables.
"""

from __future__ import annotations

import sys

from ._checkout import use_checkout_packages


def main(argv: list[str] | None = None) -> int:
    """The console entry point (pyproject ``[project.scripts]``); returns the exit code."""
    use_checkout_packages()
    from .cli import main as cli_main  # only after use_checkout_packages picked runtime/ and programs/

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
