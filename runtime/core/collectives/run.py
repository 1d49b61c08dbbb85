"""Running a schedule's collective instruction: its signature (what every member must agree on) and
the collective its kind and the algorithm choose, both tables checked against the instruction
set's collective kinds."""

from __future__ import annotations

from typing import Awaitable

import numpy as np

from simshard.spmd.dispatch import COLLECTIVE_KINDS, dispatch_table

from ...errors import CollectiveError
from .channel import Channel, check_algorithm
from .direct import all_gather, all_reduce, all_to_all, collective_permute, reduce_scatter
from .ring import oneshot_all_reduce, ring_all_gather, ring_all_reduce, ring_reduce_scatter


def signature(instr, dtype=None, shape=None) -> tuple:
    """What must be equal on every device that runs one collective instruction together (plain
    data: it travels with each message and is compared on receipt)."""
    body = SIGNATURES.get(instr.kind)
    if body is None:
        raise CollectiveError(f"{instr.kind} is not a collective")
    if instr.kind == "collective_permute":  # no dtype: a device that only receives holds no buffer
        return (instr.kind,) + body(instr, shape)
    return (instr.kind,) + body(instr, shape) + (None if dtype is None else np.dtype(dtype).str,)


# each collective kind's signature fields, (instruction, all-reduce shape) -> tuple
SIGNATURES = dispatch_table({
    "all_gather": lambda instr, shape: (tuple(instr.group), instr.axis),
    "reduce_scatter": lambda instr, shape: (tuple(instr.group), instr.axis, tuple(instr.splits), instr.reduce_op),
    "all_reduce": lambda instr, shape: (tuple(instr.group), instr.reduce_op,
                                        tuple(shape) if shape is not None else None),
    "all_to_all": lambda instr, shape: (tuple(instr.group), instr.split_axis, tuple(instr.splits), instr.concat_axis),
    "collective_permute": lambda instr, shape: (tuple(tuple(p) for p in instr.pairs),),
}, "runtime/core/collectives/run.py (signature)", COLLECTIVE_KINDS)


def _run_all_gather(ch: Channel, instr, x, algorithm: str) -> Awaitable[np.ndarray]:
    return (ring_all_gather if algorithm == "ring" else all_gather)(ch, x, instr.group, instr.axis)


def _run_reduce_scatter(ch: Channel, instr, x, algorithm: str) -> Awaitable[np.ndarray]:
    return (ring_reduce_scatter if algorithm == "ring" else reduce_scatter)(
        ch, x, instr.group, instr.axis, instr.splits, instr.reduce_op, getattr(instr, "reduce_order", ()))


def _run_all_reduce(ch: Channel, instr, x, algorithm: str) -> Awaitable[np.ndarray]:
    chosen = {"ring": ring_all_reduce, "oneshot": oneshot_all_reduce}.get(algorithm, all_reduce)
    return chosen(ch, x, instr.group, instr.reduce_op)


def _run_all_to_all(ch: Channel, instr, x, algorithm: str) -> Awaitable[np.ndarray]:
    return all_to_all(ch, x, instr.group, instr.split_axis, instr.splits, instr.concat_axis)


def _run_collective_permute(ch: Channel, instr, x, algorithm: str) -> Awaitable[np.ndarray]:
    return collective_permute(ch, x, instr.pairs, instr.shape, instr.dtype)


# each collective kind run under an algorithm (all-to-all and permute run direct under any)
RUNS = dispatch_table({
    "all_gather": _run_all_gather, "reduce_scatter": _run_reduce_scatter, "all_reduce": _run_all_reduce,
    "all_to_all": _run_all_to_all, "collective_permute": _run_collective_permute,
}, "runtime/core/collectives/run.py (run_collective)", COLLECTIVE_KINDS)


def runner(kind: str):
    """What runs a collective of ``kind`` (``RUNS``' entry: (channel, instruction, buffer,
    algorithm) -> the result), or the error naming a kind that is none."""
    run = RUNS.get(kind)
    if run is None:
        raise CollectiveError(f"{kind} is not a collective")
    return run


def run_collective(ch: Channel, instr, x: np.ndarray | None, algorithm: str = "direct") -> Awaitable[np.ndarray]:
    """Run a schedule's collective instruction on this device's buffer ``x``."""
    check_algorithm(algorithm)
    return runner(instr.kind)(ch, instr, x, algorithm)
