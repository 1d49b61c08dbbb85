"""Issue 33's goals read off ``peers.py``'s rows: each goal, the rows it needs, their ratio to
torch gloo in the same run, and whether it is met.

It reads one run's JSON (``peers.py --json FILE``) or several (a lent machine measures the rows
in more than one call: each row is taken from the first file that has it). A row whose messages
between devices went by Ray calls, or whose run calls did for any reason but inputs too large for
the control line, measured no sockets data plane: its goal is not met, and the verdict says why.
The last goal (the same figures with uvloop hidden) reads the rows ``peers.py --rows loops``
measures on both event loops in one run, within ``SAME_WITHIN``.

    python benchmarks/goals.py OUT/pair.json OUT/mlp.json OUT/loops.json ...
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

from simshard.runtime.ray.driver.lines import WhyRayCalls

sys.path.insert(0, str(Path(__file__).parent))
import peer_table  # noqa: E402  (beside this file)
import peers  # noqa: E402  (the collectives it measures, the loops it compares)

KINDS = tuple(k.replace("_", "-") for k in peers.KINDS)  # as peers.py's row labels write them
SAME_WITHIN = 1.10  # "the same figures": uvloop's at most this many times the figure without it
MLP = "Megatron MLP {}, 2x4, inputs on the devices, Ray as this machine's defaults give it"
HOP = "one message in flight (2 devices, time per message)"
LARGE_INPUTS = WhyRayCalls.LARGE_INPUTS.value  # the one reason a run's calls go as Ray calls on the data plane's rows


class Goal(NamedTuple):
    """A goal: its words, the rows it reads, the ratio to gloo each must stay under (or at)."""

    name: str
    rows: tuple[str, ...]
    bound: float
    strictly: bool = False  # "ahead of": below the bound, not at it


class Verdict(NamedTuple):
    """A goal as one set of runs measured it: each row's ratio (None where the row is missing or
    had no figure), whether it is met, and why not."""

    goal: str
    ratios: tuple[tuple[str, float | None], ...]
    met: bool
    why: str = ""


GOALS = (
    Goal("one message in flight no slower than gloo", (HOP,), 1.0),
    Goal("1 MiB collectives no slower than gloo", tuple(f"1 MiB {k}, 8 ranks" for k in KINDS), 1.0),
    Goal("64 MiB collectives, all four ahead of gloo", tuple(f"64 MiB {k}, 8 ranks" for k in KINDS), 1.0, True),
    Goal("Megatron MLP 128x256x1024 within 1.5x gloo", (MLP.format("128x256x1024"),), 1.5),
    Goal("Megatron MLP 512x1024x4096 no slower than gloo", (MLP.format("512x1024x4096"),), 1.0),
)


def rows_of(results: Sequence[Mapping]) -> dict[str, Mapping]:
    """Row label -> the row, the first result holding it winning."""
    out: dict[str, Mapping] = {}
    for result in results:
        for row in result["rows"]:
            out.setdefault(row["work"], row)
    return out


def off_the_data_plane(row: Mapping) -> str:
    """Why ``row`` measured no sockets data plane (its messages, or its run calls for another
    reason than large inputs, by Ray calls), or "" where it did."""
    used = row.get("ray ran on") or ""
    for routes in re.findall(r"messages between devices: ([^(;]*)", used):  # one per simshard run of the row
        if re.search(r"\bray \d", routes):
            return f"its messages went by Ray calls ({used})"
    for reason in re.findall(r"Ray actor calls \(([^)]*)\)", used):
        if reason != LARGE_INPUTS:
            return f"its run calls went by Ray calls: {reason}"
    return ""


def ratio(row: Mapping | None) -> float | None:
    """simshard on Ray over torch gloo, where both are figures (``peer_table.ratio``)."""
    return None if row is None else peer_table.ratio(row.get("simshard ray"), row.get("torch gloo"))


def verdict(goal: Goal, rows: Mapping[str, Mapping]) -> Verdict:
    """``goal`` as ``rows`` measured it: met where every row it needs has a figure, measured the
    sockets data plane and keeps within the bound."""
    ratios = tuple((label, ratio(rows.get(label))) for label in goal.rows)
    missing = [label for label, r in ratios if r is None]
    if missing:
        return Verdict(goal.name, ratios, False, f"no figure for {', '.join(missing)}")
    off = [f"{label}: {why}" for label in goal.rows if (why := off_the_data_plane(rows[label]))]
    if off:
        return Verdict(goal.name, ratios, False, "; ".join(off))
    met = all(r < goal.bound if goal.strictly else r <= goal.bound for _, r in ratios)
    return Verdict(goal.name, ratios, met)


def uvloop_verdict(rows: Mapping[str, Mapping]) -> Verdict:
    """``peers.py --rows loops``: each row measured on Ray's default loop over the same row with
    uvloop hidden, in the same rounds of the same run, within ``SAME_WITHIN``. Met only where the
    rows say they ran on the loops compared (``peers.routes_used``: "on uvloop", "on asyncio"),
    so that a machine without uvloop, or a run whose uvloop was not hidden, cannot pass for one."""
    name = "with uvloop installed, the same figures as without it"
    default, hidden = peers.LOOPS
    ratios, wrong = [], []
    for label, row in rows.items():
        if not label.endswith(f", {default}"):
            continue
        base = label[:-len(default) - 2]
        other = rows.get(f"{base}, {hidden}", {})
        ratios.append((base, peer_table.ratio(row.get("simshard ray"), other.get("simshard ray"))))
        wrong += [f"{base} ran on {loop} with {side}" for side, r, meant in
                  ((default, row, "uvloop"), (hidden, other, "asyncio")) if (loop := event_loop(r)) != meant]
    if not ratios:
        return Verdict(name, (), False, "no rows of both loops (peers.py --rows loops)")
    wrong += [f"no figure for {base}" for base, r in ratios if r is None]
    if wrong:
        return Verdict(name, tuple(ratios), False, "; ".join(wrong))
    return Verdict(name, tuple(ratios), all(r <= SAME_WITHIN for _, r in ratios))


def event_loop(row: Mapping) -> str | None:
    """The event loop a row's device processes ran on, as ``peers.routes_used`` says it."""
    found = re.search(r"processes on (\w+)", row.get("ray ran on") or "")
    return found and found.group(1)


def report(verdicts: Sequence[Verdict], results: Sequence[Mapping]) -> str:
    """The verdicts as lines of text, with the machines the runs came from."""
    machines = sorted({f"{r.get('cores', '?')} cores, {r.get('date', '?')}, {r.get('rounds', '?')} round(s)"
                       + (", toy sizes (--quick)" if r.get("quick") else "") for r in results})
    lines = [f"issue 33's goals, from {len(results)} run(s) on: {'; '.join(machines)}"]
    for v in verdicts:
        lines.append(f"{'MET    ' if v.met else 'NOT MET'} {v.goal}" + (f" ({v.why})" if v.why else ""))
        lines.extend(f"          {label}: {'-' if r is None else f'{r:.2f}x'}" for label, r in v.ratios)
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="peers.py --json files")
    a = ap.parse_args(argv)
    results = [json.loads(p.read_text()) for p in a.results]
    rows = rows_of(results)
    print(report([verdict(g, rows) for g in GOALS] + [uvloop_verdict(rows)], results))


if __name__ == "__main__":
    main()
