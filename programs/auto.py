"""The ``auto`` strategy of a library program: ``ss.autoshard`` searching it, as a forward pass or
as a training step, on a given mesh and memory budget.

In a training step (``mode="sgd"`` / ``"adam"``) the new parameters and optimizer state are
tied to where the old ones were read (``ties``): a step that returned its parameters laid out
otherwise would not be a step a training loop can repeat. Searches are remembered per program,
mesh, mode, budget and topology, so that ``compare`` and ``run`` of one strategy search once.
"""

from __future__ import annotations

from typing import Callable

import optree

from simshard.autoshard import AutoStrategy, autoshard
from simshard.sharding.mesh import Mesh

from .training import OPTIMIZERS, train_step

AUTO = "auto"
_SEARCHED: dict = {}


def step_and_ties(program, mode: str) -> tuple[Callable, tuple, tuple[tuple[int, int], ...]]:
    """The function ``auto`` searches, its arguments, and its (output leaf, input leaf) ties."""
    if mode == "forward":
        return program.fn, tuple(program.inputs()), ()
    params, x, y = program.training.inputs()
    optimizer = OPTIMIZERS[mode]()
    state = optimizer.init(params)
    n = len(optree.tree_leaves((params, state), none_is_leaf=False))
    step = train_step(program.training.forward or program.fn, optimizer)
    return step, (params, state, x, y), tuple((1 + i, i) for i in range(n))  # outputs: loss, params, state


def search(program, mesh: Mesh, mode: str = "forward", device_memory: int | None = None, topology=None,
           **options) -> AutoStrategy:
    """``ss.autoshard`` of ``program`` on ``mesh`` (remembered; module docstring)."""
    key = (program.name, mesh, mode, device_memory, repr(topology), tuple(sorted(options.items())))
    if key not in _SEARCHED:
        f, args, ties = step_and_ties(program, mode)
        _SEARCHED[key] = autoshard(f, *args, mesh=mesh, device_memory=device_memory, topology=topology, ties=ties,
                                   **options)
    return _SEARCHED[key]
