"""Every registered op, partitioned from arbitrary shardings: the generic path is generic.

For each op a one-equation program is built from the rule checker's input generators
(tests/ops/test_rules_by_execution.py: uneven and size-1 dims, exact values); its inputs and
result get *random* shardings (usually incompatible with the op, so operands are resharded,
factors chosen, reductions left pending and reduced), and the partitioned program must equal
the op run whole, bit for bit, with every collective at its analytic minimum.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simshard.ops import OPS, get_op
from simshard.ir.program import Aval, Eqn, Literal, Program, Value

from .helpers import shardings
from .run import run_partitioned

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
rbe = importlib.import_module("test_rules_by_execution")

NAMES = sorted(n for n, op in OPS.items() if not op.region_only and n in rbe.GENERATORS)


@pytest.mark.parametrize("op_name", NAMES)
@settings(max_examples=int(__import__("os").environ.get("SIMSHARD_PARTITION_EXAMPLES", "8")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_op_partitions_from_random_shardings(op_name, data):
    mesh = data.draw(rbe.meshes(), label="mesh")
    arrays, params = data.draw(rbe.GENERATORS[op_name](mesh), label="case")
    op = get_op(op_name)
    in_avals = [Aval(a.shape, a.dtype) for a in arrays]
    out_avals = op.abstract_eval(*in_avals, **params)
    ins = [Value(i, a) for i, a in enumerate(in_avals)]
    operands = []
    for v, a in zip(ins, arrays):
        operands.append(Literal(a[()], v.aval) if a.ndim == 0 and data.draw(st.booleans(), label="literal") else v)
    used = [v for v in operands if isinstance(v, Value)]
    outs = [Value(len(ins) + k, a) for k, a in enumerate(out_avals)]
    program = Program(tuple(used), (Eqn(op_name, tuple(operands), tuple(outs), tuple(params.items())),), tuple(outs))
    sh = {v: data.draw(shardings(mesh, v.aval.ndim, pending=False), label=f"sharding of %{v.id}") for v in used + outs}
    program = program.with_shardings(sh)
    args = [a for a, v in zip(arrays, operands) if isinstance(v, Value)]
    run_partitioned(program, args)
