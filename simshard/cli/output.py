"""Where the command writes: results on stdout, errors and progress on stderr.

Progress (rich.progress) shows only on an interactive stderr and never with ``--quiet``, so
piped or captured output holds the results alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

from rich.console import Console, RenderHook
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 110  # piped output with COLUMNS unset: the width of rules and text; tables take their own


class _Console(Console):
    """A rich Console whose closed pipe (``simshard ... | head``) raises ``BrokenPipeError`` for
    the command to end on quietly (``cli.main``), where rich would exit with status 1."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


class NaturalTables(RenderHook):
    """Tables at their natural width, however narrow the console: piped output with COLUMNS
    unset (``simshard compare mlp | cat``) is read by people and scripts that want every cell
    whole, where rich would squeeze the columns to the console's width and cut the cells."""

    def __init__(self, console: Console):
        self.console = console

    def process_renderables(self, renderables: list) -> list:
        for renderable in renderables:
            if isinstance(renderable, Table) and renderable.width is None:
                wide = self.console.options.update_width(1 << 16)
                renderable.width = Measurement.get(self.console, wide, renderable).maximum
        return renderables


def stdout_closed() -> int:
    """The reader of stdout went away: send the rest to /dev/null and end with success."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


@dataclass
class Output:
    console: Console  # results (stdout)
    err: Console  # errors and progress (stderr)
    quiet: bool = False

    @staticmethod
    def create(quiet: bool = False) -> "Output":
        # piped output is not squeezed into 80 columns, its tables not at all (COLUMNS still decides when set)
        piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        console = _Console(file=sys.stdout, width=PIPED_WIDTH if piped else None, soft_wrap=True)
        if piped:
            console.push_render_hook(NaturalTables(console))
        return Output(console, Console(file=sys.stderr, soft_wrap=True), quiet)

    @property
    def live(self) -> bool:
        """Whether progress displays are shown."""
        return not self.quiet and self.err.is_terminal

    def print(self, *things, **kw) -> None:
        self.console.print(*things, **kw)

    def error(self, message: str) -> None:
        self.err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)

    def heading(self, bold: str, rest: str = "") -> None:
        """``bold: rest`` on one line, neither read as rich markup (names may hold brackets)."""
        self.console.print(Text.assemble((bold, "bold"), (f": {rest}" if rest else "")))

    def line(self, text: str) -> None:
        """Plain text, printed as it is (no markup, no highlighting)."""
        self.console.print(text, markup=False, highlight=False)

    @contextlib.contextmanager
    def spinner(self, text: str):
        """A transient spinner with elapsed time around one slow step (a run); yields
        ``stage(description)``, which shows ``text: description`` (``ss.run``'s ``progress=``)."""
        if not self.live:
            yield lambda description: None
            return
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # ~5 ms, only on a terminal

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=self.err, transient=True) as progress:
            task = progress.add_task(text, total=None)
            yield lambda description: progress.update(task, description=f"{text}: {description}")

    @contextlib.contextmanager
    def steps(self, text: str, total: int):
        """A transient bar over ``total`` steps; yields ``advance(description)`` to call before
        each step (it names the step and counts the previous one done; ``count=False`` only
        renames the current step, for a stage within it)."""
        if not self.live:
            yield lambda description, count=True: None
            return
        from rich.progress import (  # ~5 ms, only on a terminal (never piped, captured or --quiet)
            BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
        )

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=self.err, transient=True) as progress:
            task = progress.add_task(text, total=total)
            started = [False]

            def advance(description: str, count: bool = True) -> None:
                if count:
                    if started[0]:
                        progress.advance(task)
                    started[0] = True
                progress.update(task, description=f"{text}: {description}")

            yield advance
