"""``compare --plot``: bytes and estimated time per strategy, two bar charts in one PNG.

What is drawn is decided by ``plot_data`` without matplotlib (each bar's height in the panel's
unit, its label, colour, hatching and status), so that it can be checked without drawing;
``plot_strategies`` only draws it. matplotlib is an optional extra (``pip install simshard[plot]``):
only this drawing needs it.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple, Sequence

from simshard.units import fmt_bytes, fmt_seconds

from .errors import UsageError
from .summary import StrategySummary

BYTE_UNITS = ((1024.0 ** 4, "TiB"), (1024.0 ** 3, "GiB"), (1024.0 ** 2, "MiB"), (1024.0, "KiB"), (1.0, "B"))
TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


class Status(Enum):
    """What a strategy's bar stands for, shown by its colour and hatching and named in the legend."""

    CHEAPEST = ("cheapest", "tab:green", "")
    VERIFIED = ("verified", "tab:blue", "")
    ESTIMATED = ("estimated, not run", "lightsteelblue", "..")
    FAILED = ("failed", "tab:red", "//")

    @property
    def legend(self) -> str:
        return self.value[0]

    @property
    def color(self) -> str:
        return self.value[1]

    @property
    def hatch(self) -> str:
        """matplotlib's hatch pattern ("" for none)."""
        return self.value[2]


class Panel(NamedTuple):
    """One bar chart: its y-axis label (with the unit), each bar's height in that unit and the
    text above it (the value, formatted as the tables print it; "-" where there is none)."""

    ylabel: str
    unit: str
    heights: tuple[float, ...]
    labels: tuple[str, ...]


class PlotData(NamedTuple):
    """Everything ``plot_strategies`` draws: the title, one name and status per strategy, and the
    two panels (bytes sent, estimated time)."""

    title: str
    names: tuple[str, ...]
    statuses: tuple[Status, ...]
    panels: tuple[Panel, Panel]


def status_of(summary: StrategySummary) -> Status:
    """Cheapest (of the verified or estimated), verified, estimated without running, or failed."""
    if summary.error is not None or not (summary.verified or summary.estimated):
        return Status.FAILED
    if summary.cheapest:
        return Status.CHEAPEST
    return Status.ESTIMATED if summary.estimated else Status.VERIFIED


def unit_for(values: Sequence[float], units: Sequence[tuple[float, str]]) -> tuple[float, str]:
    """The largest unit (scale, name) in which the largest value is at least 1, so that the axis
    reads 1 to 1000-odd of it, never raw bytes or seconds with a 1e10 offset."""
    top = max((abs(v) for v in values), default=0.0)
    for scale, name in units:
        if top >= scale:
            return scale, name
    return units[-1]


def _panel(what: str, values: Sequence[float | None], units, fmt, statuses: Sequence[Status]) -> Panel:
    """Bars in the unit that suits the largest value, labelled as the tables print them; a run
    that failed before it had a value says so above its empty bar."""
    scale, unit = unit_for([v for v in values if v is not None], units)
    missing = ["failed" if s is Status.FAILED else "-" for s in statuses]
    return Panel(f"{what} ({unit})", unit, tuple((v or 0.0) / scale for v in values),
                 tuple(none if v is None else fmt(v) for v, none in zip(values, missing)))


def plot_data(program: str, summaries: Sequence[StrategySummary]) -> PlotData:
    """What ``compare --plot`` draws for ``summaries``, in the units that suit their values."""
    statuses = tuple(status_of(s) for s in summaries)
    every_estimated = bool(summaries) and all(s.estimated for s in summaries)
    title = f"{program}: strategies compared" + (", estimated without running" if every_estimated else "")
    return PlotData(
        title=title,
        names=tuple(s.name for s in summaries),
        statuses=statuses,
        panels=(_panel("bytes sent", [s.total_bytes for s in summaries], BYTE_UNITS, fmt_bytes, statuses),
                _panel("estimated time", [s.estimated_time_s for s in summaries], TIME_UNITS, fmt_seconds, statuses)),
    )


def require_matplotlib():
    """matplotlib (Agg backend, no display needed), or exit 2 saying how to install it."""
    try:
        import matplotlib  # an optional extra (simshard[plot]), and slow to import: only for --plot
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install simshard[plot]") from None
    matplotlib.use("Agg")
    return matplotlib


def draw(data: PlotData):
    """The matplotlib figure of ``data`` (the caller closes it): two panels side by side, the
    statuses present in a legend below."""
    require_matplotlib()
    import matplotlib.pyplot as plt  # the optional extra, loaded above only when --plot asks
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, 2, figsize=(max(7.0, 2.2 * len(data.names) + 3), 4.2))
    for ax, panel in zip(axes, data.panels):
        bars = ax.bar(range(len(data.names)), panel.heights, color=[s.color for s in data.statuses],
                      edgecolor="black", linewidth=0.5)
        for bar, status in zip(bars, data.statuses):
            bar.set_hatch(status.hatch)
        ax.bar_label(bars, labels=list(panel.labels), fontsize=8, padding=2)
        ax.set_xticks(range(len(data.names)), data.names, rotation=30, ha="right")
        ax.set_ylabel(panel.ylabel)
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        ax.margins(y=0.18)
    shown = [s for s in Status if s in data.statuses]
    fig.legend(handles=[Patch(facecolor=s.color, hatch=s.hatch, edgecolor="black", label=s.legend) for s in shown],
               loc="lower center", ncol=len(shown), fontsize=8, frameon=False)
    fig.suptitle(data.title)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def plot_strategies(path: str, program: str, summaries: Sequence[StrategySummary]) -> None:
    """Two panels: total bytes and estimated time per strategy, each in the unit that suits it;
    the cheapest in green, failed strategies red and hatched, estimated ones pale and dotted."""
    fig = draw(plot_data(program, summaries))
    import matplotlib.pyplot as plt  # loaded by draw already (the optional extra)

    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise UsageError(f"--plot: cannot write {path!r}: {e.strerror}") from None
    finally:
        plt.close(fig)
