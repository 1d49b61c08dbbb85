"""The ``simshard`` command line (docs/cli.md), one module per command:

* ``mainjob``: ``simshard`` / ``simshard mlp`` (the main job) and ``simshard demo``;
* ``run``: one strategy of a program, verified, with its communication and memory;
* ``compare``: strategies side by side (and ``plot``: the same as bar charts);
* ``autoshard``: the strategy ``ss.autoshard`` finds, printed with its cost breakdown, run or estimated;
* ``explain``: a strategy's propagated shardings and why;
* ``show``: the layout of one sharding in any of its three spellings.

Shared parts: ``options`` (meshes, shapes, topology, the run flags), ``quantities`` (sizes, rates
and times with their units, read in linear time and refused beyond sane bounds), ``programs`` (loading and
running programs by name), ``summary`` (the per-strategy record and the ``--json`` document),
``tables``, ``output`` (stdout / stderr, progress) and ``errors`` (exit codes).
"""

from __future__ import annotations

import argparse
import sys
import traceback

from . import autoshard, compare, explain, mainjob, run, show
from .errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_RUN, EXIT_USAGE, run_errors, user_errors
from .output import Output, stdout_closed

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simshard",
        description="Run sharded numpy programs on a device mesh, verify them bit for bit, report their cost. "
                    "With no command: the main job (simshard mlp).",
        epilog="exit codes: 0 verified, 1 verification failed, 2 bad input, 3 the run could not finish, "
               "4 an unexpected exception (traceback shown), 130 interrupted (Ctrl-C)",
    )
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    mainjob.add_parsers(sub)
    for command in (run, compare, autoshard, explain, show):
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit code (errors.py)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse has printed usage and the error (or the help) already
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    out = Output.create(quiet=getattr(args, "quiet", False))
    execute = getattr(args, "execute", mainjob.mlp_job)
    try:
        code = execute(args, out)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return code
    except KeyboardInterrupt:  # Ctrl-C: the runs' ``finally`` blocks have closed their actors on the way here
        out.err.print("interrupted", markup=False, highlight=False)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # ``simshard ... | head``: the reader has what it wanted
        return stdout_closed()
    except user_errors() as e:
        out.error(str(e))
        return EXIT_USAGE
    except run_errors() as e:
        out.error(f"the run could not finish: {type(e).__name__}: {e}")
        return EXIT_RUN
    except Exception:  # not a verdict: keep exit 1 for failed verifications, show where it broke
        traceback.print_exc()
        out.error("simshard stopped on the exception above (from the program's own code, or a bug in simshard)")
        return EXIT_INTERNAL
