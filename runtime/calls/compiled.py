"""A program compiled once onto a set of devices and run again and again, on either backend.

``compile_on(devices, f, *args, ...)`` traces, propagates and partitions ``f`` and loads the
schedules on ``devices`` (a ``RayMesh`` or a ``LocalMesh``); the ``Compiled`` it returns is called
with ``f``'s arguments, numpy arrays or ``DeviceArray``s already on the devices, and gives a
``Result``: outputs assembled on demand (``outputs``) or left on the devices (``arrays``), and
what the run cost. A devices object provides ``mesh``, ``load``, ``execute``, ``put_shards`` (each
device's block onto it: device -> handle) and ``fetch`` (handles back to arrays).

The compiler's stages (tracing, propagation, partitioning) are imported when a program is
compiled, inside the functions: every device process imports ``simshard.runtime`` as it starts
and needs none of them (a device worker's start-up is half spent importing otherwise).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import numpy as np
import optree

from ..core.placement import assemble_outputs, input_shards
from .comm_debug import observe_run
from .device_array import DeviceArray, matches, output_arrays, place


def _leaves(args, static) -> list:
    """The leaves of the non-static arguments, in the program's input order; DeviceArrays as they are."""
    dynamic = tuple(a for i, a in enumerate(args) if i not in static)
    return optree.tree_leaves(dynamic, none_is_leaf=False)


def _abstract(args):
    """The arguments with each DeviceArray as its ShapeDtype (tracing needs no data)."""
    from simshard.tracing import ShapeDtype

    return optree.tree_map(lambda x: ShapeDtype(x.shape, x.dtype) if isinstance(x, DeviceArray) else x, args,
                           none_is_leaf=False)


def _shardings_of(args):
    """in_shardings taken from the arguments: each DeviceArray's own (as jit adopts a committed
    array's), None for the rest."""
    return tuple(optree.tree_map(lambda x: x.sharding if isinstance(x, DeviceArray) else None, a,
                                 none_is_leaf=False) for a in args)


def compile_on(devices, f, *args, in_shardings=None, out_shardings=None, static_argnums: Sequence[int] = (),
               strategy: str = "user_priority", device_memory=None, timeout: float = 10.0,
               algorithm: str = "direct") -> "Compiled":
    """Trace, propagate and partition ``f`` (the arguments of ``ss.run``) and load the schedules
    on ``devices`` once. DeviceArray arguments stand for their shape and dtype and, without
    ``in_shardings``, give their own shardings."""
    from simshard.partition import partition
    from simshard.propagate.prepare import prepare, static_of

    if in_shardings is None and any(isinstance(x, DeviceArray) for x in optree.tree_leaves(args, none_is_leaf=False)):
        in_shardings = _shardings_of(args)
    program, _ = prepare(f, *_abstract(args), mesh=devices.mesh, in_shardings=in_shardings,
                         out_shardings=out_shardings, static_argnums=static_argnums, strategy=strategy)
    spmd = partition(program)
    key = devices.load(spmd, device_memory=device_memory, timeout=timeout, algorithm=algorithm)
    return Compiled(devices, key, spmd, program, static_of(f, static_argnums))


def put(devices, x, sharding=None):
    """``x`` (an array or a pytree of them) onto ``devices``, sharded by ``sharding`` (a
    PartitionSpec, NamedSharding, Sharding, DTensorSpec or Shardy text, or a pytree of them; None
    puts a whole copy on every device): DeviceArrays."""
    from simshard.ir.program import Aval
    from simshard.propagate.prepare import parse_text
    from simshard.tracing.tracer import broadcast_prefix, resolve_sharding

    leaves, tree = optree.tree_flatten(x, none_is_leaf=False)
    specs = broadcast_prefix(parse_text(sharding, devices.mesh), x, "sharding")
    out = []
    for i, (a, spec) in enumerate(zip(leaves, specs)):
        a = np.asarray(a)
        s = resolve_sharding(spec, Aval(a.shape, a.dtype), f"put: leaf {i}", devices.mesh)
        out.append(place(a, s, devices.devices, devices.put_shards, devices.fetch))
    return optree.tree_unflatten(tree, out)


class Compiled:
    """A program loaded on a set of devices: call it with the function's arguments to run it."""

    def __init__(self, devices, key, spmd, program, static: frozenset[int]):
        self.devices = devices
        self.key = key
        self.spmd = spmd
        self.program = program
        self.static = static

    def inputs(self, *args) -> dict[int, list]:
        """Each device's input shards for ``args``: numpy arrays sharded here, DeviceArrays' own
        shards as they are (their sharding must be the program's, ``matches``)."""
        leaves = _leaves(args, self.static)
        if len(leaves) != len(self.spmd.in_shardings):
            raise ValueError(f"the program takes {len(self.spmd.in_shardings)} arrays, got {len(leaves)}")
        shards: dict[int, list] = {d: [] for d in self.spmd.devices}
        for i, x in enumerate(leaves):
            if isinstance(x, DeviceArray):
                matches(x, self.spmd.in_shardings[i], partial(self.input_name, i))
                per = x.shards
            else:
                per = input_shards(self.spmd, i, np.asarray(x))
            for d in shards:
                shards[d].append(per[d])
        return shards

    def input_name(self, i: int) -> str:
        """Input ``i`` in words, with its label where the program has one."""
        label = self.program.label(self.program.inputs[i]) if self.program is not None else ""
        return f"input {i}" + (f" ({label})" if label else "")

    def __call__(self, *args, trace_values: bool = False, retries: int = 0) -> "Result":
        execution = self.devices.execute(self.key, self.spmd, self.inputs(*args), trace_values=trace_values,
                                         retries=retries)
        observe_run("compiled call", execution, self.program, self.spmd)
        return Result(self, execution)


class Result:
    """One run of a ``Compiled``: outputs stay on the devices until ``outputs`` / ``shards``, or
    are handed on as DeviceArrays (``arrays``)."""

    def __init__(self, compiled: Compiled, execution):
        self.compiled = compiled
        self.execution = execution
        self.controller_calls = getattr(execution, "controller_calls", {})

    def _tree(self, leaves) -> Any:
        tree = self.compiled.program.out_tree
        return leaves if tree is None else optree.tree_unflatten(tree, list(leaves))

    @property
    def outputs(self):
        outputs = self.execution.outputs
        got = outputs.fetch() if hasattr(outputs, "fetch") else outputs
        return self._tree(assemble_outputs(self.compiled.spmd, got))

    @property
    def arrays(self):
        """The outputs as DeviceArrays, in the function's output structure, left on the devices."""
        outputs = self.execution.outputs
        handles = outputs.handles() if hasattr(outputs, "handles") else outputs
        return self._tree(output_arrays(self.compiled.spmd, handles, self.compiled.devices.fetch))

    def shards(self, device: int) -> tuple[np.ndarray, ...]:
        return tuple(self.execution.outputs[device])

    @property
    def comm(self):
        return self.execution.comm

    @property
    def memory(self):
        return self.execution.memory

    @property
    def records(self):
        return self.execution.records


__all__ = ["Compiled", "Result", "compile_on", "put"]
