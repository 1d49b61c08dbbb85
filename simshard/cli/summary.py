"""What ``run`` and ``compare`` report per strategy, as one flat record: the rows of their
tables and the ``strategies`` of their ``--json`` output (docs/json-schema.md).

The verdict follows ``--exact``: by default a strategy is *verified* when no op is wrong and the
outputs are bitwise equal to plain numpy, or differ only where an op's float sum was
legitimately reassociated by the sharding (reported with its ULP distance); with ``--exact``
only identical bits verify.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Sequence

import simshard
from simshard.report.verdict import idle_devices, memory_verdict

from .errors import EXIT_FAILED, EXIT_OK, EXIT_RUN, UsageError

SCHEMA_VERSION = 4  # 2: the estimated field, the estimate command, backend none; 3: program_cost; 4: step times, memory verdict


@dataclass(frozen=True)
class StrategySummary:
    name: str
    about: str
    mesh: dict  # axis -> size, major to minor
    devices: int
    verified: bool
    bitwise: bool
    max_ulp: int | None  # largest ULP distance of a differing float (None when none differ)
    first_divergence: str | None  # what went wrong first, or what was reassociated
    total_bytes: int | None  # sent by all devices (None: no report, the outputs did not assemble)
    min_bytes: int | None  # the analytic minimum of those collectives
    bytes_per_axis: dict | None  # mesh axes of the group ("x", "x,y", "-") -> bytes sent
    messages: int | None
    collectives: int | None  # distinct collective instructions
    estimated_time_s: float | None  # alpha-beta estimate under the topology
    peak_memory_bytes: list | None  # index: device id
    max_peak_memory_bytes: int | None
    wall_time_s: float  # how long the run took here (tracing to verification)
    error: str | None = None  # why the run could not finish (a device out of memory), else None
    cheapest: bool = False
    estimated: bool = False  # costed by ss.estimate without running: nothing was verified
    # the program's own cost (ProgramDef.cost): model, group, key, rank in its group, values; else None
    program_cost: dict | None = None
    # an estimate on a topology naming a device: the slowest device's compute, the communication
    # not hidden behind it (nothing overlaps: all of it) and the step, compute then communication
    compute_s: float | None = None
    exposed_comm_s: float | None = None
    step_s: float | None = None
    memory_fits: bool | None = None  # the peak within the device capacity (None: no capacity known)
    memory_verdict: str | None = None  # "peaks at 181.64 GiB on 1,024 devices; does not fit an 80 GB H100 device"
    idle: str | None = None  # "7,168 of 8,192 devices (7 of 8) hold no share of x (idle)", else None
    algorithms: dict | None = None  # "kind algorithm" -> seconds: how the library runs the collectives

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(outcome, topology, exact: bool, program_cost=None, device_memory: int | None = None) -> StrategySummary:
    """The record of one ``programs.Outcome`` under ``topology``, with the program's own cost of
    the strategy (a ``programs.ProgramCost``) when it has one; an estimate's memory is judged
    against ``device_memory`` bytes per device (else the topology's device's memory)."""
    s, mesh = outcome.strategy, outcome.mesh
    own = None if program_cost is None else {
        "model": program_cost.model, "group": program_cost.group, "key": list(program_cost.key), "rank": None,
        "values": dict(program_cost.values)}
    base = dict(name=s.name, about=s.about, mesh=dict(mesh.shape), devices=mesh.size, wall_time_s=outcome.seconds,
                error=outcome.error, program_cost=own)
    res = outcome.result
    if res is None:
        return StrategySummary(**base, verified=False, bitwise=False, max_ulp=None, first_divergence=outcome.failure,
                               total_bytes=None, min_bytes=None, bytes_per_axis=None, messages=None, collectives=None,
                               estimated_time_s=None, peak_memory_bytes=None, max_peak_memory_bytes=None)
    comm, memory = res.comm, res.memory
    if outcome.estimated:
        return StrategySummary(**base, verified=False, bitwise=False, max_ulp=None, first_divergence=None,
                               **_costs(comm, memory, mesh, topology), estimated=True,
                               **step_fields(res, topology, device_memory))
    v = res.verify
    verified = v.bitwise if exact else v.ok
    # what to name: the first wrong op or output; when nothing is wrong, the first reassociated op
    first = v.first_divergence if not v.ok or not v.reassociations else v.reassociations[0]
    return StrategySummary(
        **base, verified=verified, bitwise=v.bitwise, max_ulp=v.max_ulp,
        first_divergence=first.describe() if first is not None else None, **_costs(comm, memory, mesh, topology))


def _costs(comm, memory, mesh, topology) -> dict:
    """The cost fields of a summary, from a communication and a memory report (run or estimated)."""
    per_axis: dict[str, int] = {}
    for row in comm.summary("axis"):
        per_axis[row["axis"]] = row["sent"]
    peaks = memory.peaks
    return dict(total_bytes=comm.total_bytes, min_bytes=comm.total_min_bytes, bytes_per_axis=per_axis,
                messages=comm.total_messages, collectives=comm.collectives,
                estimated_time_s=float(comm.estimate(topology).total),
                peak_memory_bytes=[peaks.get(d, 0) for d in range(mesh.size)], max_peak_memory_bytes=memory.max_peak)


def step_fields(est, topology, device_memory: int | None) -> dict:
    """An estimate's compute, exposed communication and step time (on the topology's device),
    its memory verdict, its idle devices and its collectives' algorithms."""
    comm = est.comm.estimate(topology)
    verdict = memory_verdict(est.memory, device_memory, topology.device)
    idle = idle_devices(est.spmd)
    out = dict(memory_fits=verdict.fits, memory_verdict=str(verdict), idle=None if idle is None else str(idle),
               algorithms={f"{kind} {algorithm}": t for (kind, algorithm), t in sorted(comm.by_algorithm().items())})
    if topology.device is not None:
        compute = est.compute_seconds(topology.device)
        out.update(compute_s=compute, exposed_comm_s=comm.total, step_s=compute + comm.total)
    return out


def mark_cheapest(summaries: Sequence[StrategySummary]) -> list[StrategySummary]:
    """The same records with ``cheapest`` set on one: the verified strategy with the lowest
    step time where there is one (an estimate on a device), else the lowest estimated
    communication time, ties broken by fewer bytes, then lower peak memory, then list order.

    Where the program has its own cost (``program_cost``), strategies are ranked within its
    groups (those computing the same thing) by that cost first, the rules above breaking ties;
    ``rank`` is set on each and the first of every group is marked cheapest."""
    groups: dict = {}
    for i, s in enumerate(summaries):
        if (s.verified or s.estimated) and s.estimated_time_s is not None:
            own = s.program_cost
            groups.setdefault(None if own is None else own["group"], []).append(
                (tuple(own["key"]) if own else (), s.step_s if s.step_s is not None else math.inf, s.estimated_time_s,
                 s.total_bytes, s.max_peak_memory_bytes, i))
    rank = {c[-1]: r for cands in groups.values() for r, c in enumerate(sorted(cands), 1)}
    out = []
    for i, s in enumerate(summaries):
        own = s.program_cost if s.program_cost is None else {**s.program_cost, "rank": rank.get(i)}
        out.append(replace(s, cheapest=rank.get(i) == 1, program_cost=own))
    return out


def exit_code(summaries: Sequence[StrategySummary]) -> int:
    """3 when a run could not finish, else 1 when one did not verify, else 0 (errors.py)."""
    if any(s.error for s in summaries):
        return EXIT_RUN
    return EXIT_OK if all(s.verified or s.estimated for s in summaries) else EXIT_FAILED


def document(command: str, program, mesh, backend: str, topology, exact: bool,
             summaries: Sequence[StrategySummary], mode: str = "forward") -> dict:
    """The ``--json`` document (docs/json-schema.md)."""
    cheapest = next((s.name for s in summaries if s.cheapest), None)  # the first, when groups are ranked
    return {
        "schema_version": SCHEMA_VERSION,
        "simshard_version": simshard.__version__,
        "command": command,
        "program": program.name,
        "program_about": program.about,
        "mode": mode,
        "mesh": dict(mesh.shape) if mesh is not None else dict(program.mesh),
        "backend": backend,
        "exact": exact,
        "topology": topology.to_dict(),
        "verified": all(s.verified for s in summaries),
        "cheapest": cheapest,
        "strategies": [s.to_dict() for s in summaries],
    }


def write_json(path: str, doc: dict) -> None:
    try:
        with open(path, "w") as f:
            json.dump(doc, f, indent=2, allow_nan=False)
            f.write("\n")
    except OSError as e:
        raise UsageError(f"cannot write {path!r}: {e.strerror}") from None
