"""simshard's programs library (imported as ``simshard.programs``): real sharded programs.

Each module defines one ``PROGRAM``: a plain numpy function, how to make its (exact-arithmetic)
inputs, a default mesh and a set of named strategies, so that any (program, strategy, mesh)
triple can be run by name:

    from simshard import programs
    prog = programs.load("mlp")                 # a module name here, or a path to a .py file
    res = prog.run("megatron", mesh={"x": 2, "y": 4}, backend="local")
    res.verify.bitwise, res.comm.total_bytes

A strategy is data (input / output shardings, a propagation strategy) or, where it needs more
than shardings (scalax rules, constraints inside the function, explicit mode), a ``build``
function that returns the function to run on a given mesh.

A program with ``training`` also runs each strategy as a training step (``mode="sgd"`` or
``"adam"``: value_and_grad of a squared-error loss, then the optimizer; ``programs.training``),
with the parameters (and the optimizer state) laid out as the strategy lays them out.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from simshard.errors import ShardingError
from simshard.propagate.prepare import prepare
from simshard.report.estimate import estimate
from simshard.sharding.mesh import Mesh

from .auto import AUTO, search
from .training import OPTIMIZERS, step_shardings, train_step

__all__ = ["ProgramCost", "ProgramDef", "Strategy", "Training", "load", "names"]

FORWARD = "forward"


@dataclass(frozen=True)
class Strategy:
    """One way to shard a program.

    ``in_shardings`` / ``out_shardings`` are given to ``ss.run`` as they are (PartitionSpecs,
    NamedShardings, Shardy text, ...). ``build(mesh)``, when given, returns the function to run
    instead of the program's own (an ``ss.jit`` / ``sjit`` function carrying its shardings, a
    variant with sharding constraints or ``out_sharding``); ``mesh`` overrides the program's
    default mesh for this strategy; ``propagation`` names the Shardy propagation strategy;
    ``inputs``, when given, makes this strategy's arguments instead of the program's (a program
    whose strategies run several sizes, like conv's seed layer and its ResNet-50 layer).
    ``reference`` is the plain function the outputs are verified against: by default the
    program's ``fn`` (so a built variant, a ``shard_map`` region say, is checked against the
    model and not against itself); give another for a strategy that computes something else.
    """

    name: str
    about: str
    in_shardings: Any = None
    out_shardings: Any = None
    build: Callable[[Mesh], Callable] | None = None
    mesh: Mapping[str, int] | None = None
    propagation: str = "user_priority"
    inputs: Callable[[], tuple] | None = None
    reference: Callable | None = None
    # a searched strategy (``auto``): ``search(mesh, mode)`` returns the function to run, carrying
    # every layout it chose (an ``ss.AutoStrategy``), for the forward pass or the training step
    search: Callable[[Mesh, str], Callable] | None = None


@dataclass(frozen=True)
class Training:
    """How a program trains: ``inputs()`` makes ``(params, x, y)`` (exact arithmetic through the
    backward pass: usually smaller values and a bigger batch than the forward inputs), and
    ``layout(strategy, mesh)`` gives ``(param_specs, x_spec, y_spec)``, the strategy's layout of
    the parameters and the batch (for a built strategy, the one its rules give)."""

    about: str
    inputs: Callable[[], tuple]
    layout: Callable[[Strategy, Mesh], tuple]
    # the model trained, ``forward(params, x)``: None for the program's own ``fn``
    forward: Callable | None = None
    # the strategies that train (None: all); the others run forward only
    strategies: tuple[str, ...] | None = None
    # strategy name -> the model that strategy trains instead of ``forward``: the same function
    # written for it (FSDP's weights gathered again in the backward pass, say)
    variants: Mapping[str, Callable] = field(default_factory=dict)

    def trains(self, strategy: Strategy) -> bool:
        """Whether ``strategy`` runs the training step: the listed ones, and a searched one
        (``auto`` searches the step itself, whatever the hand-written strategies train)."""
        return self.strategies is None or strategy.name in self.strategies or strategy.search is not None

    def model(self, strategy: Strategy, fn: Callable) -> Callable:
        """The model ``strategy`` trains: its variant, else ``forward``, else the program's ``fn``."""
        return self.variants.get(strategy.name) or self.forward or fn


@dataclass(frozen=True)
class ProgramCost:
    """A program's own cost of one strategy, the one its domain pays (CKKS operations on a
    ciphertext mesh, say), ranked ahead of communication by ``compare``.

    Only strategies of one ``group`` (computing the same layer) are ranked against each other,
    by ``key``, smaller first; ``values`` are the columns shown, name -> int, float or text.
    """

    model: str
    group: str
    key: tuple[int | float, ...]
    values: tuple[tuple[str, int | float | str], ...]


@dataclass(frozen=True)
class ProgramDef:
    """A program of the library: its function, its inputs, its default mesh and its strategies."""

    name: str
    about: str
    fn: Callable
    inputs: Callable[[], tuple]  # () -> the positional arguments (exact-arithmetic arrays / pytrees)
    mesh: Mapping[str, int]
    strategies: tuple[Strategy, ...]
    extras: Mapping[str, Any] = field(default_factory=dict)  # program-specific facts (formulas, notes)
    # the plain model on a given mesh, for a program whose result depends on the device count (a
    # manual region's per-device code); None: ``fn`` on every mesh
    reference_for: Callable[[Mesh], Callable] | None = None
    training: Training | None = None
    # the program's own cost of a strategy on a mesh (ProgramCost, or None where it has none),
    # ranked before bytes; None: bytes and time only
    cost: Callable[[Strategy, Mesh], ProgramCost | None] | None = None

    def __post_init__(self):
        seen = [s.name for s in self.strategies]
        if len(set(seen)) != len(seen):
            raise ValueError(f"program {self.name!r}: strategy names repeat: {seen}")

    @property
    def modes(self) -> tuple[str, ...]:
        """``"forward"``, and the optimizers' names where the program has a training step."""
        return (FORWARD,) + (tuple(OPTIMIZERS) if self.training is not None else ())

    @property
    def default_mode(self) -> str:
        """What ``compare`` shows unless told: the SGD training step where there is one."""
        return "sgd" if self.training is not None else FORWARD

    def describe_mode(self, mode: str) -> str:
        if mode == FORWARD:
            return "forward pass"
        return f"training step: value_and_grad of {self.training.about}, then {OPTIMIZERS[mode]().about}"

    def _check_mode(self, mode: str, strategy: Strategy | None = None) -> None:
        if mode not in self.modes:
            raise ShardingError("unknown-mode", f"program {self.name!r} runs modes {', '.join(self.modes)}, not {mode!r}"
                                + ("" if self.training else " (it has no training step)"))
        if mode != FORWARD and strategy is not None and not self.training.trains(strategy):
            raise ShardingError("unknown-mode", f"strategy {strategy.name!r} of program {self.name!r} runs forward only "
                                f"(training steps: {', '.join(self.training.strategies)})")

    @property
    def strategy_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.strategies)

    def strategy(self, name: "Strategy | str | None" = None) -> Strategy:
        """The strategy called ``name`` (the first one when None; a Strategy as it is)."""
        if isinstance(name, Strategy):
            return name
        if name is None:
            return self.strategies[0]
        for s in self.strategies:
            if s.name == name:
                return s
        raise ShardingError("unknown-strategy",
                            f"program {self.name!r} has no strategy {name!r} (it has: {', '.join(self.strategy_names)})")

    def cost_of(self, strategy: "Strategy | str | None" = None, mesh=None) -> ProgramCost | None:
        """The program's own cost of ``strategy`` on ``mesh`` (None: the strategy's own), or None
        when the program has no cost model or none for that mesh."""
        if self.cost is None:
            return None
        s = self.strategy(strategy)
        return self.cost(s, self.mesh_for(s, mesh))

    def mesh_for(self, strategy: Strategy | str | None = None, mesh: Mesh | Mapping[str, int] | None = None) -> Mesh:
        """The mesh a run uses: ``mesh`` if given, else the strategy's, else the program's."""
        s = self.strategy(strategy)
        chosen = mesh if mesh is not None else (s.mesh if s.mesh is not None else self.mesh)
        return chosen if isinstance(chosen, Mesh) else Mesh(dict(chosen))

    def inputs_for(self, strategy: Strategy | str | None = None, mode: str = FORWARD) -> tuple:
        """The arguments a run of ``strategy`` uses: its own ``inputs`` if it has some, else the
        program's; a training step's are ``(params, optimizer state, x, y)``."""
        s = self.strategy(strategy)
        if mode == FORWARD:
            return tuple((s.inputs or self.inputs)())
        params, x, y = self.training.inputs()
        return params, OPTIMIZERS[mode]().init(params), x, y

    def _call(self, s: Strategy, m: Mesh, mode: str = FORWARD) -> tuple[Callable, dict]:
        """The function and the sharding keywords one strategy gives ``ss.run`` / ``prepare``."""
        self._check_mode(mode, s)
        if s.search is not None:
            return s.search(m, mode), dict(mesh=m, strategy=s.propagation)
        if mode != FORWARD:
            optimizer = OPTIMIZERS[mode]()
            ins, outs = step_shardings(optimizer, *self.training.layout(s, m))
            return train_step(self.training.model(s, self.fn), optimizer), dict(
                mesh=m, in_shardings=ins, out_shardings=outs, strategy=s.propagation)
        if s.build is not None:
            return s.build(m), dict(mesh=m, strategy=s.propagation)  # run() verifies it against fn
        return self.fn, dict(mesh=m, in_shardings=s.in_shardings, out_shardings=s.out_shardings,
                             strategy=s.propagation)

    def program(self, strategy: Strategy | str | None = None, *, mesh=None, mode: str = FORWARD):
        """The propagated Program one strategy runs (traced and propagated, not executed): what
        ``run`` partitions, for ``explain``."""
        s = self.strategy(strategy)
        f, kw = self._call(s, self.mesh_for(s, mesh), mode)
        return prepare(f, *self.inputs_for(s, mode), **kw)[0]

    def estimate(self, strategy: Strategy | str | None = None, *, mesh=None, mode: str = FORWARD, topology=None):
        """What ``run`` would record (communication, memory) and the alpha-beta time under
        ``topology``, without data: ``simshard.report.estimate``."""
        s = self.strategy(strategy)
        f, kw = self._call(s, self.mesh_for(s, mesh), mode)
        return estimate(f, *self.inputs_for(s, mode), topology=topology, **kw)

    def run(self, strategy: Strategy | str | None = None, *, mesh=None, mode: str = FORWARD, **run_options):
        """Run one strategy with ``ss.run`` (``backend=``, ``address=``, ... pass through), as a
        forward pass or (``mode="sgd"`` / ``"adam"``) as a training step."""
        from simshard.runtime.front.api import run  # the runtime: ~40 ms of asyncio and sockets, only when a program runs

        s = self.strategy(strategy)
        m = self.mesh_for(s, mesh)
        f, kw = self._call(s, m, mode)
        if mode == FORWARD:
            run_options.setdefault("reference", self.reference(s, m))
        return run(f, *self.inputs_for(s, mode), **kw, **run_options)

    def auto(self, device_memory: int | None = None, topology=None, **options) -> Strategy:
        """The strategy ``ss.autoshard`` finds on each mesh and mode within ``device_memory`` bytes
        per device (``programs.auto``), named ``auto``."""
        def searched(mesh: Mesh, mode: str):
            return search(self, mesh, mode, device_memory, topology, **options)

        budget = "" if device_memory is None else f" within {device_memory:,} bytes per device"
        return Strategy(AUTO, f"searched by ss.autoshard: least estimated step time{budget}", search=searched)

    def reference(self, strategy: Strategy | str | None = None, mesh=None) -> Callable:
        """The plain model a run of ``strategy`` on ``mesh`` is verified against: the strategy's
        own ``reference``, else ``reference_for(mesh)``, else ``fn``. A built variant (sjit,
        explicit mode, a shard_map region) is so checked against the model, not against itself."""
        s = self.strategy(strategy)
        if s.reference is not None:
            return s.reference
        if self.reference_for is not None:
            return self.reference_for(self.mesh_for(s, mesh))
        return self.fn


def names() -> tuple[str, ...]:
    """The programs of this library, by module name."""
    here = Path(__file__).parent
    return tuple(sorted(m.name for m in pkgutil.iter_modules([str(here)])
                        if not m.name.startswith("_") and _defines_program(here / f"{m.name}.py")))


def _defines_program(path: Path) -> bool:
    return path.exists() and "\nPROGRAM" in path.read_text()


def load(name: str) -> ProgramDef:
    """The ``PROGRAM`` of a library module (``"mlp"``) or of a Python file (``"path/to/mine.py"``)."""
    if name.endswith(".py") or "/" in name or Path(name).suffix:
        path = Path(name)
        if path.suffix != ".py":
            raise ShardingError("unknown-program", f"{name!r} is not a program: give a program of the library "
                                f"({', '.join(names())}) or a .py file that defines PROGRAM")
        if not path.exists():
            raise ShardingError("unknown-program", f"no program file {name!r}")
        spec = importlib.util.spec_from_file_location(f"simshard_user_program_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    else:
        if name not in names():
            raise ShardingError("unknown-program", f"no program {name!r} (available: {', '.join(names())})")
        module = importlib.import_module(f"{__name__}.{name}")
    program = getattr(module, "PROGRAM", None)
    if not isinstance(program, ProgramDef):
        raise ShardingError("unknown-program", f"{name!r} defines no PROGRAM (a simshard.programs.ProgramDef)")
    return program
