"""Small builders for propagation unit tests: meshes, shardings, hand-written rules and graphs."""

from __future__ import annotations

import simshard as ss
from simshard.sharding.axes import AxisRef
from simshard.ops.factors import factor_rule
from simshard.propagate.graph import ELEMENTWISE, OTHER, Graph, Node, State
from simshard.propagate.projection import Projection

MESH = ss.Mesh({"a": 2, "b": 2, "c": 2, "d": 2}, name="mesh")


def mesh(**axes) -> ss.Mesh:
    return ss.Mesh(axes, name="mesh")


def S(text: str, m: ss.Mesh = MESH) -> ss.Sharding:
    return ss.Sharding.parse(text, m)


def ax(text: str) -> AxisRef:
    """``"x"`` or ``"x:(2)4"``."""
    if ":" in text:
        name, rest = text.split(":")
        pre, size = rest[1:].split(")")
        return AxisRef(name, (int(pre), int(size)))
    return AxisRef(text)


def axes(*texts: str) -> list[AxisRef]:
    return [ax(t) for t in texts]


def rule(spec: str, in_shapes, out_shapes, **kw):
    return factor_rule(spec, in_shapes, out_shapes, **kw)


def projection(spec: str, in_shapes, out_shapes, in_sh, out_sh, m: ss.Mesh = MESH, **kw):
    r = rule(spec, in_shapes, out_shapes, **kw)
    return r, Projection.build(in_sh, out_sh, r, m.shape)


def factor_axes(proj: Projection, tensor: int, factor: int) -> list[str]:
    return [a.short() for a in proj.tensors[tensor].factors[factor].axes]


class G:
    """A tiny graph builder: ``g.op("add", r, ["x", "y"], ["z"])`` with named values."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = dict(shapes)
        self.nodes: list[Node] = []
        self.outputs: list[str] = []

    def op(self, name, r, operands, results, category=OTHER, barrier=None, out_shapes=None):
        if out_shapes:
            self.shapes.update(out_shapes)
        self.nodes.append(Node(len(self.nodes), name, tuple(operands), tuple(results), r, category, barrier))
        return self

    def ew(self, operands, result, shape=None):
        """An elementwise op of ``result = f(*operands)``."""
        shape = shape or self.shapes[operands[0]]
        self.shapes[result] = shape
        letters = "ijklmn"[: len(shape)]
        r = rule(",".join(letters for _ in operands) + "->" + letters, [shape] * len(operands), [shape])
        return self.op("add", r, operands, [result], ELEMENTWISE)

    def graph(self, outputs=()) -> Graph:
        return Graph(self.shapes, self.nodes, list(outputs))


def state(g: Graph, shardings: dict, results=None) -> State:
    return State({k: shardings.get(k) for k in g.shapes}, list(results or [None] * len(g.outputs)))


def txt(s) -> str | None:
    return None if s is None else str(s)


def run_factors(strategy, spec, in_shapes, out_shapes, in_sh, out_sh, m=MESH, direction=None, conservative=False, elementwise=False, **kw):
    """Propagate once through a hand-written rule; returns the new shardings (texts, None where
    unchanged), operands then results."""
    from simshard.propagate.direction import Direction
    from simshard.propagate.engine import propagate_tensors

    r = rule(spec, in_shapes, out_shapes, **kw)
    d = direction or (lambda f: Direction.BOTH)
    new_ops, new_res, *_ = propagate_tensors(r, in_sh, out_sh, d, strategy, conservative, elementwise)
    return [txt(s) for s in list(new_ops) + list(new_res)]
