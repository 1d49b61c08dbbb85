"""Programs by name for the commands: loading one, picking its strategies, running or
propagating one strategy.

``simshard.programs.load`` reads a library name (``mlp``) or a ``.py`` file defining
``PROGRAM``; here its failures become ``UsageError``s (a program file that does not even import
is reported with its own file and line, not a traceback into simshard).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simshard import programs
from simshard.errors import ReplicaMismatchError, ShardingError

from .errors import UsageError


def load_program(name: str):
    """The ``ProgramDef`` called ``name`` (a library module or a path to a .py file)."""
    try:
        return programs.load(name)
    except ShardingError:
        raise
    except Exception as e:  # the user's file raised while it was imported
        raise UsageError(f"cannot load program {name!r}: {type(e).__name__}: {e}{_where(e, name)}") from None


def _where(e: BaseException, name: str) -> str:
    """`` (at file.py:12)``: the innermost frame of the program file in the traceback."""
    if isinstance(e, SyntaxError) and e.lineno:
        return f" (at {e.filename}:{e.lineno})"
    target = Path(name).resolve() if name.endswith(".py") else None
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if target is not None and Path(frame.filename).resolve() == target:
            return f" (at {name}:{frame.lineno})"
    return ""


def strategies(program, names: str | None) -> list:
    """The strategies a comma-separated ``--strategies`` list names (all when None), in its order."""
    if names is None:
        return list(program.strategies)
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    if not chosen:
        raise UsageError("--strategies is empty; name one or more, e.g. dp,megatron")
    return [program.strategy(n) for n in chosen]


@dataclass(frozen=True)
class Outcome:
    """One strategy run: its RunResult, or why the outputs could not even be assembled."""

    strategy: Any  # simshard.programs.Strategy
    mesh: Any  # the Mesh it ran on
    result: Any = None  # simshard.runtime.front.api.RunResult
    failure: str | None = None  # set when replicas disagreed and no result exists
    error: str | None = None  # set when the run could not finish (a device ran out of memory)
    seconds: float = 0.0
    estimated: bool = False  # result is an ss.estimate Estimate (comm, memory), nothing ran


def estimate_strategy(program, strategy, mesh, mode: str = "forward") -> Outcome:
    """Cost ``strategy`` of ``program`` on ``mesh`` without running it (``ProgramDef.estimate``):
    the communication and memory a run would record."""
    m = program.mesh_for(strategy, mesh)
    start = time.perf_counter()
    est = program.estimate(strategy, mesh=m, mode=mode)
    return Outcome(strategy, m, est, seconds=time.perf_counter() - start, estimated=True)


def run_strategy(program, strategy, mesh, backend: str, address: str | None = None,
                 device_memory: int | None = None, progress=None, ray_mesh=None,
                 algorithm: str = "direct", mode: str = "forward", devices_per_process: int | None = None,
                 node_axes: tuple[str, ...] | None = None) -> Outcome:
    """Run ``strategy`` of ``program`` on ``mesh`` (None: the strategy's or program's own).

    A device running out of ``device_memory`` is this strategy's outcome (``error``), so that
    ``compare`` goes on with the others; any other failure of the run propagates."""
    from simshard.runtime.errors import DeviceOutOfMemoryError  # the runtime (~40 ms) only for a run

    m = program.mesh_for(strategy, mesh)
    options = {"backend": backend, "progress": progress, "algorithm": algorithm, "mode": mode}
    if ray_mesh is not None:
        options["ray_mesh"] = ray_mesh  # its actors: address= went to the RayMesh
    else:
        if address is not None:
            options["address"] = address
        if devices_per_process is not None and backend == "ray":
            options["devices_per_process"] = devices_per_process
        if node_axes is not None:
            options["node_axes"] = node_axes  # the devices sharing these axes' coordinates share a Ray node
    if device_memory is not None:
        options["device_memory"] = device_memory
    start = time.perf_counter()
    try:
        res = program.run(strategy, mesh=m, **options)
    except ReplicaMismatchError as e:
        return Outcome(strategy, m, failure=f"replicas of an output disagree: {e}", seconds=time.perf_counter() - start)
    except DeviceOutOfMemoryError as e:
        return Outcome(strategy, m, error=str(e), seconds=time.perf_counter() - start)
    return Outcome(strategy, m, res, seconds=time.perf_counter() - start)


def propagated(program, strategy, mesh, mode: str = "forward"):
    """The program of ``strategy`` traced and propagated on ``mesh`` (no execution): exactly
    what ``program.run`` would partition (``ProgramDef.program``)."""
    m = program.mesh_for(strategy, mesh)
    return program.program(strategy, mesh=m, mode=mode), m


def chosen_mode(program, requested: str | None, default: str = "forward") -> str:
    """``--mode`` checked against what the program runs (a usage error naming its modes)."""
    mode = requested or default
    if mode not in program.modes:
        raise UsageError(f"program {program.name} runs --mode {', '.join(program.modes)}, not {mode}"
                         + ("" if program.training else " (it has no training step)"))
    return mode
