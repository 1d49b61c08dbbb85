"""Sharding types: a value's shape, dtype and its sharding over the *explicit* mesh axes.

A spec here is JAX's view of a sharding: one entry per dimension, each a tuple of mesh axis
names (major to minor; ``()`` = replicated). Only explicit axes ever appear in a type; the
concrete sharding a value may also have over ``Auto`` axes is the compiler's business and is
hidden from the type (``restrict``).

The printing helpers reproduce JAX's spellings, which the error messages reuse:
``float32[8@X,16]`` (``str``), ``f32[8@X,16]`` (``short``), ``P('X', None)``,
``AbstractMesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...sharding.axes import AxisRef
from ...dtypes import short_name
from ...sharding.mesh import AxisType, Mesh
from ...sharding.partition_spec import P
from ...sharding.dims import Sharding
from ...sharding.dim_sharding import DimSharding

DimSpec = tuple[str, ...]
Spec = tuple[DimSpec, ...]


# -- specs -----------------------------------------------------------------------------------------
def replicated(rank: int) -> Spec:
    return ((),) * rank


def spec_of(sharding: Sharding | None, rank: int, keep: Sequence[str] | None = None) -> Spec:
    """The per-dim axis names of ``sharding`` (only axes in ``keep``, when given)."""
    if sharding is None:
        return replicated(rank)
    out = []
    for d in sharding.dims[:rank]:
        out.append(tuple(a.short() for a in d.axes if keep is None or a.name in keep))
    return tuple(out) + replicated(rank - len(out))


def unreduced_of(sharding: Sharding | None, keep: Sequence[str] | None = None) -> tuple[str, ...]:
    if sharding is None:
        return ()
    return tuple(a.short() for a in sharding.unreduced if keep is None or a.name in keep)


def spec_from_p(p: P, rank: int) -> Spec:
    out = []
    for e in tuple(p)[:rank]:
        if e is None or e is P.UNCONSTRAINED:
            out.append(())
        elif isinstance(e, str):
            out.append((e,))
        else:
            out.append(tuple(e))
    return tuple(out) + replicated(rank - len(out))


def axes_in(spec: Spec) -> list[str]:
    return [a for d in spec for a in d]


def duplicates(spec: Spec, unreduced: Sequence[str] = ()) -> list[str]:
    seen, dup = set(), []
    for a in axes_in(spec) + list(unreduced):
        if a in seen and a not in dup:
            dup.append(a)
        seen.add(a)
    return dup


def dim_size(mesh: Mesh, d: DimSpec) -> int:
    return math.prod(mesh.axis_size(_ref(a)) for a in d)


def _ref(a: str) -> AxisRef:
    if ":" not in a:
        return AxisRef(a)
    name, rest = a.split(":", 1)
    pre, size = rest[1:].split(")")
    return AxisRef(name, (int(pre), int(size)))


def to_sharding(mesh: Mesh, spec: Spec, unreduced: Sequence[str] = (), is_open: bool = False) -> Sharding:
    return Sharding(
        mesh,
        tuple(DimSharding(tuple(_ref(a) for a in d), is_open) for d in spec),
        unreduced=tuple(_ref(a) for a in unreduced),
    )


# -- JAX's spellings -------------------------------------------------------------------------------
def entry(d: DimSpec):
    """A dim's entry as JAX writes it in ``spec.partitions``: None, 'X' or ('X', 'Y')."""
    return None if not d else d[0] if len(d) == 1 else tuple(d)


def partitions(spec: Spec) -> tuple:
    return tuple(entry(d) for d in spec)


def p_repr(spec: Spec, unreduced: Sequence[str] = ()) -> str:
    body = ", ".join(repr(e) for e in partitions(spec)) + ("," if len(spec) == 1 else "")
    if unreduced:
        body += (", " if body else "") + "unreduced={" + ", ".join(repr(a) for a in sorted(unreduced)) + "}"
    return f"P({body})"


def long_dtype(dtype) -> str:
    if isinstance(dtype, str) and dtype in ("bf16", "bfloat16"):
        return "bfloat16"
    return np.dtype(dtype).name


def type_str(shape, dtype, spec: Spec, unreduced: Sequence[str] = (), *, short: bool = False, weak: bool = False) -> str:
    """``float32[8@X,16@(Y,Z)]{U:X}`` (``short``: ``f32[...]``), as ``jax.typeof`` prints."""
    parts = []
    for n, d in zip(shape, spec):
        if not d:
            parts.append(str(n))
        elif len(d) == 1:
            parts.append(f"{n}@{d[0]}")
        else:
            parts.append(f"{n}@({','.join(d)})")
    dt = short_name(dtype) if short else long_dtype(dtype)
    out = f"{'~' if weak else ''}{dt}[{','.join(parts)}]"
    if unreduced:
        u = sorted(unreduced)
        out += "{U:" + (u[0] if len(u) == 1 else "(" + ",".join(u) + ")") + "}"
    return out


@dataclass(frozen=True)
class AbstractMesh:
    """The mesh as tracing sees it: axis names, sizes and types, no devices (JAX's AbstractMesh)."""

    axis_names: tuple[str, ...] = ()
    axis_sizes: tuple[int, ...] = ()
    axis_types: tuple[AxisType, ...] = ()
    mesh: Mesh | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(mesh: Mesh | None) -> "AbstractMesh":
        if mesh is None:
            return AbstractMesh()
        return AbstractMesh(mesh.axis_names, mesh.axis_sizes, mesh.axis_types, mesh)

    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.axis_sizes))

    @property
    def size(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def empty(self) -> bool:
        return not self.axis_names

    def _of(self, t: AxisType) -> tuple[str, ...]:
        return tuple(n for n, k in zip(self.axis_names, self.axis_types) if k == t)

    @property
    def explicit_axes(self) -> tuple[str, ...]:
        return self._of(AxisType.Explicit)

    @property
    def auto_axes(self) -> tuple[str, ...]:
        return self._of(AxisType.Auto)

    @property
    def manual_axes(self) -> tuple[str, ...]:
        return self._of(AxisType.Manual)

    @property
    def are_all_axes_explicit(self) -> bool:
        return not self.empty and all(t == AxisType.Explicit for t in self.axis_types)

    @property
    def are_all_axes_auto(self) -> bool:
        return all(t == AxisType.Auto for t in self.axis_types)

    def __repr__(self) -> str:
        if self.empty:
            return "AbstractMesh((), axis_types=())"
        axes = ", ".join(f"'{n}': {s}" for n, s in zip(self.axis_names, self.axis_sizes))
        types = ", ".join(t.name for t in self.axis_types) + ("," if len(self.axis_types) == 1 else "")
        return f"AbstractMesh({axes}, axis_types=({types}))"

    __str__ = __repr__


@dataclass(frozen=True)
class TypeSharding:
    """``jax.typeof(x).sharding``: an abstract mesh and a P over its explicit axes."""

    mesh: AbstractMesh
    spec: P

    def __repr__(self) -> str:
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"

    __str__ = __repr__


def named_repr(mesh: Mesh | AbstractMesh | None, spec: Spec, unreduced: Sequence[str] = ()) -> str:
    am = mesh if isinstance(mesh, AbstractMesh) else AbstractMesh.of(mesh)
    return f"NamedSharding(mesh={am!r}, spec={p_repr(spec, unreduced)})"


@dataclass(frozen=True)
class ArrayType:
    """``ss.typeof(x)``: shape, dtype and the sharding over explicit axes (JAX's ShapedArray)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    spec: Spec
    unreduced: tuple[str, ...] = ()
    mesh: Mesh | None = field(default=None, compare=False)
    weak_type: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def sharding(self) -> TypeSharding:
        return TypeSharding(
            AbstractMesh.of(self.mesh), P(*partitions(self.spec), unreduced=tuple(self.unreduced))
        )

    def str_short(self, short_dtypes: bool = True) -> str:
        return type_str(self.shape, self.dtype, self.spec, self.unreduced, short=short_dtypes, weak=self.weak_type)

    def type_string(self, long: bool = True) -> str:
        """JAX's ``str(jax.typeof(x))`` (``long=False``: simshard's short dtype, ``f32[...]``)."""
        return self.str_short(short_dtypes=not long)

    def __str__(self) -> str:
        return self.str_short(short_dtypes=False)

    def __repr__(self) -> str:
        return f"ShapedArray({self})"
