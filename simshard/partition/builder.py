"""Building SPMD schedules: every device gets the same sequence of instruction ids.

``ScheduleBuilder`` holds the SPMD steps once, not one list per device: a step is one instruction
every device runs (the usual case), or a ``PerDevice`` table where devices differ (a Slice keeping
different positions, a collective over different groups: an instruction per class of devices
and a class number per device). Buffer numbers are
allocated once for all devices, so position ``i`` holds the same step on every device, with the
same id and the same buffers. The builder also keeps the *classes* of devices that run the same
instruction objects at every step so far (refined only by steps where devices differ): a class's
instruction list is made once, whatever its size.

``freed`` inserts ``Free`` instructions after each buffer's last use (the same positions on every
device; a loop's body uses it too); ``finish`` then numbers the ids 0, 1, 2, ... (new instructions
with their final ids, ``simshard.spmd.numbering``) and returns the ``Schedules``, held per class
of devices: each class one instruction list (``Instructions``, read from the step table); a
device's own ``Schedule`` (its own view of the list where an instruction has ``Varying`` fields, a
collective's groups, resolved for the device) is made only when something asks for it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..sharding.rows import distinct_rows, row_of, rows_of
from ..spmd.instructions import Free, Instr
from ..spmd.numbering import numbered, numbered_positions, slot_values
from ..spmd.resolve import Instructions, varying_slots
from ..spmd.schedule import ScheduleClass, Schedules
from ..spmd.varying import Varying


class PerDevice(Mapping):
    """device -> value, held as one value per class of devices and a class number per device
    (``codes``, a row per device in ascending id): how steps say what each device runs without a
    Python object per device. ``map`` makes one new value per class. ``distinct``: the values
    are known to differ (``by_rows``'s name their groups), so ``distinct_values`` compares none
    (a step over 128 groups of 64 would hash each group's devices)."""

    def __init__(self, ids: np.ndarray, codes: np.ndarray, values: Sequence, distinct: bool = False):
        self.ids, self.codes, self.values = ids, codes, tuple(values)
        self.distinct_known = distinct

    @staticmethod
    def of(devices: Sequence[int], per: Mapping[int, object]) -> "PerDevice":
        """From a mapping over ``devices`` (ascending), devices with the same object in one class
        (by identity, within this call: ``per`` holds the objects)."""
        return PerDevice.by_key(devices, lambda d: id(per[d]), per.__getitem__)

    @staticmethod
    def by_key(devices: Sequence[int], key: Callable[[int], object], make: Callable[[int], object]) -> "PerDevice":
        """One class per distinct ``key(device)`` over ``devices`` (ascending), its value made
        once by ``make`` on its first device."""
        index: dict = {}
        values: list = []
        codes = []
        for d in devices:
            k = key(d)
            c = index.get(k)
            if c is None:
                c = index[k] = len(values)
                values.append(make(d))
            codes.append(c)
        return PerDevice(np.asarray(devices, dtype=np.int64), np.asarray(codes, dtype=np.int64), values)

    @staticmethod
    def by_rows(ids: np.ndarray, rows: np.ndarray, values: Sequence) -> "PerDevice":
        """Class ``i`` for the devices at ``rows[i]`` (an array [classes, members] of rows: the
        devices of disjoint groups), its value ``values[i]``, which names its group (the group,
        or a tuple that starts with it: values of different groups differ)."""
        codes = np.empty(len(ids), dtype=np.int64)
        codes[rows] = np.arange(len(rows))[:, None]
        return PerDevice(ids, codes, values, distinct=True)

    @staticmethod
    def of_table(ids: np.ndarray, table: np.ndarray, make: Callable[[tuple], object]) -> "PerDevice":
        """One class per distinct row of ``table`` ([devices, k] ints, a row per device in
        ``ids`` order), its value ``make(row as a tuple of ints)``."""
        rows, _, inverse = distinct_rows(np.asarray(table, dtype=np.int64))
        return PerDevice(ids, inverse, [make(tuple(r)) for r in rows.tolist()])

    def map(self, fn: Callable) -> "PerDevice":
        return PerDevice(self.ids, self.codes, [fn(v) for v in self.values])

    def distinct_values(self) -> "PerDevice":
        """The same mapping with one class per distinct value (by equality)."""
        return self if self.distinct_known else self._distinct_by(_hashable)

    def distinct(self) -> "PerDevice":
        """The same mapping with one class per distinct object (classes that got one object
        merged): by identity, over values this mapping holds."""
        return self._distinct_by(id)

    def _distinct_by(self, key: Callable) -> "PerDevice":
        """The same mapping with the classes whose values have one ``key`` merged."""
        index: dict = {}
        values: list = []
        remap = []
        for v in self.values:
            k = key(v)
            if k not in index:
                index[k] = len(values)
                values.append(v)
            remap.append(index[k])
        if len(values) == len(self.values):
            return self
        return PerDevice(self.ids, np.asarray(remap, dtype=np.int64)[self.codes], values)

    def __getitem__(self, device: int):
        return self.values[self.codes[row_of(self.ids, device)]]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids.tolist())

    def __len__(self) -> int:
        return len(self.ids)


class BufferNumbers:
    """The buffer numbers of one schedule, handed out in order. The builders of a schedule's
    bodies (a loop's, a branch's, each partitioned by a builder of its own) share their parent's
    counter, so a number is never given twice."""

    def __init__(self):
        self.next = 0  # the number the next buffer gets (so also how many were given)

    def take(self) -> int:
        """A fresh buffer number."""
        number = self.next
        self.next += 1
        return number


class ScheduleBuilder:
    """One schedule's SPMD steps (module docstring), on buffer numbers from ``numbers`` (a new
    counter unless shared with the builder of an enclosing schedule)."""

    def __init__(self, devices: Sequence[int], numbers: BufferNumbers | None = None):
        self.devices = tuple(sorted(devices))
        self.steps: list[Instr | PerDevice] = []
        self._ids = np.asarray(self.devices, dtype=np.int64)
        self._codes = np.zeros(len(self.devices), dtype=np.int64)  # each device's class, by row
        self.numbers = numbers if numbers is not None else BufferNumbers()

    # -- buffers ---------------------------------------------------------------------------------
    def buf(self) -> int:
        """A fresh buffer number (the same number on every device)."""
        return self.numbers.take()

    def bufs(self, n: int) -> tuple[int, ...]:
        return tuple(self.buf() for _ in range(n))

    # -- instructions ----------------------------------------------------------------------------
    def emit(self, make: Callable[[int], Instr] | Mapping[int, Instr]) -> None:
        """Append one SPMD step: ``make(device)`` (or ``make[device]``) is that device's copy.
        Ids are placeholders here; ``finish`` numbers them."""
        if isinstance(make, PerDevice) and np.array_equal(make.ids, self._ids):
            make = make.distinct()  # classes a table made one object for run as one
        else:
            make = PerDevice.of(self.devices, make if isinstance(make, Mapping) else {d: make(d) for d in self.devices})
        if len(make.values) <= 1:  # every device runs one instruction
            if make.values:
                self.steps.append(make.values[0])
            return
        self.steps.append(make)
        # refine the classes: devices stay together while they ran the same object at every step
        pair = self._codes * (int(make.codes.max()) + 1) + make.codes
        self._codes = np.unique(pair, return_inverse=True)[1].reshape(-1)

    def emit_same(self, ins: Instr) -> None:
        """One SPMD step every device runs as the same instruction object."""
        self.steps.append(ins)

    def emit_by(self, key: Callable[[int], object], make: Callable[[int], Instr]) -> None:
        """One SPMD step whose instruction depends on the device only through ``key(device)``:
        ``make`` runs once per distinct key and devices with equal keys share its instruction
        (which keeps the schedules small and lets the estimate walk a class of devices once)."""
        self.emit(PerDevice.by_key(self.devices, key, make))

    def emit_keyed(self, keys: Mapping[int, object], default, make: Callable[[object], Instr], varying: bool = False) -> None:
        """One SPMD step whose instruction depends on a device only through a key: ``keys[d]``
        for the devices listed, ``default`` for the others (an exchange round names only the
        devices it moves data between). ``make`` runs once per distinct key (``varying``: once,
        on a ``Varying`` of the keys, ``emit_at``)."""
        index: dict = {}
        codes = [index.setdefault(k, len(index)) for k in keys.values()]
        self.emit_at(np.fromiter(keys, np.int64, len(keys)), np.asarray(codes, dtype=np.int64), list(index), default, make,
                     varying)

    def emit_at(self, devices: np.ndarray, codes: np.ndarray, keys: Sequence, default, make: Callable[[object], Instr],
                varying: bool = False) -> None:
        """``emit_keyed`` with the keys as columns: ``keys[codes[i]]`` for ``devices[i]``. With
        ``varying``, the key is a field of one instruction (``make`` gets a ``Varying`` of the
        keys, or the one key every device has): devices that differ only there stay one class."""
        index = {default: 0}
        values = [default]
        remap = np.empty(len(keys), dtype=np.int64)
        for i, k in enumerate(keys):
            if k not in index:
                index[k] = len(values)
                values.append(k)
            remap[i] = index[k]
        full = np.zeros(len(self.devices), dtype=np.int64)
        if len(devices):
            full[rows_of(self._ids, devices)] = remap[codes]
        if varying:
            self.emit_varying(PerDevice(self._ids, full, values), make)
        else:
            self.emit(PerDevice(self._ids, full, [make(v) for v in values]))

    def emit_varying(self, per: "PerDevice", make: Callable[[object], Instr]) -> None:
        """One instruction every device runs, ``make``'s argument being ``per``'s value for each
        device: the value itself where all devices have one, else a ``Varying`` of ``per``."""
        if not np.array_equal(per.ids, self._ids):
            per = PerDevice.of(self.devices, {d: per[d] for d in self.devices})
        per = per.distinct_values()
        used = np.flatnonzero(np.bincount(per.codes, minlength=len(per.values)))  # by counting, not a sort
        if len(used) == 1:
            self.emit_same(make(per.values[int(used[0])]))
        else:
            self.emit_same(make(Varying(per.ids, per.codes, per.values)))

    def __len__(self) -> int:
        return len(self.steps)

    # -- reading ---------------------------------------------------------------------------------
    def classes(self) -> list[list[int]]:
        """The devices that run the same instruction objects at every step, class by class (in
        the order of their first devices)."""
        if not self.devices:
            return []
        order = np.argsort(self._codes, kind="stable")
        bounds = np.flatnonzero(np.diff(self._codes[order])) + 1
        members = [self._ids[part].tolist() for part in np.split(order, bounds)]
        return sorted(members, key=lambda m: m[0])

    # -- finishing -------------------------------------------------------------------------------
    def freed(self, keep: Iterable[int], inputs: Sequence[int] = ()) -> list[tuple[list[int], Instructions]]:
        """Per class, its devices and their instructions (read from the step table, as a
        schedule's are) with a ``Free`` after each buffer's last use (buffers in ``keep``
        excepted; ``inputs`` never read freed before the first step), each instruction's id its
        position (a loop body's numbering, done once per position)."""
        return self._lists(numbered_positions(self._slots(keep, inputs)))

    def _lists(self, slots: tuple[Instr | PerDevice, ...]) -> list[tuple[list[int], Instructions]]:
        """Each class's devices and its instruction list, read from ``slots`` for its class."""
        classes = self.classes()
        rows = rows_of(self._ids, [m[0] for m in classes]).tolist() if classes else []
        return [(members, Instructions(slots, row)) for members, row in zip(classes, rows)]

    def _slots(self, keep: Iterable[int], inputs: Sequence[int]) -> list[Instr | PerDevice]:
        """The steps with a ``Free`` after each buffer's last use. Buffer numbers are the same on
        every device (module docstring), so a step's use of a buffer is that of any of its
        values (devices may read different buffers at one step, e.g. an exchange round whose
        relays send from the block they assemble); every class shares the Free objects."""
        keep = set(keep)
        last: dict[int, int] = {}
        for pos, step in enumerate(self.steps):
            for ins in slot_values(step):
                for b in tuple(ins.reads()) + tuple(ins.writes()):
                    last[b] = pos
        for b in inputs:  # an input never read is dead from the start
            last.setdefault(b, -1)
        dying: dict[int, list[int]] = {}
        for b, pos in last.items():
            if b not in keep:
                dying.setdefault(pos, []).append(b)
        frees = {pos: Free(0, "dead input" if pos < 0 else slot_values(self.steps[pos])[0].source, bufs=tuple(sorted(bufs)))
                 for pos, bufs in dying.items()}
        slots: list[Instr | PerDevice] = [frees[-1]] if -1 in frees else []
        for pos, step in enumerate(self.steps):
            slots.append(step)
            if pos in frees:
                slots.append(frees[pos])
        return slots

    def finish(self, inputs: Sequence[int], outputs: Sequence[int], free: bool = True) -> Schedules:
        """Schedules with ``Free`` after each buffer's last use (none when not ``free``: every
        buffer kept) and ids numbered in order, the devices of a class sharing one instruction list."""
        slots = numbered(self._slots(outputs, inputs) if free else self._slots(range(self.numbers.next), ()))
        inputs, outputs = tuple(inputs), tuple(outputs)
        hits = varying_slots(slots, {})
        classes = tuple(ScheduleClass(tuple(members), inputs, instrs, outputs, instrs.varying_positions(hits))
                        for members, instrs in self._lists(slots))
        # each device's class by row: the classes numbered by their first members' class codes
        number = np.zeros(int(self._codes.max(initial=0)) + 1, dtype=np.int64)
        number[self._codes[rows_of(self._ids, [c.members[0] for c in classes])]] = np.arange(len(classes))
        return Schedules(self.devices, classes, class_of=number[self._codes], ids=self._ids)


def _hashable(v):
    """``v`` as a dict key: numpy scalars and arrays by dtype and bytes, anything else that does
    not hash by identity (keys of one ``distinct_values`` call, whose mapping holds the values)."""
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        return (a.dtype.str, a.shape, a.tobytes())
    try:
        hash(v)
    except TypeError:
        return ("object", id(v))
    return v
