"""``compare --plot``: bytes and estimated time per strategy, two bar charts in one PNG.

matplotlib is an optional extra (``pip install simshard[plot]``): only this drawing needs it.
"""

from __future__ import annotations

from typing import Sequence

from simshard.units import fmt_bytes, fmt_seconds

from .errors import UsageError
from .summary import StrategySummary


def require_matplotlib():
    """matplotlib (Agg backend, no display needed), or exit 2 saying how to install it."""
    try:
        import matplotlib  # an optional extra (simshard[plot]), and slow to import: only for --plot
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install simshard[plot]") from None
    matplotlib.use("Agg")
    return matplotlib


def plot_strategies(path: str, program: str, summaries: Sequence[StrategySummary]) -> None:
    """Two panels: total bytes (KiB) and estimated time (us) per strategy; the cheapest in
    green, failed strategies hatched and labelled."""
    require_matplotlib()
    import matplotlib.pyplot as plt  # the optional extra, loaded above only when --plot asks

    names = [s.name + (" *" if s.cheapest else "") for s in summaries]
    colors = ["tab:green" if s.cheapest else ("tab:red" if not s.verified else "tab:blue") for s in summaries]
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(max(6.0, 1.6 * len(summaries) + 3), 3.6))
    panels = (
        (ax_b, [s.total_bytes or 0 for s in summaries], 1024.0, "bytes sent (KiB)",
         [fmt_bytes(s.total_bytes) if s.total_bytes is not None else "-" for s in summaries]),
        (ax_t, [s.estimated_time_s or 0.0 for s in summaries], 1e-6, "estimated time (us)",
         [fmt_seconds(s.estimated_time_s) if s.estimated_time_s is not None else "-" for s in summaries]),
    )
    for ax, values, scale, label, texts in panels:
        bars = ax.bar(names, [v / scale for v in values], color=colors)
        for bar, s in zip(bars, summaries):
            if not s.verified:
                bar.set_hatch("//")
        ax.bar_label(bars, labels=[t if s.verified else f"{t} (failed)" for t, s in zip(texts, summaries)], fontsize=8)
        ax.set_ylabel(label)
        ax.margins(y=0.15)
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle(f"{program}: strategies compared (* cheapest)")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise UsageError(f"--plot: cannot write {path!r}: {e.strerror}") from None
    finally:
        plt.close(fig)
