"""From global arrays to each device's input shards, and back from output shards.

Both directions go through ``simshard.sharding.layout``, the one place that decides which elements each
device holds. Input shards are the layout's local blocks (unpadded: a schedule pads where it
needs to); output shards must have the layout's local shapes too (a schedule slices its padding
off before it returns).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from simshard.dtypes import bit_equal
from simshard.errors import ReplicaMismatchError
from simshard.sharding.layout import layout
from simshard.spmd import SpmdProgram


def _spec(spmd: SpmdProgram, shardings, i: int, what: str):
    if i >= len(shardings):
        raise ValueError(f"the SpmdProgram has {len(shardings)} {what} shardings; no sharding for {what} {i}")
    return shardings[i]


def shard_inputs(spmd: SpmdProgram, *arrays) -> dict[int, list[np.ndarray]]:
    """Each device's local shards of the global ``arrays``, per ``spmd.in_shardings`` (a None
    sharding replicates the array on every device)."""
    if len(arrays) != len(spmd.in_shardings):
        raise ValueError(f"the program takes {len(spmd.in_shardings)} inputs, got {len(arrays)}")
    out: dict[int, list[np.ndarray]] = {d: [] for d in spmd.devices}
    for i, a in enumerate(arrays):
        shards = input_shards(spmd, i, np.asarray(a))
        for d in out:
            out[d].append(shards[d])
    return out


def input_shards(spmd: SpmdProgram, i: int, a: np.ndarray) -> dict[int, np.ndarray]:
    """Each device's shard of input ``i``, the global array ``a``."""
    spec = spmd.in_shardings[i]
    if spec is None:
        return {d: a.copy() for d in spmd.devices}
    shards = layout(spec, a.shape).shard(a)
    for d in spmd.devices:
        if d not in shards:
            raise ValueError(f"input {i}'s sharding does not place anything on device {d}")
    return shards


def output_shapes(spmd: SpmdProgram) -> tuple[tuple[int, ...], ...]:
    program = spmd.program
    if program is None or not hasattr(program, "outputs"):
        raise ValueError("the SpmdProgram carries no Program; pass the outputs' global shapes")
    return tuple(tuple(v.aval.shape) for v in program.outputs)


def assemble_outputs(spmd: SpmdProgram, outputs: Mapping[int, Sequence[np.ndarray]],
                     shapes: Sequence[Sequence[int]] | None = None) -> tuple[np.ndarray, ...]:
    """Global outputs from every device's output shards, per ``spmd.out_shardings`` (a None
    sharding: every device holds the whole output, and all copies must agree bit for bit)."""
    shapes = output_shapes(spmd) if shapes is None else tuple(tuple(int(n) for n in s) for s in shapes)
    result = []
    for i, shape in enumerate(shapes):
        spec = _spec(spmd, spmd.out_shardings, i, "output")
        shards = {d: np.asarray(outputs[d][i]) for d in spmd.devices}
        if spec is None:
            result.append(_replicated(shards, shape, i))
            continue
        result.append(layout(spec, shape).assemble(shards))
    return tuple(result)


def _replicated(shards: Mapping[int, np.ndarray], shape, i: int) -> np.ndarray:
    devices = sorted(shards)
    first = shards[devices[0]]
    for d in devices:
        a = shards[d]
        if a.shape != tuple(shape):
            raise ValueError(f"output {i}: device {d} holds shape {a.shape}, the output has shape {tuple(shape)}")
        if a.dtype != first.dtype or not bit_equal(a, first).all():
            raise ReplicaMismatchError(f"output {i} is replicated but devices {devices[0]} and {d} hold different bits")
    return first
