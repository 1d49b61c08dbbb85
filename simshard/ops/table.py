"""The table of ops and their factor rules, generated from the registry (``docs/ops.md``).

    python -m simshard.ops.table > docs/ops.md

Each row shows an op's doc line and its rule on one representative call. Ops registered without
an example here (user ops) still get a row, with no example.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..dtypes import short_name
from ..mesh import Mesh
from ..program import Aval
from ..sharding import Sharding
from . import OPS
from .elementwise import BINARY, UNARY

F32, I32 = np.dtype("float32"), np.dtype("int32")
_MESH = Mesh({"x": 2, "y": 4})

# op -> (operand avals, params): one representative call per op.
EXAMPLES: dict[str, tuple[list[Aval], dict[str, Any]]] = {
    **{n: ([Aval((8, 16), F32)], {}) for n in UNARY},
    **{n: ([Aval((8, 16), F32), Aval((8, 16), F32)], {}) for n in BINARY},
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
(`tests/ops/test_rules_by_execution.py`, `simshard.ops.check.check_rule`).

"""


def _param(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, np.dtype):
        return short_name(v)
    if isinstance(v, Sharding):
        return str(v)
    return repr(v)


def _call(name: str, avals, params) -> str:
    args = [str(a) for a in avals] + [f"{k}={_param(v)}" for k, v in params.items()]
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
