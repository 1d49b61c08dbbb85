"""The collectives ``ray_bench.py`` and ``peers.py`` time: hand-made ``SpmdProgram``s of one
collective over every device, their shapes, and the steady-state time of one collective read from
the devices' own timelines (``Execution.timeline``), so the driver's scatter and gather are not
in it. Both backends run them (simshard only, no Ray of its own).
"""

from __future__ import annotations

import numpy as np

from simshard.spmd import AllGather, AllReduce, AllToAll, Free, ReduceScatter, Schedule, SpmdProgram

KINDS = ("all_gather", "reduce_scatter", "all_to_all", "all_reduce")


def collective_program(kind: str, devices: tuple[int, ...], rows: int, cols: int, reps: int) -> SpmdProgram:
    """Every device: input buffer 0 (``[rows, cols]`` float32), ``reps`` copies of the collective
    over all ``devices`` (instruction ids 1..reps, each result freed at once), output buffer 0."""
    n = len(devices)
    instrs = []
    for r in range(1, reps + 1):
        src = f"bench {kind} {r}"
        if kind == "all_gather":
            ins = AllGather(r, src, src=0, dst=1, group=devices, axis=0, axes=("d",))
        elif kind == "reduce_scatter":
            ins = ReduceScatter(r, src, src=0, dst=1, group=devices, axis=0, splits=(rows // n,) * n, axes=("d",))
        elif kind == "all_to_all":
            ins = AllToAll(r, src, src=0, dst=1, group=devices, split_axis=0, splits=(rows // n,) * n,
                           concat_axis=0, axes=("d",))
        elif kind == "all_reduce":
            ins = AllReduce(r, src, src=0, dst=1, group=devices, axes=("d",))
        else:
            raise ValueError(f"unknown collective {kind!r} (one of {KINDS})")
        instrs += [ins, Free(10_000 + r, src, bufs=(1,))]
    return SpmdProgram(None, tuple(Schedule(d, (0,), tuple(instrs), (0,)) for d in devices), (), ())


def collective_shape(kind: str, n: int, nbytes: int) -> tuple[int, int]:
    """Local input shape for a collective over a ``nbytes`` global array (float32, 256 columns):
    all-gather and all-to-all hold one shard (nbytes / n) each; reduce-scatter and all-reduce hold
    a whole ``nbytes`` partial each."""
    cols = 256
    rows = max(n * n, nbytes // (4 * cols) // (n * n) * (n * n))  # global rows, a multiple of n * n
    if kind in ("all_gather", "all_to_all"):
        rows //= n
    return rows, cols


def collective_case(kind: str, devices: tuple[int, ...], nbytes: int, reps: int) -> tuple[SpmdProgram, dict]:
    """``collective_program`` for a global array of ``nbytes``, and each device's input: a block of
    standard-normal float32 (the same seed everywhere, so that every benchmark moves the same bits)."""
    rows, cols = collective_shape(kind, len(devices), nbytes)
    rng = np.random.default_rng(1)
    inputs = {d: [rng.standard_normal((rows, cols)).astype(np.float32)] for d in devices}
    return collective_program(kind, devices, rows, cols, reps), inputs


def steady_seconds(ends: list[float]) -> float:
    """Time per round from the end times of rounds run back to back: the first round absorbs
    the staggered starts, the rest are steady."""
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def collective_seconds(execution, reps: int) -> float:
    """Steady-state time of one collective, on the devices' own clocks (one machine): the copies
    run back to back, copy ``r`` is done when its last device finishes it; the time from copy 1
    done to copy ``reps`` done, over ``reps - 1``. (Copy 1 absorbs the devices' staggered starts;
    with one copy, its whole span counts.)"""
    spans = [sp for tl in execution.timeline.values() for sp in tl if sp.kind in KINDS]
    done: dict[int, float] = {}
    for sp in spans:
        done[sp.instr] = max(done.get(sp.instr, 0.0), sp.end)
    if reps < 2:
        return max(sp.end for sp in spans) - min(sp.start for sp in spans)
    return steady_seconds([done[r] for r in range(1, reps + 1)])
