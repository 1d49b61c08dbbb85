"""What a tuned run would choose for the options left open: the fastest step that fits in the
device's memory, over microbatch sizes, pipeline schedules, recomputation, ZeRO stages and
sequence parallelism. What was chosen, and what was given, the report says (``Tuned``).
"""

from __future__ import annotations

import itertools
from typing import Mapping, NamedTuple

from ..devices import DeviceSpec
from ..topology import Topology
from .model import RECOMPUTE, Options, Parallel, Schedule, Transformer
from .step import StepEstimate, estimate_step

MAX_MICROBATCH = 16  # microbatches beyond 16 sequences gain nothing on the kernel model (full waves)


class Tuned(NamedTuple):
    """The chosen step, the options that were chosen (not given, with more than one value to
    choose from) and how many candidates were priced."""

    step: StepEstimate
    chosen: tuple[str, ...]
    candidates: int


def choices(model: Transformer, par: Parallel, batch: int) -> dict[str, tuple]:
    """Every value each open option may take for this model and layout."""
    per_replica = batch // par.dp if batch % par.dp == 0 else 0
    micro = tuple(b for b in range(1, min(per_replica, MAX_MICROBATCH) + 1) if per_replica % b == 0) or (1,)
    schedules = [Schedule()]
    if par.pp > 1:
        schedules += [Schedule("interleaved", v) for v in range(2, 9) if model.layers % (par.pp * v) == 0]
    return {"microbatch": micro, "schedule": tuple(schedules), "recompute": RECOMPUTE, "zero": (0, 1, 2, 3),
            "sequence_parallel": (False, True) if par.tp > 1 else (False,)}


def tune(model: Transformer, par: Parallel, given: Mapping, device: DeviceSpec, topology: Topology) -> Tuned:
    """The fastest step that fits, ``given`` fixing some options (``batch`` at least); if nothing
    fits, the one that needs least memory (its ``fits`` says so)."""
    if "batch" not in given:
        raise ValueError("a training step needs its batch (sequences per step)")
    open_ = {k: v for k, v in choices(model, par, given["batch"]).items() if k not in given}
    best = smallest = None
    count = 0
    for values in itertools.product(*open_.values()):
        opt = Options(**given, **dict(zip(open_, values)))
        try:
            est = estimate_step(model, par, opt, device, topology)
        except ValueError:  # this combination does not divide (microbatches, virtual stages)
            continue
        count += 1
        if est.fits and (best is None or est.step_seconds < best.step_seconds):
            best = est
        if smallest is None or est.peak_bytes < smallest.peak_bytes:
            smallest = est
    if smallest is None:
        estimate_step(model, par, Options(**given), device, topology)  # raises the reason nothing divides
    return Tuned(best or smallest, tuple(k for k, v in open_.items() if len(v) > 1), count)


__all__ = ["Tuned", "choices", "tune"]
