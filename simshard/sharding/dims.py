"""Tensor-dimension shardings (Shardy's model): per dim, the axes that split it, major to minor.

A ``Sharding`` is bound to one mesh. Each dimension lists full axes or sub-axes, is open (``?``:
propagation may add minor axes) or closed, and may carry a priority ``pN``. Axes named nowhere
are implicitly replicated; ``replicated`` lists axes that must stay so; ``unreduced`` lists axes
along which the value is a pending reduction (DTensor's ``Partial``) with its ``reduce_op``.

Every invariant is checked on construction, including Shardy's maximality of sub-axes: two
consecutive sub-axes of one axis side by side in a dimension (``"x":(1)2, "x":(2)4`` on an
``"x"`` of 8), or both in ``replicated`` / ``unreduced``, are refused with a ShardingError naming
the (sub-)axis to write instead (here ``"x"``); code that assembles axis lists from pieces merges
them first (``axes.merge_adjacent``). Two are kept by normalising rather than refusing: the
replicated / unreduced lists are sorted in mesh order, and ``reduce_op`` is ``"sum"`` when no
axis is unreduced.

JAX's spelling, ``NamedSharding(mesh, P(...))``, lives here too: the two convert into each other
(``to_sharding`` / ``to_named``), so they share a module rather than import each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from ..errors import ShardingError
from . import convert, syntax
from .axes import AxisRef, check_coexist, check_ref
from .dim_sharding import DimSharding, array_entry, as_dim_sharding, axis_ref, check_maximal, sorted_refs
from .layout import flat_layout, layout
from .mesh import Mesh
from .partition_spec import UNCONSTRAINED, P
from .reduce_ops import REDUCE_OPS

if TYPE_CHECKING:  # pragma: no cover
    from .layout_model import Layout
    from .placements import DTensorSpec


@dataclass(frozen=True)
class Sharding:
    """A tensor sharding bound to a mesh, e.g. ``<@mesh, [{"x"}, {"y", ?}p1], replicated={"z"}>``."""

    mesh: Mesh
    dims: tuple[DimSharding, ...]
    replicated: tuple[AxisRef, ...] = ()
    unreduced: tuple[AxisRef, ...] = ()
    reduce_op: str = "sum"

    def __post_init__(self):
        mesh = self.mesh
        if not isinstance(mesh, Mesh):
            raise ShardingError("invalid-mesh", f"a Sharding needs a Mesh, got {type(mesh).__name__}")
        sizes = mesh.shape
        dims = tuple(as_dim_sharding(d) for d in self.dims)
        for i, d in enumerate(dims):
            for a in d.axes:
                check_ref(a, sizes, f"dimension {i}", dim=i)
        rep = tuple(axis_ref(a) for a in self.replicated)
        unr = tuple(axis_ref(a) for a in self.unreduced)
        for a in rep:
            check_ref(a, sizes, "replicated={...}")
        for a in unr:
            check_ref(a, sizes, "unreduced={...}")
        rep = sorted_refs(rep, mesh)
        unr = sorted_refs(unr, mesh)
        for i, d in enumerate(dims):
            check_maximal(d.axes, sizes, f"dimension {i}", i)
        check_maximal(rep, sizes, "replicated={...}")
        check_maximal(unr, sizes, "unreduced={...}")
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "replicated", rep)
        object.__setattr__(self, "unreduced", unr)
        if self.reduce_op not in REDUCE_OPS:
            raise ShardingError(
                "unknown-reduce-op",
                f"reduce op {self.reduce_op!r} for unreduced axes is not one of {', '.join(REDUCE_OPS)}",
            )
        if not unr:
            # With nothing pending the op means nothing (and is not printed): keep it canonical.
            object.__setattr__(self, "reduce_op", "sum")
        self._check_uses()
        for i, d in enumerate(dims):
            if d.priority is not None and d.priority < 0:
                raise ShardingError("negative-priority", f"dimension {i} has priority p{d.priority}; priorities start at p0", dim=i)
            if d.priority is not None and not d.axes and not d.is_open:
                raise ShardingError(
                    "priority-on-empty-closed-dim",
                    f"dimension {i} is empty and closed ({{}}p{d.priority}); a priority there has no effect",
                    dim=i,
                )

    def _check_uses(self) -> None:
        """Each axis or sub-axis appears once; sub-axes of one axis don't overlap and can coexist."""
        uses: list[tuple[AxisRef, str, int | None]] = []
        for i, d in enumerate(self.dims):
            uses += [(a, f"dimension {i}", i) for a in d.axes]
        uses += [(a, "replicated={...}", None) for a in self.replicated]
        uses += [(a, "unreduced={...}", None) for a in self.unreduced]
        sizes = self.mesh.shape
        for j, (b, wb, db) in enumerate(uses):
            for a, wa, da in uses[:j]:
                if a.name != b.name:
                    continue
                if a == b:
                    raise ShardingError(
                        "duplicate-axis",
                        f"axis {a} is used twice: in {wa} and in {wb}",
                        axis=a.name,
                        dim=db if db is not None else da,
                    )
                why = check_coexist(a, b, sizes[a.name])
                if why == "overlapping-sub-axes":
                    raise ShardingError(why, f"{a} (in {wa}) and {b} (in {wb}) overlap", axis=a.name, dim=db if db is not None else da)
                if why:
                    raise ShardingError(
                        why,
                        f"{a} (in {wa}) and {b} (in {wb}) do not come from one split of axis "
                        f'"{a.name}" (size {sizes[a.name]})',
                        axis=a.name,
                        dim=db if db is not None else da,
                    )

    # -- construction ------------------------------------------------------------------------
    @staticmethod
    def parse(text: str, meshes: Mapping[str, Mesh] | Mesh) -> "Sharding":
        """Parse Shardy text; ``meshes`` maps the mesh names the text may use to meshes."""
        if isinstance(meshes, Mesh):
            meshes = {meshes.name: meshes}
        if not isinstance(meshes, Mapping) or not all(isinstance(m, Mesh) for m in meshes.values()):
            raise ShardingError(
                "invalid-mesh", f"Sharding.parse needs the mesh the text names (a Mesh, or a dict of mesh name to "
                f"Mesh), got {type(meshes).__name__}")
        token, dims, replicated, unreduced, reduce_op = syntax.parse_sharding(text)
        name = str(token)
        if name not in meshes:
            known = ", ".join("@" + n for n in meshes) or "none"
            raise ShardingError("unknown-mesh", f"mesh @{name} is not defined (known: {known}):{syntax.caret(text, token)}")
        mesh = meshes[name]
        if mesh.name != name:
            mesh = mesh.renamed(name)
        return Sharding(mesh, tuple(DimSharding(*d) for d in dims), replicated, unreduced, reduce_op)

    @staticmethod
    def from_array_sharding(mesh: Mesh, spec) -> "Sharding":
        """The FHE compiler's ArraySharding as a closed sharding over ``mesh``: text
        ``{y, z, -1}`` or a sequence, per tensor dim the mesh axis that splits it, by name or by
        index into ``mesh.axis_names`` (``1`` is the second axis), ``-1`` (or None) for none.
        Axes not named replicate the array."""
        if not isinstance(mesh, Mesh):
            raise ShardingError("invalid-mesh", f"an ArraySharding needs a Mesh, got {type(mesh).__name__}")
        if isinstance(spec, str):
            entries = syntax.parse_array_sharding(spec)
        elif isinstance(spec, (tuple, list)):
            entries = tuple(spec)
        else:
            raise ShardingError("invalid-spec", f"an ArraySharding is text like {{y, z, -1}} or a list of axis names "
                                f"and indices, got {type(spec).__name__}")
        return Sharding(mesh, tuple(array_entry(mesh, k, e) for k, e in enumerate(entries)))

    @staticmethod
    def from_text(text: str, mesh: Mesh) -> "Sharding":
        """Sharding text over ``mesh``, in either spelling: Shardy's ``<@mesh, [{"x"}, {}]>`` (its
        mesh name must be ``mesh``'s) or an ArraySharding ``{x, -1}``."""
        if isinstance(text, str) and text.lstrip().startswith("{"):
            return Sharding.from_array_sharding(mesh, text)
        return Sharding.parse(text, {mesh.name: mesh})

    @staticmethod
    def replicated_on(mesh: Mesh, rank: int) -> "Sharding":
        return Sharding(mesh, tuple(DimSharding() for _ in range(rank)))

    @staticmethod
    def from_dtensor(spec: "DTensorSpec", shape: Sequence[int]) -> "Sharding":
        """The exact tensor-dimension form of a placement list, or ShardingError saying why none exists."""
        spec, dims, unreduced, reduce_op = convert.dtensor_dims(spec, shape)
        s = Sharding(spec.mesh, tuple(DimSharding(d) for d in dims), (), unreduced, reduce_op)
        convert.require_same(layout(spec, shape), layout(s, shape), str(spec), str(s))
        return s

    @staticmethod
    def nearest(spec: "DTensorSpec", shape: Sequence[int]) -> "Sharding":
        """The tensor-dimension sharding naming the same axes on the same dims as a placement
        list (mesh order, split factors ignored), with its pending reductions, closed. Its layout
        may differ from the spec's: it is how propagation sees a value whose exact layout only the
        placement list states (``from_dtensor`` is the exact conversion)."""
        from .placements import cut_dim

        spec = spec.normalized(len(shape))
        dims: list[list[AxisRef]] = [[] for _ in shape]
        for axis, p in zip(spec.mesh.axis_names, spec.placements):
            if cut_dim(p) is not None:
                dims[cut_dim(p)].append(AxisRef(axis))
        unreduced, reduce_op = convert.pending_of(spec)
        return Sharding(spec.mesh, tuple(DimSharding(tuple(d)) for d in dims), (), unreduced, reduce_op)

    @staticmethod
    def exact_or_placements(spec: "DTensorSpec", shape: Sequence[int]) -> "Sharding | DTensorSpec":
        """A placement list as its exact tensor-dimension sharding where one exists, else as
        itself (checked to fit ``shape``): a program value then keeps the layout the placements
        state (nested uneven chunks, stripes, user placements); nothing becomes a nearby layout."""
        try:
            return Sharding.from_dtensor(spec, shape)
        except ShardingError as e:
            if e.rule != "not-expressible":
                raise
        spec = spec.normalized(len(shape))
        layout(spec, tuple(shape))
        return spec

    def layout(self, shape: Sequence[int]) -> "Layout":
        """Which elements each device holds (Shardy's flat ceil-and-pad rule); see ``layout``."""
        return flat_layout(self, tuple(int(d) for d in shape))

    def to_dtensor(self, shape: Sequence[int]) -> "DTensorSpec":
        """The exact placement-list form of this sharding, or ShardingError saying why none exists."""
        return convert.sharding_to_dtensor(self, shape)

    def to_named(self):
        """JAX's ``NamedSharding(mesh, P(...))`` spelling, or ShardingError where P cannot say it:
        P says full axes, replication and sum-unreduced only."""
        entries = []
        for i, d in enumerate(self.dims):
            if any(not a.is_full for a in d.axes):
                raise ShardingError(
                    "not-expressible", f"dimension {i} uses sub-axes {[a.short() for a in d.axes]}; P names full axes only", dim=i
                )
            if d.priority is not None:
                raise ShardingError("not-expressible", f"dimension {i} has priority p{d.priority}; P has no priorities", dim=i)
            if d.is_open and d.axes:
                raise ShardingError(
                    "not-expressible", f"dimension {i} is open with axes {str(d)}; P.UNCONSTRAINED has none", dim=i
                )
            if d.is_open:
                entries.append(UNCONSTRAINED)
            elif not d.axes:
                entries.append(None)
            else:
                names = tuple(a.name for a in d.axes)
                entries.append(names[0] if len(names) == 1 else names)
        if self.replicated:
            raise ShardingError("not-expressible", "P has no explicitly replicated axes", axis=self.replicated[0].name)
        if self.unreduced and (self.reduce_op != "sum" or any(not a.is_full for a in self.unreduced)):
            raise ShardingError(
                "not-expressible", f"P's unreduced axes are full-axis sums; this has {self.reduce_op} over {self.unreduced}"
            )
        return NamedSharding(self.mesh, P(*entries, unreduced=tuple(a.name for a in self.unreduced)))

    @property
    def spec(self) -> P:
        """``x.sharding.spec``: JAX's PartitionSpec of where the value lies, each dim's mesh axes
        (open or closed alike: the concrete sharding, Auto axes included) or None; pending sums
        as P's unreduced. ShardingError where P cannot say it (sub-axes)."""
        entries = []
        for i, d in enumerate(self.dims):
            if any(not a.is_full for a in d.axes):
                raise ShardingError(
                    "not-expressible", f"dimension {i} uses sub-axes {[a.short() for a in d.axes]}; P names full axes only", dim=i
                )
            names = tuple(a.name for a in d.axes)
            entries.append(None if not names else names[0] if len(names) == 1 else names)
        return P(*entries, unreduced=tuple(a.name for a in self.unreduced))

    # -- queries -----------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.dims)

    def dim_axes(self, dim: int) -> tuple[AxisRef, ...]:
        return self.dims[dim].axes

    def shard_count(self, dim: int) -> int:
        """Number of blocks dimension ``dim`` is cut into (product of its axis sizes)."""
        n = 1
        for a in self.dims[dim].axes:
            n *= self.mesh.axis_size(a)
        return n

    def check_rank(self, shape: Sequence[int]) -> None:
        if len(shape) != self.rank:
            raise ShardingError(
                "rank-mismatch",
                f"sharding {self} has {self.rank} dimension shardings but the tensor has rank "
                f"{len(shape)} (shape {tuple(shape)})",
            )

    def type_string(self, shape: Sequence[int], dtype="float32") -> str:
        """JAX's type string: ``f32[8@x,16]``, ``f32[8@(x,y),16]``, unreduced as ``{U:x}``."""
        from ..dtypes import short_name

        self.check_rank(shape)
        parts = []
        for size, d in zip(shape, self.dims):
            if not d.axes:
                parts.append(str(size))
            elif len(d.axes) == 1:
                parts.append(f"{size}@{d.axes[0].short()}")
            else:
                parts.append(f"{size}@({','.join(a.short() for a in d.axes)})")
        out = f"{short_name(dtype)}[{','.join(parts)}]"
        if self.unreduced:
            names = [a.short() for a in self.unreduced]
            body = names[0] if len(names) == 1 else "(" + ",".join(names) + ")"
            op = "" if self.reduce_op == "sum" else f"({self.reduce_op})"
            out += f"{{U{op}:{body}}}"
        return out

    def __str__(self) -> str:
        """Shardy's text form (``Sharding.parse`` reads it back)."""
        out = f"<@{self.mesh.name}, [{', '.join(str(d) for d in self.dims)}]"
        if self.replicated:
            out += ", replicated={" + ", ".join(map(str, self.replicated)) + "}"
        if self.unreduced:
            op = "" if self.reduce_op == "sum" else f"({self.reduce_op})"
            out += f", unreduced{op}={{" + ", ".join(map(str, self.unreduced)) + "}"
        return out + ">"


def dims_view(spec, shape: Sequence[int]) -> "Sharding | None":
    """How propagation and the op rules see a value's sharding: a ``Sharding`` as it is, a
    placement list (a value whose layout only placements state) as ``Sharding.nearest``."""
    from .placements import DTensorSpec

    return Sharding.nearest(spec, shape) if isinstance(spec, DTensorSpec) else spec


@dataclass(frozen=True)
class NamedSharding:
    """A mesh plus a PartitionSpec, as in ``jax.sharding.NamedSharding``."""

    mesh: Mesh
    spec: P

    def __post_init__(self):
        if not isinstance(self.spec, P):
            object.__setattr__(self, "spec", P(*self.spec))
        # Validate eagerly (unknown / duplicate axes) at the spec's own rank.
        self.to_sharding(len(self.spec))

    def to_sharding(self, rank: int) -> Sharding:
        if len(self.spec) > rank:
            raise ShardingError(
                "rank-mismatch", f"{self.spec!r} has {len(self.spec)} entries but the tensor has rank {rank}"
            )
        dims = []
        for e in tuple(self.spec) + (None,) * (rank - len(self.spec)):
            if e is UNCONSTRAINED:
                dims.append(DimSharding((), is_open=True))
            elif e is None:
                dims.append(DimSharding())
            else:
                names = (e,) if isinstance(e, str) else e
                dims.append(DimSharding(tuple(AxisRef(n) for n in names)))
        return Sharding(self.mesh, tuple(dims), unreduced=tuple(AxisRef(a) for a in self.spec.unreduced))

    def layout(self, shape: Sequence[int]) -> "Layout":
        """The layout of its ``Sharding`` at the shape's rank; see ``layout``."""
        return self.to_sharding(len(shape)).layout(shape)

    def __repr__(self) -> str:
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"
