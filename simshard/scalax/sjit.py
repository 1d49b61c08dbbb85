"""``SJitted``: what ``MeshShardingHelper.sjit`` returns: ``.trace(*args)`` gives the simshard
Program (the rules matched against the actual arguments, concrete arrays or ``ShapeDtype``s, and
against the traced outputs), and calling it evaluates the program like ``ss.jit``.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import optree

from ..errors import ShardingError
from ..ir.program import Program
from ..sharding.mesh import Mesh
from ..sharding.partition_spec import P
from ..tracing.context import use_mesh
from ..tracing.interpret import evaluate
from ..tracing.tracer import ShapeDtype, TraceError, Tracer, trace
from .annotations import constrain, sharding_context
from .global_array import own_sharding
from .match import match
from .pytree import register_dataclasses_in

if TYPE_CHECKING:  # pragma: no cover
    from .helper import MeshShardingHelper


class UnusedAnnotationWarning(UserWarning):
    """An ``annotation_shardings`` entry that no ``with_sharding_annotation`` in the trace used."""


def _normalize_argnums(static_argnums) -> tuple[int, ...]:
    if static_argnums is None:
        return ()
    if isinstance(static_argnums, (int, np.integer)):
        return (int(static_argnums),)
    nums = tuple(static_argnums)
    if not all(isinstance(i, (int, np.integer)) for i in nums):
        raise TypeError(f"static_argnums must be ints, got {static_argnums!r}")
    return tuple(int(i) for i in nums)


def as_tuple(x):
    """A list (of shardings, per argument) as a tuple; anything else as it is."""
    return tuple(x) if isinstance(x, list) else x


class SJitted:
    """What ``sjit`` returns: ``.trace(*args)`` -> Program; calling it evaluates the program."""

    def __init__(self, helper: MeshShardingHelper, fun, in_shardings, out_shardings, static_argnums,
                 args_sharding_constraint, annotation_shardings):
        if not callable(fun):
            raise TypeError(f"sjit: {fun!r} is not callable")
        if annotation_shardings is not None:
            if not isinstance(annotation_shardings, Mapping):
                raise TypeError(
                    f"sjit: annotation_shardings must be a dict from annotation names to rules, got "
                    f"{annotation_shardings!r}"
                )
            for k in annotation_shardings:
                if not isinstance(k, str):
                    raise TypeError(f"sjit: annotation_shardings key {k!r} must be a string (an annotation name)")
        self.helper = helper
        self.fun = fun
        self.in_shardings = as_tuple(in_shardings)
        self.out_shardings = as_tuple(out_shardings)
        self.static_argnums = _normalize_argnums(static_argnums)
        self.args_sharding_constraint = as_tuple(args_sharding_constraint)
        self.annotation_shardings = dict(annotation_shardings or {})
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "sjitted")
        self._cache: dict = {}

    @property
    def mesh(self) -> Mesh:
        return self.helper.mesh

    def __repr__(self) -> str:
        return f"sjit({self.__name__})"

    # -- arguments -------------------------------------------------------------------------------
    def _static_set(self, nargs: int) -> set[int]:
        out = set()
        for i in self.static_argnums:
            j = i + nargs if i < 0 else i
            if not 0 <= j < nargs:
                raise TypeError(f"{self!r}: static_argnums {i} is out of range for {nargs} positional arguments")
            out.add(j)
        return out

    def _split(self, args) -> tuple[set[int], tuple, tuple]:
        static = self._static_set(len(args))
        for i in sorted(static):
            try:
                hash(args[i])
            except TypeError:
                raise TraceError(
                    f"{self!r}: static argument {i} ({self._arg_names(len(args))[i]} = {_short_repr(args[i])}, "
                    f"a {type(args[i]).__name__}) is not hashable; static arguments must be hashable "
                    "(use a tuple instead of a list, a frozen dataclass instead of a dict)"
                ) from None
        dyn = tuple(a for i, a in enumerate(args) if i not in static)
        return static, tuple(args[i] for i in sorted(static)), dyn

    @staticmethod
    def _combine(static: set[int], args, dyn) -> list:
        it = iter(dyn)
        return [a if i in static else next(it) for i, a in enumerate(args)]

    def _arg_names(self, nargs: int) -> list[str]:
        try:
            names = list(inspect.signature(self.fun).parameters)
        except (TypeError, ValueError):
            names = []
        return (names + [f"arg{i}" for i in range(len(names), nargs)])[:nargs]

    def _labeller(self, static: set[int], nargs: int):
        """Names leaves of the dynamic-args tuple as the program names its inputs."""
        names = [n for i, n in enumerate(self._arg_names(nargs)) if i not in static]

        def label(entries) -> str:
            if not entries:
                return "the arguments"
            head = names[entries[0].entry] if entries[0].entry < len(names) else f"arg{entries[0].entry}"
            return head + "".join(f"[{e.entry!r}]" for e in entries[1:])

        return label

    def _check_count(self, shardings, n: int, what: str) -> None:
        if isinstance(shardings, tuple) and not isinstance(shardings, P) and len(shardings) != n:
            raise ShardingError(
                "structure-mismatch",
                f"{self!r}: {what} has {len(shardings)} entries for {n} non-static arguments "
                f"(static_argnums {self.static_argnums} are excluded from {what})",
            )

    def _body(self) -> Callable:
        fun = self.fun
        if self.args_sharding_constraint is None:
            return fun

        @functools.wraps(fun)
        def body(*args):
            static, _, dyn = self._split(args)
            self._check_count(self.args_sharding_constraint, len(dyn), "args_sharding_constraint")
            dyn = constrain(dyn, self.args_sharding_constraint, "args_sharding_constraint",
                            label=self._labeller(static, len(args)))
            return fun(*self._combine(static, args, dyn))

        return body

    # -- tracing ---------------------------------------------------------------------------------
    def trace(self, *args, **kwargs) -> Program:
        """The Program of ``fun(*args)`` with every rule matched to the arguments and outputs."""

        if kwargs:
            raise TypeError(f"{self!r}: sjit functions take positional arguments only (got {sorted(kwargs)})")
        static, _, dyn = self._split(args)
        register_dataclasses_in(dyn)
        self._check_count(self.in_shardings, len(dyn), "in_shardings")
        mesh = self.mesh
        matched, treedef = match(self.in_shardings, dyn, mesh, "in_shardings", expected_mesh=mesh,
                                 label=self._labeller(static, len(args)), default=own_sharding)
        abstract = optree.tree_unflatten(
            treedef, [ShapeDtype(m.aval.shape, m.aval.dtype, m.sharding) for m in matched]
        )
        with use_mesh(mesh), sharding_context(mesh, self.annotation_shardings) as ctx:
            program = trace(self._body(), *self._combine(static, args, abstract),
                            static_argnums=tuple(sorted(static)), mesh=mesh)
        unused = sorted(set(self.annotation_shardings) - ctx.used)
        if unused:
            warnings.warn(
                f"{self!r}: annotation_shardings names {unused}, but no with_sharding_annotation in the traced "
                f"function uses {'that name' if len(unused) == 1 else 'those names'} "
                f"(annotations met: {sorted(ctx.seen) or 'none'})",
                UnusedAnnotationWarning,
                stacklevel=2,
            )
        if self.out_shardings is not None:
            program = self._with_out_shardings(program)
        return program

    lower = trace

    def _with_out_shardings(self, program: Program) -> Program:
        out_tree = program.out_tree
        shapes = optree.tree_unflatten(out_tree, [ShapeDtype(v.aval.shape, v.aval.dtype) for v in program.outputs])
        matched, _ = match(
            self.out_shardings, shapes, self.mesh, "out_shardings", expected_mesh=self.mesh,
            label=lambda entries: "output " + (repr("/".join(str(e.entry) for e in entries)) if entries else "value"),
        )
        return replace(program, out_shardings=tuple(m.sharding for m in matched))

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{self!r}: sjit functions take positional arguments only (got {sorted(kwargs)})")
        static, static_vals, dyn = self._split(args)
        leaves = optree.tree_leaves(dyn, none_is_leaf=False)
        if any(isinstance(x, Tracer) for x in leaves):
            return self._inline(static, args, dyn)
        if any(isinstance(x, ShapeDtype) for x in leaves):
            raise TypeError(f"{self!r}: cannot evaluate on ShapeDtype arguments; use .trace(*args) for a Program")
        register_dataclasses_in(dyn)
        treedef = optree.tree_structure(dyn, none_is_leaf=False)
        key = (tuple(sorted(static)), static_vals, treedef,
               tuple((np.shape(x), np.asarray(x).dtype.str, own_sharding(x)) for x in leaves))
        try:
            program = self._cache.get(key)
        except TypeError:  # something unhashable in the key: no caching
            key, program = None, None
        if program is None:
            program = self.trace(*args)
            if key is not None:
                self._cache[key] = program
        outs = evaluate(program, *leaves)
        return optree.tree_unflatten(program.out_tree, list(outs))

    def _inline(self, static: set[int], args, dyn):
        """Called inside another trace: in/out shardings become constraints, as nested jit inlines."""
        label = self._labeller(static, len(args))
        with sharding_context(self.mesh, self.annotation_shardings):
            if self.in_shardings is not None:
                self._check_count(self.in_shardings, len(dyn), "in_shardings")
                dyn = constrain(dyn, self.in_shardings, "in_shardings", label=label)
            out = self._body()(*self._combine(static, args, dyn))
            if self.out_shardings is not None:
                out = constrain(out, self.out_shardings, "out_shardings")
        return out


def _short_repr(x, n: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= n else r[: n - 3] + "..."
