"""The tables and lines ``run`` and ``compare`` print: the verdict, communication per (op,
collective, mesh axes) with the alpha-beta time, and strategies side by side. Every number
carries its unit (``report.units``: KiB/MiB, us/ms)."""

from __future__ import annotations

from typing import Sequence

from rich.table import Table
from rich.text import Text

from simshard.report.memory import fmt_devices
from simshard.units import fmt_bytes, fmt_ratio, fmt_seconds

from .summary import StrategySummary


def verdict(s: StrategySummary, result, exact: bool) -> Text:
    """One line (two when something differs): verified how, or the first divergence; for a program
    imported from JAX or PyTorch, a line per output compared with the framework's own."""
    text = _verdict(s, result, exact)
    for check in getattr(getattr(result, "verify", None), "framework", ()):
        text.append(f"\n  {check.describe()}")
    return text


def _verdict(s: StrategySummary, result, exact: bool) -> Text:
    if s.error is not None:
        return Text.assemble(("the run could not finish: ", "bold red"), s.error)
    if s.estimated:
        return Text.assemble(("estimated, not run: ", "bold cyan"), "the communication and memory a run records, "
                             "from the partitioned schedules without data (nothing verified)")
    if result is not None and s.bitwise:
        v = result.verify
        ops = f"; {len(v.op_checks)} ops checked one by one" if v.op_checks else ""
        return Text.assemble(("verified: ", "bold green"), f"bitwise identical to plain numpy "
                             f"({len(v.checks)} output{'s' * (len(v.checks) != 1)}{ops})")
    if s.verified:  # differs only by reassociated float sums, and --exact was not given
        return Text.assemble(("verified up to reassociation: ", "bold yellow"),
                             f"outputs differ by at most {s.max_ulp} ULP because a sharded float sum added in "
                             f"another order (run with --exact to require identical bits)\n  {s.first_divergence}")
    why = "not bitwise identical (--exact)" if exact and result is not None and result.verify.ok else "FAILED"
    return Text.assemble(("verification " + why + ": ", "bold red"), s.first_divergence or "outputs differ")


def comm_table(comm, topology) -> Table:
    """Collectives grouped by source op, kind and mesh axes: bytes moved beside the analytic
    minimum, and the estimated time under ``topology``."""
    times = comm.estimate(topology).by(("op", "kind", "axis"))
    t = Table(title="communication (bytes sent by all devices; time: alpha-beta estimate)", title_justify="left")
    t.add_column("op")
    t.add_column("collective", no_wrap=True)
    t.add_column("axes", no_wrap=True)
    for col in ("count", "messages", "bytes", "minimum", "ratio", "est. time"):
        t.add_column(col, justify="right", no_wrap=True)
    for row in comm.summary(("op", "kind", "axis")):
        t.add_row(Text(row["op"]), row["kind"], Text(row["axis"]), str(row["collectives"]), str(row["messages"]),
                  fmt_bytes(row["sent"]), fmt_bytes(row["minimum"]), fmt_ratio(row["received"], row["minimum"]),
                  fmt_seconds(times[(row["op"], row["kind"], row["axis"])]))
    t.add_section()
    t.add_row("total", "", "", str(comm.collectives), str(comm.total_messages),
              fmt_bytes(comm.total_bytes), fmt_bytes(comm.total_min_bytes),
              fmt_ratio(comm.total_received, comm.total_min_bytes), fmt_seconds(comm.estimate(topology).total))
    return t


def memory_table(memory) -> Table:
    """Peak live bytes per device, with where it peaks: a row per class of devices with equal
    figures (``MemoryReport.classes``; 8,192 devices of two kinds are two rows), largest first."""
    t = Table(title="peak memory per device", title_justify="left")
    for col, just in (("devices", "left"), ("inputs", "right"), ("peak", "right"), ("at", "left")):
        t.add_column(col, justify=just, no_wrap=just == "right")
    for c in sorted(memory.classes, key=lambda c: (-c.memory.peak_bytes, min(c.devices))):
        d = c.memory
        at = "inputs" if d.peak_position < 0 else d.peak_source
        t.add_row(Text(fmt_devices(c.devices)), fmt_bytes(d.input_bytes), fmt_bytes(d.peak_bytes), Text(at))
    return t


def step_lines(s: StrategySummary) -> list[str]:
    """An estimate's times (compute, communication, exposed, step), how its collectives run, its
    memory verdict and its idle devices, a line each."""
    if not s.estimated:
        return []
    lines = []
    if s.step_s is not None:
        lines.append(f"step {fmt_seconds(s.step_s)}: compute {fmt_seconds(s.compute_s)}, communication "
                     f"{fmt_seconds(s.estimated_time_s)} ({fmt_seconds(s.exposed_comm_s)} exposed: nothing overlaps)")
    else:
        lines.append(f"communication {fmt_seconds(s.estimated_time_s)} (no compute or step time: the topology "
                     "names no device; add \"device\": \"h100\")")
    if s.algorithms:
        lines.append("collectives as NCCL runs them: " + ", ".join(f"{k} {fmt_seconds(v)}" for k, v in s.algorithms.items()))
    lines.append(f"memory: {s.memory_verdict}")
    if s.idle:
        lines.append(s.idle)
    return lines


def _opt(value, fmt) -> str:
    return "-" if value is None else fmt(value)


def cheapest_mark(s: StrategySummary) -> str:
    """`` *`` after the cheapest strategy's name, `` *~`` when it verified only up to
    reassociation (its floats differ from plain numpy's, within the ULP shown), else ``""``."""
    if not s.cheapest:
        return ""
    return " *~" if s.verified and not s.bitwise and not s.estimated else " *"


def compare_table(summaries: Sequence[StrategySummary]) -> Table:
    """Strategies side by side; the cheapest marked with ``*`` (``*~`` when it is not bitwise)."""
    axes = sorted({a for s in summaries for a in (s.bytes_per_axis or {})})
    meshes = {tuple(s.mesh.items()) for s in summaries}
    owns = [s.program_cost for s in summaries if s.program_cost is not None]
    caption = ("* cheapest: least step time (else estimated communication time) of the verified or estimated "
               "(then fewest bytes, least memory); strategies ranked by it"
               if not owns else f"* cheapest of its group by the program's {owns[0]['model']} cost (table below), "
               "then least estimated time, fewest bytes, least memory")
    if any(s.step_s is not None for s in summaries):
        caption += ("\nexposed: the communication not hidden behind compute; a traced estimate models no "
                    "overlap, so it is all of it and step = compute + communication")
    inexact = [s for s in summaries if cheapest_mark(s) == " *~"]
    if inexact:
        caption += "".join(f"\n*~ {s.name} is the cheapest but not bitwise: verified up to reassociation of float "
                           f"sums, {s.max_ulp} ULP at most (--exact ranks only bitwise strategies)" for s in inexact)
    t = Table(title="strategies side by side", title_justify="left", caption=caption, caption_justify="left")
    t.add_column("strategy")
    if len(meshes) > 1:
        t.add_column("mesh")
    t.add_column("verified", no_wrap=True)
    t.add_column("bytes", justify="right", no_wrap=True)
    for a in axes:
        t.add_column(Text(f"over {a}" if a != "-" else "no axis"), justify="right", no_wrap=True)
    stepped = any(s.step_s is not None for s in summaries)
    for col in (("compute", "comm.", "exposed", "step") if stepped else ("est. time",)) + ("peak memory", "collectives"):
        t.add_column(col, justify="right", no_wrap=True)
    order = sorted(summaries, key=lambda s: (s.step_s is None, s.step_s or 0.0)) if stepped else summaries
    for s in order:  # by step time where there is one: the ranking
        if s.error is not None:
            ok = Text("OUT OF MEMORY", style="bold red")
        elif s.estimated:
            ok = Text("estimated", style="cyan")
        elif s.bitwise:
            ok = Text("bitwise", style="green")
        elif s.verified:
            ok = Text(f"{s.max_ulp} ULP", style="yellow")
        else:
            ok = Text("FAILED", style="bold red")
        name = Text(s.name + cheapest_mark(s), style="bold green" if s.cheapest else "")
        cells = [name]
        if len(meshes) > 1:
            cells.append(",".join(f"{a}={n}" for a, n in s.mesh.items()))
        cells += [ok, _opt(s.total_bytes, fmt_bytes)]
        cells += [_opt((s.bytes_per_axis or {}).get(a, 0) if s.bytes_per_axis is not None else None, fmt_bytes)
                  for a in axes]
        if stepped:
            cells += [_opt(s.compute_s, fmt_seconds), _opt(s.estimated_time_s, fmt_seconds),
                      _opt(s.exposed_comm_s, fmt_seconds), _opt(s.step_s, fmt_seconds)]
        else:
            cells.append(_opt(s.estimated_time_s, fmt_seconds))
        fits = "" if s.memory_fits is not False else " (does not fit)"
        cells += [_opt(s.max_peak_memory_bytes, fmt_bytes) + fits, _opt(s.collectives, str)]
        t.add_row(*cells)
    return t


def program_cost_table(summaries: Sequence[StrategySummary]) -> Table | None:
    """The program's own cost of each strategy (``program_cost``), grouped (strategies of a group
    compute the same thing) and ranked within each group; None when the program has none."""
    rows = [s for s in summaries if s.program_cost is not None]
    if not rows:
        return None
    model = rows[0].program_cost["model"]
    cols = list(dict.fromkeys(k for s in rows for k in s.program_cost["values"]))
    t = Table(title=f"{model} cost, ranked within each group", title_justify="left")
    for col, just in (("group", "left"), ("rank", "right"), ("strategy", "left")):
        t.add_column(col, justify=just)
    for col in cols:
        t.add_column(col, justify="right")
    groups = list(dict.fromkeys(s.program_cost["group"] for s in rows))
    for g in groups:
        members = sorted((s for s in rows if s.program_cost["group"] == g),
                         key=lambda s: (s.program_cost["rank"] is None, s.program_cost["rank"] or 0))
        for k, s in enumerate(members):
            own = s.program_cost
            rank = "-" if own["rank"] is None else f"{own['rank']}/{len(members)}"
            name = Text(s.name + cheapest_mark(s), style="bold green" if s.cheapest else "")
            t.add_row(g if k == 0 else "", rank, name, *(_opt(own["values"].get(c), str) for c in cols))
    return t
