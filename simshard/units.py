"""Byte and time units for report tables: binary prefixes for sizes (KiB = 1024 B), like XLA's
dumps; decimal ones for link rates (GB/s = 1e9 B/s), as links are quoted."""

from __future__ import annotations

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n: float) -> str:
    """``1536 -> '1.50 KiB'``; whole bytes below 1 KiB (``'12 B'``)."""
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in _BYTE_UNITS:
        if n < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{sign}{int(n)} B" if unit == "B" else f"{sign}{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_seconds(t: float) -> str:
    """``2.5e-6 -> '2.50 us'``; ``0 -> '0 s'``."""
    t = float(t)
    if t == 0:
        return "0 s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(t) >= scale or unit == "ns":
            return f"{t / scale:.2f} {unit}"
    raise AssertionError("unreachable")


def fmt_rate(bytes_per_second: float) -> str:
    """Link bandwidth in decimal units, as vendors quote links: ``25e9 -> '25.00 GB/s'``."""
    r = float(bytes_per_second)
    for scale, unit in ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if abs(r) >= scale:
            return f"{r / scale:.2f} {unit}"
    return f"{r:.0f} B/s"


def fmt_ratio(num: float, den: float) -> str:
    """``moved / minimum``: '1.00', or '-' when both are zero, 'inf' when only the minimum is."""
    if den == 0:
        return "-" if num == 0 else "inf"
    return f"{num / den:.2f}"


def plain_text(*renderables, width: int = 100) -> str:
    """Rich renderables (tables, text) as plain text without colour: ``str()`` of every report."""
    import io

    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    for r in renderables:
        console.print(r)
    return out.getvalue()
