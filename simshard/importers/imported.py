"""``ImportedFunction``: a framework's program as a function simshard takes wherever it takes a
program (``ss.run``, ``ss.jit``, ``ss.estimate``, ``simshard run FILE.py``).

Like an ``ss.jit`` function it traces itself (``.trace(*args)``: the framework's graph of those
arguments, interpreted as ops of the registry, with the shardings the framework states), is
evaluated whole in numpy when called outside a trace, and inlines when called inside one. It also
runs the framework itself on the same inputs (``framework_reference``), for ``ss.run``'s report.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import optree

from ..ir import trace_stack
from ..ir.program import Program
from ..tracing.interpret import evaluate
from ..tracing.tracer import ShapeDtype, trace
from .common import FrameworkOutputs


class Built(NamedTuple):
    """What an importer makes of one call's arguments: the function to trace (the arguments as
    given, Tracers in place of arrays), the shardings the framework states, their mesh."""

    fn: Callable
    in_shardings: Any
    out_shardings: Any
    mesh: Any


def named_like(fn: Callable, names: Sequence[str]) -> Callable:
    """``fn`` (taking its arguments positionally) with the signature ``(names...)``: the program's
    inputs take the framework function's argument names (``ids``, ``labels``), as reports show them."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names if n.isidentifier()]
    if len(params) == len(names):
        fn.__signature__ = inspect.Signature(params)
    return fn


def argument_names(fn: Callable, n: int) -> list[str]:
    """The names of ``fn``'s first ``n`` positional parameters, ``arg{i}`` where it has none."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return (params + [f"arg{i}" for i in range(len(params), n)])[:n]


class FrameworkNotRunWarning(UserWarning):
    """The framework could not run the function here (an abstract mesh, too few devices): the run
    is verified against numpy only, and says so."""


class ImportedFunction:
    """See the module docstring. ``build(args) -> Built``; ``reference(args) -> FrameworkOutputs``."""

    static_argnums: tuple[int, ...] = ()

    def __init__(self, name: str, build: Callable[[tuple], Built], reference: Callable[[tuple], FrameworkOutputs]):
        self.__name__ = name
        self.build = build
        self.reference = reference

    def trace(self, *args) -> Program:
        built = self.build(args)
        return trace(built.fn, *args, in_shardings=built.in_shardings, out_shardings=built.out_shardings,
                     mesh=built.mesh)

    def __call__(self, *args):
        if trace_stack.current() is not None:  # inside another trace: inlined
            return self.build(args).fn(*args)
        program = self.trace(*args)
        outs = evaluate(program, *optree.tree_leaves(args, none_is_leaf=False))
        return optree.tree_unflatten(program.out_tree, list(outs))

    def framework_reference(self, *args) -> FrameworkOutputs | None:
        """The framework's outputs for ``args`` (None for abstract arguments: nothing to run)."""
        if any(isinstance(a, ShapeDtype) for a in optree.tree_leaves(args, none_is_leaf=False)):
            return None
        try:
            return self.reference(args)
        except Exception as e:  # noqa: BLE001  (any framework error: the run stands, this comparison does not)
            warnings.warn(f"{self.__name__}: the framework could not run it on this machine ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}), so its outputs are not compared with the "
                          "framework's, only with numpy's", FrameworkNotRunWarning, stacklevel=2)
            return None

    def __repr__(self) -> str:
        return f"<imported {self.__name__}>"
