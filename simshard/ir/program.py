"""The program IR: ops on global shapes, as a jaxpr-like list of equations.

A ``Program`` is immutable: inputs, equations and outputs, each value with its abstract type
(``Aval``: shape and dtype) and, once propagated, its ``Sharding``. Values may carry user labels
(``ss.name(x, "h")``) that reports and ``sharding_of`` use.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..dtypes import short_name
from ..errors import ShardingError
from ..sharding.dims import Sharding


@dataclass(frozen=True)
class Aval:
    """Abstract value: global shape and dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{short_name(self.dtype)}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True, eq=False)
class Value:
    """One SSA value of a program. Identity is the ``id`` (unique within a program)."""

    id: int
    aval: Aval

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other) -> bool:
        return isinstance(other, Value) and other.id == self.id

    def __repr__(self) -> str:
        return f"%{self.id}"


@dataclass(frozen=True)
class Literal:
    """A scalar constant operand (a Python number in ``x * 2``)."""

    value: Any
    aval: Aval

    def __repr__(self) -> str:
        return repr(self.value.item() if hasattr(self.value, "item") else self.value)


@dataclass(frozen=True)
class Eqn:
    """``outputs = op(inputs, **params)``; ``shardings`` are user annotations on the outputs."""

    op: str
    inputs: tuple[Value | Literal, ...]
    outputs: tuple[Value, ...]
    params: tuple[tuple[str, Any], ...] = ()
    shardings: tuple[Sharding | None, ...] = ()

    @property
    def kw(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class Program:
    """A traced function: inputs, equations on global shapes, outputs, and per-value shardings."""

    inputs: tuple[Value, ...]
    eqns: tuple[Eqn, ...]
    outputs: tuple[Value, ...]
    input_names: tuple[str, ...] = ()
    in_shardings: tuple[Sharding | None, ...] = ()
    out_shardings: tuple[Sharding | None, ...] = ()
    labels: tuple[tuple[str, Value], ...] = ()
    shardings: Mapping[Value, Sharding] = field(default_factory=lambda: MappingProxyType({}), compare=False)
    mode: str = "auto"
    # How the outputs nest (an optree treedef), for handing results back in the user's structure.
    out_tree: Any = field(default=None, compare=False, repr=False)
    # What produced ``shardings`` (e.g. propagation's record of provenance), for explain.
    info: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.shardings, MappingProxyType):
            object.__setattr__(self, "shardings", MappingProxyType(dict(self.shardings)))

    # -- lookups ----------------------------------------------------------------------------
    def values(self) -> list[Value]:
        out = list(self.inputs)
        for e in self.eqns:
            out += list(e.outputs)
        return out

    def producer(self, v: Value) -> Eqn | None:
        for e in self.eqns:
            if v in e.outputs:
                return e
        return None

    def users(self, v: Value) -> list[Eqn]:
        return [e for e in self.eqns if any(isinstance(i, Value) and i == v for i in e.inputs)]

    def label(self, v: Value) -> str | None:
        for name, w in self.labels:
            if w == v:
                return name
        for name, w in zip(self.input_names, self.inputs):
            if w == v:
                return name
        return None

    def lookup(self, key) -> Value:
        """A value by label, input name, or output index."""
        if isinstance(key, Value):
            return key
        if isinstance(key, int):
            return self.outputs[key]
        for name, v in self.labels:
            if name == key:
                return v
        for name, v in zip(self.input_names, self.inputs):
            if name == key:
                return v
        known = [n for n, _ in self.labels] + list(self.input_names)
        raise KeyError(f"no value named {key!r} in this program (named values: {', '.join(known) or 'none'})")

    def sharding_of(self, key) -> Sharding | None:
        return self.shardings.get(self.lookup(key))

    def with_shardings(self, shardings: Mapping[Value, Sharding], mode: str | None = None, info: Any = None) -> "Program":
        return replace(self, shardings=MappingProxyType(dict(shardings)), mode=mode or self.mode, info=info)

    # -- printing ---------------------------------------------------------------------------
    def annotation(self, v: Value) -> Sharding | None:
        """The sharding the user gave ``v`` (input / output shardings, constraints), if any."""
        for w, s in zip(self.inputs, self.in_shardings):
            if w == v and s is not None:
                return s
        for w, s in zip(self.outputs, self.out_shardings):
            if w == v and s is not None:
                return s
        for e in self.eqns:
            for w, s in zip(e.outputs, e.shardings):
                if w == v and s is not None:
                    return s
        return None

    def type_string(self, v: Value) -> str:
        """``f32[8@x,16]``: the propagated sharding, else the user's annotation, else none."""
        s = self.shardings.get(v) or self.annotation(v)
        if s is None:
            return str(v.aval)
        if not hasattr(s, "type_string"):  # a placement list: a layout, not a tensor-dim type
            return f"{v.aval}{{{s}}}"
        try:
            return s.type_string(v.aval.shape, v.aval.dtype)
        except ShardingError:
            return f"{v.aval}{{{s}}}"

    def name_of(self, v) -> str:
        """``v``'s name in the listing (``%5``, with its label; a literal as its repr)."""
        if isinstance(v, Literal):
            return repr(v)
        label = self.label(v)
        return f"%{v.id}" + (f"({label})" if label else "")

    def pretty(self) -> str:
        """A jaxpr-like listing with each value's type string."""
        ins = ", ".join(f"{self.name_of(v)}: {self.type_string(v)}" for v in self.inputs)
        lines = [f"program({ins}) {{"]
        for e in self.eqns:
            outs = ", ".join(f"{self.name_of(v)}: {self.type_string(v)}" for v in e.outputs)
            args = ", ".join(self.name_of(i) for i in e.inputs)
            params = ", ".join(f"{k}={format_param(v)}" for k, v in e.params if not _programs(v))
            lines.append(f"  {outs} = {e.op}({args}{', ' if args and params else ''}{params})")
            for k, v in e.params:
                for body in _programs(v):  # a region's, loop's or branch's body: its listing, indented
                    lines += ["    " + line for line in body.pretty().splitlines()]
        lines.append(f"  return {', '.join(self.name_of(v) for v in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.pretty()


def _programs(v) -> tuple:
    """The programs a param holds: itself, or a tuple of them (a switch's branches)."""
    if isinstance(v, Program):
        return (v,)
    if isinstance(v, tuple) and v and all(isinstance(x, Program) for x in v):
        return v
    return ()


def format_param(v) -> str:
    """A short, readable spelling of an op param for listings and tables."""
    from ..sharding.mesh import Mesh

    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, Sharding):
        return str(v)
    if isinstance(v, Mesh):
        return f"@{v.name}"
    if _programs(v):
        return ", ".join(f"{{{len(b.eqns)} eqns}}" for b in _programs(v))
    if isinstance(v, tuple) and v and all(isinstance(x, Sharding) for x in v):
        return "(" + ", ".join(map(str, v)) + ")"
    if isinstance(v, np.dtype):
        return short_name(v)
    return repr(v)
