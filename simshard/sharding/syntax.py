"""Shardy's text grammar: mesh and sharding text parsed into plain data.

    @mesh_xy = <["x"=2, "y"=4], device_ids=[...]>      (also <"x"=2, "y"=4>, {<[...]>, device_ids=[...]})
    <@mesh_xy, [{"x"}p1, {"y":(2)2, ?}], replicated={"z"}, unreduced={"w"}>

Extension for pending reductions other than sum: ``unreduced(max)={"w"}``. Also the FHE
compiler's ArraySharding: ``{y, z, -1}`` or ``{1, 2, -1}``, per tensor dim the mesh axis
(by name or index) that splits it, ``-1`` for none (``parse_array_sharding``). Any malformed input
raises ``ShardingError`` (rule ``parse``) pointing at the column with a caret line. The parse
gives tuples and ``AxisRef``s; ``Mesh.parse`` and ``Sharding.parse`` build (and validate) their
objects from them, and ``str()`` of each prints this form back, round-trip exact.
"""

from __future__ import annotations

from functools import lru_cache

from lark import Lark, Transformer
from lark.exceptions import LarkError, UnexpectedInput, VisitError

from ..errors import ShardingError
from .axes import AxisRef

_GRAMMAR = r"""
    sharding: "sharding"? "<" "@" NAME "," dims attr* ">"
    dims: "[" [dim ("," dim)*] "]"
    dim: "{" [dim_items] "}" [PRIORITY]
    dim_items: axis ("," axis)* ["," OPEN] -> closed_or_open
             | OPEN                        -> only_open
    axis: STRING [":" "(" INT ")" INT]
    attr: "," "replicated" "=" axis_set                       -> replicated
        | "," "unreduced" ["(" NAME ")"] "=" axis_set         -> unreduced
    axis_set: "{" [axis ("," axis)*] "}"

    mesh: [SDY_MESH] [mesh_name] (mesh_angle | mesh_braced)
    mesh_name: "@" NAME "="
    mesh_angle: "<" mesh_axes ["," device_ids] ">"
    mesh_braced: "{" "<" mesh_axes ">" ["," device_ids] "}"
    mesh_axes: "[" [mesh_axis ("," mesh_axis)*] "]"
             | mesh_axis ("," mesh_axis)*
    device_ids: "device_ids" "=" "[" [INT ("," INT)*] "]"
    mesh_axis: STRING "=" INT
    SDY_MESH: "sdy.mesh"

    array_sharding: "{" [array_entry ("," array_entry)*] "}"
    array_entry: NAME | STRING | AXIS_INDEX

    OPEN: "?"
    PRIORITY: /p[0-9]+/
    NAME: /[A-Za-z_][A-Za-z0-9_.]*/
    STRING: /"[^"\\]*"/
    INT: /[0-9]+/
    AXIS_INDEX: /-?[0-9]+/
    %import common.WS
    %ignore WS
"""


@lru_cache(maxsize=None)
def _parser(start: str) -> Lark:
    return Lark(_GRAMMAR, start=start, parser="lalr", maybe_placeholders=True)


def _caret(text: str, column: int, line: int = 1) -> str:
    # Lines as lark counts them (by "\n" only; str.splitlines also splits at \r, \x1e, ...).
    lines = text.split("\n")
    src = lines[line - 1] if 1 <= line <= len(lines) else ""
    return f"\n  {src}\n  {' ' * max(column - 1, 0)}^"


class _Build(Transformer):
    """Builds plain tuples; the Mesh and Sharding constructors do all validation."""

    def axis(self, items):
        name, pre, size = items
        name = str(name)[1:-1]
        if pre is None:
            return AxisRef(name)
        return AxisRef(name, (int(pre), int(size)))

    def closed_or_open(self, items):
        *axes, open_ = items
        return list(axes), open_ is not None

    def only_open(self, items):
        return [], True

    def dim(self, items):
        body, prio = items
        axes, is_open = body if body is not None else ([], False)
        return tuple(axes), is_open, int(str(prio)[1:]) if prio is not None else None

    def dims(self, items):
        return [d for d in items if d is not None]

    def axis_set(self, items):
        return [a for a in items if a is not None]

    def replicated(self, items):
        return ("replicated", None, items[0])

    def unreduced(self, items):
        op, axes = items
        return ("unreduced", str(op) if op is not None else "sum", axes)

    def sharding(self, items):
        name, dims, *attrs = items
        return name, dims, attrs  # the NAME token: its position places the unknown-mesh caret

    def mesh_axis(self, items):
        return str(items[0])[1:-1], int(items[1])

    def mesh_axes(self, items):
        return [a for a in items if a is not None]

    def device_ids(self, items):
        return [int(t) for t in items if t is not None]

    def mesh_name(self, items):
        return str(items[0])

    def mesh_angle(self, items):
        axes, ids = items
        return axes, ids

    mesh_braced = mesh_angle

    def array_entry(self, items):
        (tok,) = items
        if tok.type == "AXIS_INDEX":
            return int(tok)
        return str(tok)[1:-1] if tok.type == "STRING" else str(tok)

    def array_sharding(self, items):
        return tuple(e for e in items if e is not None)

    def mesh(self, items):
        *head, (axes, ids) = items
        names = [h for h in head if isinstance(h, str) and not getattr(h, "type", None) == "SDY_MESH"]
        return (names[0] if names else "mesh"), axes, ids


def _parse(text: str, start: str):
    if not isinstance(text, str):
        raise ShardingError("parse", f"expected sharding text, got {type(text).__name__}")
    try:
        tree = _parser(start).parse(text)
        return _Build().transform(tree)
    except UnexpectedInput as e:
        col = getattr(e, "column", 1) or 1
        line = getattr(e, "line", 1) or 1
        raise ShardingError("parse", f"cannot parse {start} text at column {col}:{_caret(text, col, line)}") from None
    except VisitError as e:
        raise ShardingError("parse", f"cannot parse {start} text: {e.orig_exc}") from None
    except LarkError as e:  # pragma: no cover - other lark failures
        raise ShardingError("parse", f"cannot parse {start} text: {e}") from None


def caret(text: str, token) -> str:
    """The line of ``text`` holding a parsed ``token``, with a caret under it."""
    return _caret(text, token.column, token.line)


def parse_sharding(text: str):
    """``(mesh name token, dims, replicated, unreduced, reduce_op)``: each dim a tuple ``(axes,
    is_open, priority)``; the token keeps its position for an error about the mesh name."""
    token, dims, attrs = _parse(text, "sharding")
    replicated, unreduced, reduce_op = [], [], "sum"
    seen = set()
    for kind, op, axes in attrs:
        if kind in seen:
            raise ShardingError("parse", f"{kind}={{...}} is given twice in {text!r}")
        seen.add(kind)
        if kind == "replicated":
            replicated = axes
        else:
            unreduced, reduce_op = axes, op
    return token, tuple(dims), tuple(replicated), tuple(unreduced), reduce_op


def parse_mesh(text: str):
    """``(name, [(axis, size), ...], device_ids or None)`` from every spelling of a mesh in Shardy's
    text and its variants: ``@m = <["x"=2, "y"=4]>``, ``<["a"=2]>`` (no name: ``mesh``), ``@m =
    <"x"=4, "y"=2>`` (axes without brackets), ``@m = <["x"=2], device_ids=[1, 0]>``, ``@m =
    {<["a"=4, "b"=2]>, device_ids=[...]}``, ``<[]>`` (no axes) and ``<[], device_ids=[0]>``
    (maximal, one device), each optionally after ``sdy.mesh``."""
    return _parse(text, "mesh")


def parse_array_sharding(text: str) -> tuple[str | int, ...]:
    """The entries of ArraySharding text ``{y, z, -1}`` / ``{1, 2, -1}`` / ``{"y", -1}``: per
    tensor dim an axis name (str) or an axis index or ``-1`` (int); the Sharding checks them."""
    return _parse(text, "array_sharding")
