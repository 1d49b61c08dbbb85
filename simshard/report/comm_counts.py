"""Collectives counted per kind, per op and per module, as torch's ``CommDebugMode`` counts them.

``CommCounts`` groups the communication records of one or more runs (``CommEvent``: a run's
label, its records, and the shardings it moved between). A collective is one SPMD instruction
of one run, counted once however many devices took part (torch counts the calls one rank
makes); its bytes are what all its devices received. The *module* of a collective is the
instruction's source (``reshard %4 for %5 dot_general``, ``redistribute [S(0)] -> [R]``): the
part of the program that asked for it; its *op* is the program op that needed it
(``dot_general``; ``output`` for an output's sharding; ``redistribute``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .comm import CommRecord

# simshard's collective kinds as torch's CommDebugMode names them (c10d_functional)
TORCH_NAMES = {
    "all_gather": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor",
    "all_reduce": "all_reduce",
    "all_to_all": "all_to_all_single",
    "collective_permute": "permute_tensor",
    "broadcast": "broadcast",
}


def op_of(source: str) -> str:
    """The program op a collective's source names: the consumer after ``for``, its last word."""
    text = source.split(" for ", 1)[1] if " for " in source else source
    if text.startswith("redistribute"):
        return "redistribute"
    if re.fullmatch(r"output \d+", text):
        return "output"
    words = text.replace(":", " ").split()
    return words[-1] if words else source


@dataclass(frozen=True)
class CommEvent:
    """One run's communication: a label (``ss.run mlp``, ``redistribute ...``), its records, and
    what it moved between (``info``: plain data, e.g. the shardings)."""

    label: str
    records: tuple[CommRecord, ...]
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Collective:
    """One collective instruction of one run: its kind, source, op, mesh axes and bytes received."""

    event: int
    instr: int
    kind: str
    module: str
    op: str
    axes: tuple[str, ...]
    devices: int
    bytes_received: int


@dataclass(frozen=True)
class CommCounts:
    events: tuple[CommEvent, ...] = ()

    @property
    def collectives(self) -> tuple[Collective, ...]:
        out: dict[tuple[int, int], list[CommRecord]] = {}
        for k, ev in enumerate(self.events):
            for r in ev.records:
                out.setdefault((k, r.instr), []).append(r)
        return tuple(
            Collective(k, instr, rs[0].kind, rs[0].source, op_of(rs[0].source), rs[0].axes, len(rs),
                       sum(r.bytes_received for r in rs))
            for (k, instr), rs in sorted(out.items()))

    # -- torch's names ----------------------------------------------------------------------
    def get_total_counts(self) -> int:
        return len(self.collectives)

    def get_comm_counts(self, torch_names: bool = False) -> dict[str, int]:
        """Collectives per kind (``torch_names``: keyed as CommDebugMode keys them)."""
        return self._count(lambda c: TORCH_NAMES.get(c.kind, c.kind) if torch_names else c.kind)

    def get_comm_op_counts(self) -> dict[str, dict[str, int]]:
        """Per program op, collectives per kind."""
        return self._nested(lambda c: c.op)

    def get_comm_module_counts(self) -> dict[str, dict[str, int]]:
        """Per module (instruction source), collectives per kind."""
        return self._nested(lambda c: c.module)

    def get_comm_bytes(self, by: str = "kind") -> dict[str, int]:
        """Bytes received over all devices, per ``kind``, ``op`` or ``module``."""
        out: dict[str, int] = defaultdict(int)
        for c in self.collectives:
            out[getattr(c, by)] += c.bytes_received
        return dict(out)

    def get_sharding_info(self) -> list[dict]:
        """Per run: its label and what it moved between (the shardings of its values)."""
        return [{"label": ev.label, **{k: (str(v) if not isinstance(v, (int, tuple)) else v)
                                        for k, v in ev.info.items()}} for ev in self.events]

    # -- tables -------------------------------------------------------------------------------
    def rows(self) -> list[dict]:
        """One row per (module, op, kind): collectives and bytes received."""
        groups: dict[tuple, list[Collective]] = {}
        for c in self.collectives:
            groups.setdefault((c.module, c.op, c.kind), []).append(c)
        return [{"module": m, "op": o, "kind": k, "collectives": len(cs), "received": sum(c.bytes_received for c in cs)}
                for (m, o, k), cs in groups.items()]

    def render(self) -> str:
        """The per-module table as text (CommDebugMode's ``generate_comm_debug_tracing_table``)."""
        from ..units import fmt_bytes

        lines = [f"total collectives: {self.get_total_counts()}"]
        by_module: dict[str, list[dict]] = {}
        for r in self.rows():
            by_module.setdefault(r["module"], []).append(r)
        for module, rows in by_module.items():
            lines.append(f"  {module}")
            for r in rows:
                lines.append(f"    {r['kind']}: {r['collectives']} ({fmt_bytes(r['received'])} received)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    # -- helpers ------------------------------------------------------------------------------
    def _count(self, key) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for c in self.collectives:
            out[key(c)] += 1
        return dict(out)

    def _nested(self, key) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for c in self.collectives:
            inner = out.setdefault(key(c), {})
            inner[c.kind] = inner.get(c.kind, 0) + 1
        return out

    @staticmethod
    def of(reports: Iterable[Any], label: str = "run") -> "CommCounts":
        """Counts of finished runs: each a ``CommReport`` (or anything with ``records``)."""
        return CommCounts(tuple(CommEvent(f"{label} {i}", tuple(r.records)) for i, r in enumerate(reports)))


__all__ = ["Collective", "CommCounts", "CommEvent", "TORCH_NAMES", "op_of"]
