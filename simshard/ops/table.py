"""The table of ops and their factor rules, generated from the registry (``docs/ops.md``).

    python -m simshard.ops.table > docs/ops.md

Each row shows an op's doc line and its rule on one representative call. Ops registered without
an example here (user ops) still get a row, with no example.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..sharding.mesh import Mesh
from ..ir.program import Aval, format_param
from ..sharding.dims import Sharding
from . import OPS
from .elementwise import BINARY, UNARY

F32, I32 = np.dtype("float32"), np.dtype("int32")
_MESH = Mesh({"x": 2, "y": 4})

def _region_example():
    """shard_map with an identity body over P("x", None): local f32[4,16], global f32[8,16]."""
    from ..ir.program import Program, Value

    v = Value(0, Aval((4, 16), F32))
    spec = Sharding(_MESH, (("x",), ()))
    return [Aval((8, 16), F32)], {"body": Program((v,), (), (v,)), "mesh": _MESH, "in_specs": (spec,), "out_specs": (spec,)}


def _control_examples():
    """scan / while / switch with identity bodies: a carry f32[8,16], a scanned x f32[4,16]."""
    from ..ir.program import Program, Value

    c, x, b = Value(0, Aval((8, 16), F32)), Value(1, Aval((16,), F32)), Value(2, Aval((), np.dtype(bool)))
    carry, xs, flag, index = Aval((8, 16), F32), Aval((4, 16), F32), Aval((), np.dtype(bool)), Aval((), I32)
    return {
        "scan": ([carry, xs], {"body": Program((c, x), (), (c, x)), "length": 4, "reverse": False, "num_carry": 1,
                               "num_xs": 1, "num_res": 0}),
        "while": ([carry, flag], {"cond": Program((c, b), (), (b,)), "body": Program((c,), (), (c,)), "num_carry": 1,
                                  "num_cond_consts": 1}),
        "switch": ([index, carry], {"branches": (Program((c,), (), (c,)), Program((c,), (), (c,)))}),
    }


# op -> (operand avals, params): one representative call per op.
EXAMPLES: dict[str, tuple[list[Aval], dict[str, Any]]] = {
    **{n: ([Aval((8, 16), F32)], {}) for n in UNARY},
    **{n: ([Aval((8, 16), F32), Aval((8, 16), F32)], {}) for n in BINARY},
    **{n: ([Aval((8, 16), I32)] * (1 if n in UNARY else 2), {}) for n in ("bitwise_and", "bitwise_or", "bitwise_xor", "invert")},
    "select": ([Aval((8, 16), np.bool_), Aval((8, 16), F32), Aval((8, 16), F32)], {}),
    "convert": ([Aval((8, 16), F32)], {"dtype": I32}),
    "dot_general": ([Aval((4, 8, 32), F32), Aval((4, 32, 16), F32)], {"contracting": ((2,), (1,)), "batch": ((0,), (0,))}),
    "reduce_sum": ([Aval((2, 64, 13), F32)], {"axes": (1,)}),
    "reduce_max": ([Aval((2, 64, 13), F32)], {"axes": (1,)}),
    "reduce_min": ([Aval((2, 64, 13), F32)], {"axes": (1,)}),
    "reduce_prod": ([Aval((2, 64, 13), F32)], {"axes": (1,)}),
    "argmax": ([Aval((8, 16), F32)], {"axis": 1, "index_dtype": I32}),
    "argmin": ([Aval((8, 16), F32)], {"axis": 1, "index_dtype": I32}),
    "cumsum": ([Aval((8, 16), F32)], {"axis": 1}),
    "sort": ([Aval((4, 32, 8), F32)], {"axis": 0}),
    "reshape": ([Aval((8, 4, 5), F32)], {"new_shape": (2, 16, 5)}),
    "transpose": ([Aval((256, 32, 64, 100), F32)], {"perm": (3, 1, 0, 2)}),
    "broadcast_in_dim": ([Aval((2, 1, 13), F32)], {"shape": (2, 64, 13), "broadcast_dimensions": (0, 1, 2)}),
    "concatenate": ([Aval((4, 16, 256), F32), Aval((4, 16, 256), F32)], {"axis": 1}),
    "slice": ([Aval((32, 4, 8), F32)], {"start": (0, 0, 0), "limit": (32, 1, 2), "strides": (1, 1, 1)}),
    "pad": ([Aval((32, 4, 8), F32)], {"padding_value": 0.0, "widths": ((0, 0), (1, 1), (0, 2))}),
    "take": ([Aval((4, 5), F32), Aval((3,), I32)], {"axis": 0}),
    "iota": ([], {"shape": (8, 16), "dimension": 1, "dtype": I32}),
    "full": ([], {"shape": (8, 16), "fill_value": 0.0, "dtype": F32}),
    "constant": ([], {"value": np.zeros((8, 16), F32)}),
    "sharding_constraint": ([Aval((8, 16), F32)], {"sharding": Sharding(_MESH, (("x",), ()))}),
    "reshard": ([Aval((8, 16), F32)], {"sharding": Sharding(_MESH, ((), ("y",)))}),
    "conv2d": (
        [Aval((2, 192, 224, 224), F32), Aval((64, 192, 3, 3), F32)],
        {"stride": (2, 2), "padding": ((0, 1), (0, 1))},
    ),
    "argsort": ([Aval((8, 16), F32)], {"axis": 1, "index_dtype": I32}),
    "dynamic_slice": ([Aval((8, 16), F32), Aval((), I32), Aval((), I32)], {"slice_sizes": (4, 16)}),
    "dynamic_update_slice": ([Aval((8, 16), F32), Aval((2, 16), F32), Aval((), I32), Aval((), I32)], {}),
    "propagation_barrier": ([Aval((8, 16), F32)], {"allowed_direction": "BOTH"}),
    # Manual-region collectives (they run only inside shard_map; see simshard/manual.py).
    **{n: ([Aval((8, 16), F32)], {"axis_name": "y", "size": 4}) for n in ("psum", "pmax", "pmin", "ppermute")},
    "all_gather": ([Aval((8, 16), F32)], {"axis_name": "y", "size": 4, "axis": 0, "tiled": True}),
    "psum_scatter": ([Aval((8, 16), F32)], {"axis_name": "y", "size": 4, "scatter_dimension": 0, "tiled": True}),
    "all_to_all": ([Aval((8, 16), F32)], {"axis_name": "y", "size": 4, "split_axis": 1, "concat_axis": 0, "tiled": True}),
    "axis_index": ([], {"axis_name": "y", "size": 4}),
    "shard_map": _region_example(),
    "stop_gradient": ([Aval((8, 16), F32)], {}),
    **_control_examples(),
}

HEADER = """\
# Ops and their factor rules

Generated from the op registry by `python -m simshard.ops.table`; do not edit by hand
(`tests/ops/test_table.py` checks this file against the registry).

Each op's sharding rule is Shardy's `OpShardingRule`: every operand and result dim maps to
factors, major to minor (`(ab)` is a dim made of factors `a` then `b`), with their sizes in
`{...}`. Factors are pass-through unless listed as `reduction` (sharding it leaves partial
results, combined with the rule's reduce op: `sum` unless `reduce=` says otherwise),
`need_replication` (must be whole when the op runs) or `permutation` (sharded execution needs
data from other devices). The rules are checked by running every op sharded
(`tests/ops/test_rules_by_execution.py`, `simshard.ops.check.check_rule`), except those of ops
with a program parameter (`scan`, `while`, `switch`), which the partitioner partitions by their
bodies: their rules guide propagation, and sharded runs check them
(`tests/transforms/test_control.py`).

"""


def _call(name: str, avals, params) -> str:
    args = [str(a) for a in avals] + [f"{k}={format_param(v)}" for k, v in params.items()]
    return f"{name}({', '.join(args)})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rows() -> list[tuple[str, str, str, str]]:
    out = []
    for name in sorted(OPS):
        op = OPS[name]
        if name in EXAMPLES:
            avals, params = EXAMPLES[name]
            results = op.abstract_eval(*avals, **params)
            rule = op.factor_rule(avals, results, **params)
            call = f"{_call(name, avals, params)} -> {', '.join(map(str, results))}"
            out.append((name, op.doc, call, str(rule)))
        else:
            out.append((name, op.doc, "", ""))
    return out


def render() -> str:
    lines = [HEADER.rstrip("\n"), "", "| op | what it does | example | rule |", "|---|---|---|---|"]
    for name, doc, call, rule in rows():
        example = f"`{_cell(call)}`" if call else "-"
        rule_text = f"`{_cell(rule)}`" if rule else "-"
        lines.append(f"| `{name}` | {_cell(doc)} | {example} | {rule_text} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
