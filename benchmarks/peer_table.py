"""The peers table (``peers.py``'s rows as markdown, with their ratios) and its place in a
document between markers, rewritten on each run."""

from __future__ import annotations

import os
from pathlib import Path

MARK_BEGIN = "<!-- peers.py: begin -->"
MARK_END = "<!-- peers.py: end -->"


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return "-"
    return f"{v * 1e3:.1f} ms" if v >= 1e-3 else f"{v * 1e6:.0f} us"


def ratio(a, b) -> float | None:
    """``a / b`` where both are figures (a side may hold its error's words instead), else None."""
    figures = isinstance(a, (int, float)) and isinstance(b, (int, float))
    return a / b if figures and b > 0 else None


def _ratio(a, b) -> str:
    r = ratio(a, b)
    return "-" if r is None else f"{r:.2f}x"


COLUMNS = ("simshard ray", "simshard local", "torch gloo", "jax")


def row_line(r: dict) -> str:
    """One row of the table (``table``), as markdown."""
    cells = [_fmt(r[c]) for c in COLUMNS]
    return (f"| {r['work']} | " + " | ".join(cells) + f" | {_ratio(r['simshard ray'], r['torch gloo'])} | "
            f"{_ratio(r['simshard ray'], r['jax'])} | {r.get('ray ran on') or '-'} |")


def table(result: dict) -> str:
    cols = list(COLUMNS)
    lines = ["| work | " + " | ".join(cols) + " | ray / gloo | ray / JAX | simshard ray ran on |",
             "|---" * (len(cols) + 4) + "|"]
    lines.extend(row_line(r) for r in result["rows"])
    lines.append("")
    if result["per_message_round"]:
        lines.append("Messages in rounds (a chain of 200 tiny collective-permutes around 8 devices, time per round: "
                 "each device sends one message and receives one, 8 at once): " +
                 "; ".join(f"{k} {_fmt(v)}" + (f" ({result['per_message_used'][k]})" if result.get("per_message_used", {}).get(k)
                                                else "") for k, v in result["per_message_round"].items()) + ".")
        lines.append("")
    rounds = result.get("rounds", 1)
    lines.append(f"Measured {result['date']} on this machine ({os.cpu_count()} cores), load average "
                 f"{result['load']:.2f} when the run started, {result.get('load_end', float('nan')):.2f} when it ended"
                 f"{' (--quick sizes)' if result['quick'] else ''}; "
                 f"the collectives, Megatron and one-message rows: the best of {rounds} round{'s' * (rounds != 1)}, every side in each.")
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    doc = path.read_text()
    block = f"{MARK_BEGIN}\n{text}\n{MARK_END}"
    if MARK_BEGIN in doc:
        head, rest = doc.split(MARK_BEGIN, 1)
        doc = head + block + rest.split(MARK_END, 1)[1]
    else:
        doc = doc.rstrip() + "\n\n## Peers: torch gloo and JAX\n\n`benchmarks/peers.py`, one run:\n\n" + block + "\n"
    path.write_text(doc)
