"""The SPMD lockstep walk: every device's instruction list one step at a time, a class of devices
at a time (local steps once per class, collectives per member), scans walked once where their
iterations repeat."""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from ...spmd import Instr, Instructions
from ..comm import Repeat
from ...spmd.dispatch import COLLECTIVE_KINDS, dispatch_table
from .blocks import COUNTER, EstimateError
from .collectives import run_collective
from .local import LOCAL_RUNS, run_locals
from .memo import Memo
from .state import Classes, Devices, Lists


def walk(devices: Devices, classes: Classes, lists: Lists, memo: Memo, top: bool = False) -> None:
    """Run the aligned instruction lists one SPMD step at a time, a class of devices at a time.
    ``classes`` lists the devices sharing a state (and its first member's instruction list in
    ``lists``, which all of them run): local steps run once per class, collectives per member,
    splitting a class where its members receive different blocks (``classes`` and ``lists`` are
    updated in place). ``memo`` keeps what the walk computed by value (``Memo``): a mesh of
    thousands evaluates each distinct local shape once. ``top``: these are the schedules' own
    lists (not a loop's body), whose positions the memory peak names."""
    n = len(lists[classes[0][0]]) if classes else 0
    for pos in range(n):
        here = {c[0]: at(lists[c[0]], pos) for c in classes}
        if top:
            for c in classes:
                devices[c[0]].state.at(pos, here[c[0]])
        STEPS[here[classes[0][0]].kind](devices, classes, here, lists, memo)


def at(instrs: Sequence[Instr], pos: int) -> Instr:
    """Position ``pos`` of a class's list as the class holds it (a collective's ``Varying`` groups
    unresolved: its members resolve their own)."""
    return instrs.shared(pos) if isinstance(instrs, Instructions) else instrs[pos]


def _loop_step(devices: Devices, classes: Classes, here: Mapping[int, Instr], lists: Lists, memo: Memo) -> None:
    """A scan (``_loop``); a class its body's collectives split runs on in its origin's list."""
    origin = {d: c[0] for c in classes for d in c}
    _loop(devices, classes, here, memo)
    for c in classes:
        if c[0] not in lists:
            lists[c[0]] = lists[origin[c[0]]]


def _refuse(devices: Devices, classes: Classes, here: Mapping[int, Instr], lists: Lists, memo: Memo) -> None:
    """A while loop or a switch: what it runs depends on data the estimate does not have."""
    first = here[classes[0][0]]
    what = "its trip count" if first.kind == "while" else "the branch it takes"
    raise EstimateError(f"[{first.id}] {first.kind} from {first.source!r}: {what} depends on the data, which "
                        "an estimate does not have; run the program (ss.run) to cost it")


def _loop(devices: Devices, classes: Classes, here: Mapping[int, Instr], memo: Memo) -> None:
    """A scan's iterations. Its carries keep their shapes, so an iteration that leaves every
    device's buffers as it found them is the same for every later one: walked once, its records
    repeated under each iteration's ids (a 96-layer scan costs one layer's walk). The counter is
    written for every iteration as the executor writes it, so the memory peak stays exact."""
    loops = {d: here[c[0]] for c in classes for d in c}  # each device's Loop (its class's)
    length = next(iter(here.values())).length
    if not length:
        return

    def count() -> None:  # the loop writes its step number before each iteration
        for c in classes:
            devices[c[0]].state.write([(loops[c[0]].counter, COUNTER)])

    count()  # before the snapshot: the counter is in every iteration's buffers
    first_of = {d: c[0] for c in classes for d in c}  # each device's class, by its first member
    snap = {c[0]: (dict(devices[c[0]].state.buffers), devices[c[0]].state.live, Counter(devices[c[0]].state.ops))
            for c in classes}
    mark = len(memo.records)
    walk(devices, classes, {c[0]: loops[c[0]].iteration(0) for c in classes}, memo)
    states = {id(devices[d].state): d for d in loops}  # each state once (a class shares one)
    if all((devices[d].state.buffers, devices[d].state.live) == snap[first_of[d]][:2] for d in states.values()):
        # every later iteration repeats the first: its counter, its local work, its records
        ran = {c[0]: devices[c[0]].state.ops - snap[first_of[c[0]]][2] for c in classes}  # one iteration's ops
        _repeat(devices, classes, loops, range(1, length), ran)
        first = tuple(memo.records[mark:])
        if first:
            stride = next(iter(loops.values())).stride
            memo.records.append(Repeat(first, tuple(k * stride for k in range(1, length))))
        return
    for k in range(1, length):
        count()
        walk(devices, classes, {c[0]: loops[c[0]].iteration(k) for c in classes}, memo)


def _repeat(devices: Devices, classes: Classes, loops: Mapping[int, Instr], iterations: range,
            ran: Mapping[int, Counter]) -> None:
    """Iterations ``iterations`` of a scan whose first iteration left every buffer as it found it:
    each writes its counter and does the first iteration's local work; its collectives are the
    first iteration's records under its own ids, one ``Repeat`` of them (``_loop``), which the
    report weighs rather than copies (a 7B step on 8,192 devices would copy 1.5 million)."""
    for c in classes:
        st = devices[c[0]].state
        for _ in iterations:
            st.write([(loops[c[0]].counter, COUNTER)])
        for work, n in ran[c[0]].items():
            st.ops[work] += n * len(iterations)


# each instruction kind's SPMD step: (devices, classes, here, lists, memo) -> None
STEPS = dispatch_table({
    **{kind: run_locals for kind in LOCAL_RUNS},
    **{kind: run_collective for kind in COLLECTIVE_KINDS},
    "loop": _loop_step, "while": _refuse, "switch": _refuse,
}, "simshard/report/estimate/walk.py")

__all__ = ["STEPS", "at", "walk"]
