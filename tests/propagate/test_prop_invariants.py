"""Properties of every propagation, on random programs: every value gets a sharding; closed dims,
explicitly replicated and unreduced axes of annotations never change; open dims only grow by
appending minor axes; conservative mode creates no sub-axes."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.tracing.context import use_mesh
from simshard.sharding.axes import AxisRef
from simshard.ops import get_op
from simshard.ir.program import Aval, Eqn, Program, Value
from simshard.propagate import axis_math as am
from simshard.propagate import propagate, propagation_info
from simshard.sharding.dim_sharding import DimSharding

MESH = ss.Mesh({"a": 2, "b": 2, "c": 4}, name="mesh")
AXES = ["a", "b", "c"]


@st.composite
def shardings(draw, rank):
    if draw(st.booleans()):
        return None
    pool = list(AXES)
    draw(st.randoms()).shuffle(pool)
    dims = []
    for _ in range(rank):
        n = draw(st.integers(0, 2))
        axes, pool = pool[:n], pool[n:]
        is_open = draw(st.booleans())
        prio = draw(st.sampled_from([None, 0, 1, 2])) if (axes or is_open) else None
        dims.append(DimSharding(tuple(AxisRef(a) for a in axes), is_open, prio))
    replicated = pool[: draw(st.integers(0, len(pool)))]
    return ss.Sharding(MESH, tuple(dims), tuple(AxisRef(a) for a in replicated))


@st.composite
def programs(draw):
    ids = iter(range(1000))
    values = []
    inputs, in_sh = [], []
    for k in range(draw(st.integers(1, 3))):
        v = Value(next(ids), Aval((8, 8), "float32"))
        inputs.append(v)
        values.append(v)
        in_sh.append(draw(shardings(2)))
    eqns = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["add", "mul", "matmul", "transpose", "reshape", "constraint"]))
        shaped = [v for v in values if v.aval.shape == (8, 8)]
        x = draw(st.sampled_from(values))
        if kind in ("add", "mul"):
            y = draw(st.sampled_from([v for v in values if v.aval.shape == x.aval.shape]))
            op, args, params = kind, [x, y], {}
        elif kind == "matmul" and shaped:
            op, args, params = "dot_general", [draw(st.sampled_from(shaped)), draw(st.sampled_from(shaped))], {"contracting": ((1,), (0,)), "batch": ((), ())}
        elif kind == "reshape":
            new = (2, 32) if x.aval.shape == (8, 8) else (8, 8)
            op, args, params = "reshape", [x], {"new_shape": new}
        elif kind == "constraint":
            op, args, params = "sharding_constraint", [x], {"sharding": draw(shardings(x.aval.ndim)) or ss.Sharding(MESH, ((), ()))}
        else:
            op, args, params = "transpose", [x], {"perm": (1, 0)}
        (aval,) = get_op(op).abstract_eval(*[a.aval for a in args], **params)
        out = Value(next(ids), aval)
        note = draw(shardings(aval.ndim)) if op != "sharding_constraint" and draw(st.booleans()) else None
        eqns.append(Eqn(op, tuple(args), (out,), tuple(sorted(params.items())), (note,)))
        values.append(out)
    outputs = tuple(draw(st.lists(st.sampled_from(values), min_size=1, max_size=2)))
    out_sh = tuple(draw(shardings(v.aval.ndim)) for v in outputs)
    names = tuple(f"in{k}" for k in range(len(inputs)))
    return Program(tuple(inputs), tuple(eqns), outputs, names, tuple(in_sh), out_sh)


def annotations(p: Program):
    out = [(v, s) for v, s in zip(p.inputs, p.in_shardings) if s is not None]
    for e in p.eqns:
        s = e.shardings[0] if e.shardings[0] is not None else e.kw.get("sharding")
        if s is not None:
            out.append((e.outputs[0], s))
    return out


def check_respects(before, after):
    sizes = MESH.shape
    assert after.replicated == before.replicated
    assert after.unreduced == before.unreduced
    for d0, d1 in zip(before.dims, after.dims):
        if d0.is_open:
            assert d1.is_open
            assert am.list_prefix(d0.axes, d1.axes, sizes) is not am.Prefix.NOT, (before, after)
        else:
            assert not d1.is_open and d1.axes == d0.axes, (before, after)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from(["basic", "aggressive", "op_priority", "user_priority"]), st.booleans())
def test_invariants_of_every_propagation(program, strategy, conservative):
    with use_mesh(MESH):  # for programs without any annotation
        result = propagate(program, strategy=strategy, conservative=conservative)
    assert set(result.shardings) == set(program.values())
    for v, s in annotations(program):
        check_respects(s, result.shardings[v])
    info = propagation_info(result)
    for s, r in zip(program.out_shardings, info.result_shardings):
        if s is not None:
            check_respects(s, r)
    if conservative:
        for v, s in result.shardings.items():
            assert all(a.sub is None for d in s.dims for a in d.axes)
