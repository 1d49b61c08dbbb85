"""Building SPMD schedules: every device gets the same sequence of instruction ids.

``ScheduleBuilder`` keeps one instruction list per device and only ever appends to all of them at
once (``emit``), so the lists stay aligned: position ``i`` holds the same SPMD step on every
device, with the same id and the same written buffer numbers (buffer numbers are allocated once
for all devices). Local steps may differ per device (a Slice keeps different positions, a Literal
holds a different block); collectives differ only in their per-device parameters (group, splits).

``finish`` inserts ``Free`` instructions after each buffer's last use (the same positions on every
device), numbers the ids 0, 1, 2, ... and returns one ``Schedule`` per device.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

from .schedule import Free, Instr, Schedule


class ScheduleBuilder:
    def __init__(self, devices: Sequence[int]):
        self.devices = tuple(sorted(devices))
        self.instrs: dict[int, list[Instr]] = {d: [] for d in self.devices}
        self._next_buf = 0

    # -- buffers ---------------------------------------------------------------------------------
    def buf(self) -> int:
        """A fresh buffer number (the same number on every device)."""
        b = self._next_buf
        self._next_buf += 1
        return b

    def bufs(self, n: int) -> tuple[int, ...]:
        return tuple(self.buf() for _ in range(n))

    # -- instructions ----------------------------------------------------------------------------
    def emit(self, make: Callable[[int], Instr] | Mapping[int, Instr]) -> None:
        """Append one SPMD step: ``make(device)`` (or ``make[device]``) is that device's copy.
        Ids are placeholders here; ``finish`` numbers them."""
        get = make.__getitem__ if isinstance(make, Mapping) else make  # decided once, not per device
        for d in self.devices:
            self.instrs[d].append(get(d))

    def emit_same(self, ins: Instr) -> None:
        """One SPMD step every device runs as the same instruction object."""
        self.emit(lambda d: ins)

    def emit_by(self, key: Callable[[int], object], make: Callable[[int], Instr]) -> None:
        """One SPMD step whose instruction depends on the device only through ``key(device)``:
        ``make`` runs once per distinct key and devices with equal keys share its instruction
        (which keeps the schedules small and lets the estimate walk a class of devices once)."""
        made: dict = {}

        def shared(d):
            k = key(d)
            if k not in made:
                made[k] = make(d)
            return made[k]

        self.emit(shared)

    def __len__(self) -> int:
        return len(self.instrs[self.devices[0]]) if self.devices else 0

    # -- finishing -------------------------------------------------------------------------------
    def finish(self, inputs: Sequence[int], outputs: Sequence[int], free: bool = True) -> tuple[Schedule, ...]:
        """Schedules with ``Free`` after each buffer's last use and ids numbered in order."""
        first = self.instrs[self.devices[0]] if self.devices else []
        dying: dict[int, list[int]] = {}
        if free:
            # buffer numbers are the same on every device (module docstring): one list tells
            keep = set(outputs)
            last: dict[int, int] = {}
            for pos, ins in enumerate(first):
                for b in tuple(ins.reads()) + tuple(ins.writes()):
                    last[b] = pos
            for b in inputs:  # an input never read is dead from the start
                last.setdefault(b, -1)
            for b, pos in last.items():
                if b not in keep:
                    dying.setdefault(pos, []).append(b)
        frees = {pos: Free(0, "dead input" if pos < 0 else first[pos].source, bufs=tuple(sorted(bufs)))
                 for pos, bufs in dying.items()}  # one Free per position, shared by every device
        out, shared = [], {}
        for d in self.devices:
            mine = self.instrs[d]
            key = tuple(map(id, mine))  # devices holding the same instruction objects share one list
            if key not in shared:
                instrs: list[Instr] = [frees[-1]] if -1 in frees else []
                for pos, ins in enumerate(mine):
                    instrs.append(ins)
                    if pos in frees:
                        instrs.append(frees[pos])
                numbered = tuple(_numbered(ins, i) for i, ins in enumerate(instrs))
                _number_loops(numbered, len(numbered))
                shared[key] = numbered
            out.append(Schedule(d, tuple(inputs), shared[key], tuple(outputs)))
        return tuple(out)


def _numbered(ins: Instr, i: int) -> Instr:
    """``ins`` with id ``i``. Each instruction object sits at one position (devices may share it
    there), so the id is set in place."""
    object.__setattr__(ins, "id", i)
    return ins


WHILE_IDS = 10**15  # ids a while loop may use (its iterations times its instructions)


def _number_loops(instrs: Sequence[Instr], first_free: int) -> None:
    """Give each loop a range of ids above every instruction's, one per body instruction and
    iteration (the same on every device: loops sit at the same positions)."""
    for ins in instrs:
        if ins.kind == "loop":
            for j, b in enumerate(ins.body):
                object.__setattr__(b, "id", j)
            object.__setattr__(ins, "id_base", first_free)
            first_free += ins.length * len(ins.body)
        elif ins.kind == "switch":
            for branch in ins.branches:
                for j, b in enumerate(branch):
                    object.__setattr__(b, "id", j)
            object.__setattr__(ins, "id_base", first_free)
            first_free += sum(len(b) for b in ins.branches)
        elif ins.kind == "while":  # as many iterations as the data say: a range no count reaches
            for j, b in enumerate(ins.cond + ins.body):
                object.__setattr__(b, "id", j)
            object.__setattr__(ins, "id_base", first_free)
            first_free += WHILE_IDS


def same_ids(schedules: Iterable[Schedule]) -> bool:
    """True when every schedule runs the same sequence of instruction ids and kinds of collective."""
    seqs = [tuple((i.id, i.kind if i.is_collective else "local") for i in s.instrs) for s in schedules]
    return all(s == seqs[0] for s in seqs)
