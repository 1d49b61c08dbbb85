"""``CommDebugMode``: count the collectives of everything run inside a ``with`` block.

    with CommDebugMode() as comm:
        res = ss.run(mlp, x, w1, w2, mesh=mesh, in_shardings=...)
        y = d.redistribute(placements=[Replicate(), Shard(1)])
    comm.get_comm_counts()          # {'all_reduce': 1, 'all_gather': 1}
    comm.get_comm_module_counts()   # per instruction source, per kind
    comm.get_comm_op_counts()       # per program op, per kind
    comm.get_comm_bytes("op")       # bytes received, per op

As torch's ``CommDebugMode`` does for DTensor code, over simshard's communication records: every
run (``ss.run``, a ``Compiled`` call, ``DTensor.redistribute`` / ``full_tensor``) hands its records
to the active modes (``observe``). The grouping itself is ``simshard.report.comm_counts``.
Modes nest; each sees what runs while it is active, in this thread or task (a context variable).
"""

from __future__ import annotations

import contextvars
from typing import Any, Iterable, Mapping

from simshard.report.comm_counts import TORCH_NAMES, CommCounts, CommEvent

_ACTIVE: contextvars.ContextVar[tuple["CommDebugMode", ...]] = contextvars.ContextVar("simshard_comm_debug", default=())


class CommDebugMode:
    """Collects the communication of every run inside its ``with`` block (see the module docstring)."""

    def __init__(self):
        self._events: list[CommEvent] = []
        self._token = None

    def __enter__(self) -> "CommDebugMode":
        self._token = _ACTIVE.set(_ACTIVE.get() + (self,))
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.reset(self._token)
        self._token = None

    @property
    def counts(self) -> CommCounts:
        """What was recorded so far, as an immutable ``CommCounts``."""
        return CommCounts(tuple(self._events))

    def __getattr__(self, name: str):
        # get_total_counts, get_comm_counts, get_comm_op_counts, get_comm_module_counts,
        # get_comm_bytes, get_sharding_info, rows, render: those of the counts so far
        if name.startswith("get_") or name in ("rows", "render", "collectives"):
            return getattr(self.counts, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __str__(self) -> str:
        return self.counts.render()

    def generate_comm_debug_tracing_table(self, noise_level: int = 0) -> str:
        """torch's table: the collectives per ``simshard.nn`` module that ran them, nested as the
        modules are (each module counts its sub-modules'), ``Global`` first; ``noise_level`` >= 1
        adds each program op's collectives with the bytes received."""
        return tracing_table(self.counts, noise_level)


def observe_run(label: str, execution, program, spmd=None) -> None:
    """A program's run (an ``Execution``), for every active mode: its records and shardings are
    gathered only when a mode is active (a run nobody observes never makes its ``CommRecord``s)."""
    if _ACTIVE.get():
        observe(label, execution.records, program_info(program, spmd))


def observe(label: str, records: Iterable, info: Mapping[str, Any] | None = None) -> None:
    """A run's records, for every active mode (nothing when none is active)."""
    modes = _ACTIVE.get()
    if not modes:
        return
    from simshard.nn import current_module  # only with a mode active: a device process never needs it

    event = CommEvent(label, tuple(records), {**dict(info or {}), "nn_module": current_module()})
    for m in modes:
        m._events.append(event)


def _ancestors(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return ["Global"] + [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def tracing_table(counts: CommCounts, noise_level: int = 0) -> str:
    """The text of ``generate_comm_debug_tracing_table`` for ``counts``."""
    kinds: dict[str, dict[str, int]] = {}
    ops: dict[str, dict[tuple[str, str], int]] = {}
    for c in counts.collectives:
        name = "c10d_functional." + TORCH_NAMES.get(c.kind, c.kind)
        for path in _ancestors(counts.events[c.event].info.get("nn_module", "")):
            kinds.setdefault(path, {})
            kinds[path][name] = kinds[path].get(name, 0) + 1
            ops.setdefault(path, {})
            ops[path][(c.op, name)] = ops[path].get((c.op, name), 0) + c.bytes_received
    lines = []
    for path, per_kind in kinds.items():
        depth = 0 if path == "Global" else path.count(".") + 1
        pad = "  " * depth
        lines += [f"{pad}{path}", f"{pad}  FORWARD PASS"]
        lines += [f"{pad}    *{k}: {n}" for k, n in per_kind.items()]
        if noise_level >= 1:
            lines += [f"{pad}    {op} -> {k}: {b} B received" for (op, k), b in ops[path].items()]
    return "\n".join(lines) if lines else "Global\n  FORWARD PASS\n    (no collectives)"


def program_info(program, spmd=None) -> dict[str, Any]:
    """A program's input and output shardings by name (the outputs as the partitioned program
    leaves them), for ``get_sharding_info``."""
    if program is None:
        return {}
    names = tuple(getattr(program, "input_names", ()) or ())
    ins = tuple(getattr(program, "in_shardings", ()) or ())
    outs = tuple(spmd.out_shardings if spmd is not None else (getattr(program, "out_shardings", ()) or ()))
    return {"inputs": ", ".join(f"{n}: {s}" for n, s in zip(names, ins)),
            "outputs": ", ".join(f"{i}: {s}" for i, s in enumerate(outs))}


__all__ = ["CommDebugMode", "observe", "program_info", "tracing_table"]
