"""Build simshard Programs from the Shardy propagation oracles (tests/data/shardy_propagation.json).

Mapping of the case vocabulary onto registry ops:

* ``add``/``divide``/``sine``/``cosine``/``negate`` -> ``add``/``div``/``sin``/``cos``/``neg``;
* ``dot_general`` -> ``dot_general(contracting=((lhs..),(rhs..)), batch=((lhs..),(rhs..)))``;
* ``reshape(shape)`` -> ``reshape(new_shape)``; ``broadcast_in_dim``, ``slice`` as they are;
  ``concatenate(dimension)`` -> ``concatenate(axis)``;
* ``reduce(dimensions, reducer)`` -> one ``reduce_<reducer>(axes)`` per input (a variadic reduce
  of N inputs becomes N reductions; the scalar init values are dropped, they carry no factor);
* ``sharding_constraint`` / ``reshard`` -> the op with its ``sharding`` param set to the case's
  target; ``propagation_barrier(allowed_direction)`` as is;
* a case ``sharding`` on any other op is an annotation on its result (``Eqn.shardings``), which
  propagation treats as a start, not a fixed value.

Comparison: Shardy prints no sharding at all for a value propagation never reached (the oracle
writes ``null``). ``propagate`` gives such a value a fully open, empty sharding (``[{?}, ...]``
with nothing replicated or unreduced), so :func:`text` prints exactly that as ``None``.
"""

from __future__ import annotations

import json
from pathlib import Path

import simshard as ss
from simshard.ops import get_op
from simshard.ir.program import Aval, Eqn, Program, Value
from simshard.propagate import propagate, propagation_info

DATA = Path(__file__).resolve().parents[1] / "data" / "shardy_propagation.json"

ELEMENTWISE = {"add": "add", "divide": "div", "sine": "sin", "cosine": "cos", "negate": "neg", "multiply": "mul", "subtract": "sub"}
REDUCERS = {"add": "reduce_sum", "max": "reduce_max", "maximum": "reduce_max", "min": "reduce_min", "minimum": "reduce_min", "multiply": "reduce_prod", "mul": "reduce_prod"}
DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "bf16": "float32", "f16": "float16", "i1": "bool"}

# strategy in the case -> (propagate strategy, conservative)
STRATEGIES = {
    "basic": ("basic", False),
    "basic_conservative": ("basic", True),
    "aggressive": ("aggressive", False),
    "op_priority": ("op_priority", False),
    "user_priority": ("user_priority", False),
    "pipeline": ("pipeline", False),
}


def propagation_cases() -> list[dict]:
    return [c for c in json.loads(DATA.read_text())["cases"] if c["kind"] == "propagation"]


def _sharding(text, meshes):
    return None if text is None else ss.Sharding.parse(text, meshes)


def build_program(case: dict) -> tuple[Program, dict[str, Value]]:
    meshes = {name: ss.Mesh(axes, name=name) for name, axes in case["meshes"].items()}
    ids = iter(range(10**6))
    env: dict[str, Value] = {}
    inputs, names, in_sh = [], [], []
    for inp in case["inputs"]:
        v = Value(next(ids), Aval(tuple(inp["shape"]), DTYPES.get(inp.get("dtype", "f32"), "float32")))
        env[inp["name"]] = v
        inputs.append(v)
        names.append(inp["name"])
        in_sh.append(_sharding(inp.get("sharding"), meshes))
    eqns = []

    def emit(op, args, outs, params, shardings):
        avals = [a.aval for a in args]
        out_avals = get_op(op).abstract_eval(*avals, **params)
        values = []
        for name, aval in zip(outs, out_avals):
            v = Value(next(ids), aval)
            env[name] = v
            values.append(v)
        eqns.append(Eqn(op, tuple(args), tuple(values), tuple(sorted(params.items())), tuple(shardings)))

    for op in case["ops"]:
        kind, attrs = op["op"], op.get("attrs", {})
        outs = op["out"] if isinstance(op["out"], list) else [op["out"]]
        args = [env[a] for a in op["args"]]
        sh = op.get("sharding")
        sh = [_sharding(s, meshes) for s in (sh if isinstance(sh, list) else [sh] * len(outs))]
        if kind in ELEMENTWISE:
            emit(ELEMENTWISE[kind], args, outs, {}, sh)
        elif kind == "dot_general":
            params = {
                "contracting": (tuple(attrs["lhs_contracting"]), tuple(attrs["rhs_contracting"])),
                "batch": (tuple(attrs["lhs_batching"]), tuple(attrs["rhs_batching"])),
            }
            emit("dot_general", args, outs, params, sh)
        elif kind == "reshape":
            emit("reshape", args, outs, {"new_shape": tuple(attrs["shape"])}, sh)
        elif kind == "reduce":
            name = REDUCERS[attrs.get("reducer", "add")]
            for a, o, s in zip(args, outs, sh):
                emit(name, [a], [o], {"axes": tuple(attrs["dimensions"])}, [s])
        elif kind == "broadcast_in_dim":
            params = {"shape": tuple(attrs["shape"]), "broadcast_dimensions": tuple(attrs["broadcast_dimensions"])}
            emit("broadcast_in_dim", args, outs, params, sh)
        elif kind == "slice":
            params = {"start": tuple(attrs["start"]), "limit": tuple(attrs["limit"]), "strides": tuple(attrs["strides"])}
            emit("slice", args, outs, params, sh)
        elif kind == "concatenate":
            emit("concatenate", args, outs, {"axis": attrs["dimension"]}, sh)
        elif kind in ("sharding_constraint", "reshard"):
            emit(kind, args, outs, {"sharding": sh[0]}, [None])
        elif kind == "propagation_barrier":
            emit("propagation_barrier", args, outs, {"allowed_direction": attrs["allowed_direction"]}, sh)
        else:
            raise NotImplementedError(f"case {case['id']}: op {kind!r} has no mapping")
    outputs = tuple(env[o] for o in case["outputs"])
    out_sh = tuple(_sharding(s, meshes) for s in (case.get("output_shardings") or [None] * len(outputs)))
    program = Program(tuple(inputs), tuple(eqns), outputs, tuple(names), tuple(in_sh), out_sh)
    return program, env


def text(s) -> str | None:
    """A sharding as the oracle writes it; a fully open, empty one is ``None`` (no sharding)."""
    if s is None:
        return None
    if not s.replicated and not s.unreduced and all(d.is_open and not d.axes for d in s.dims):
        return None
    return str(s)


def run_case(case: dict) -> dict[str, str | None]:
    """The propagated sharding text of every value the case checks."""
    program, env = build_program(case)
    strategy, conservative = STRATEGIES[case["strategy"]]
    out = propagate(program, strategy=strategy, conservative=conservative)
    results = propagation_info(out).result_shardings
    got = {}
    for name in case["expected"]:
        if name.startswith("result") and name[6:].isdigit():
            got[name] = text(results[int(name[6:])])
        else:
            got[name] = text(out.shardings[env[name]])
    return got


def expected(case: dict) -> dict[str, str | None]:
    meshes = {name: ss.Mesh(axes, name=name) for name, axes in case["meshes"].items()}
    return {k: text(_sharding(v, meshes)) for k, v in case["expected"].items()}
