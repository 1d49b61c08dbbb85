"""Every registered op's factor rule, checked by running it sharded (hypothesis).

Per op a strategy from ``tests/opcases.py`` draws inputs (shapes with uneven and size-1 dims),
params, a mesh of 1-3 axes of sizes 1-4 and a random valid assignment of mesh axes to the rule's
shardable factors; ``check_rule`` must find the sharded run bitwise equal to the whole op.

A new op without a generator there fails ``test_rule_holds_by_execution`` (it is parametrized over
``set(OPS) | set(GENERATORS)``) and ``test_every_op_has_a_generator``.
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from opcases import GENERATORS, RESULT_ONLY, assignments, meshes
from simshard.ir.program import Aval
from simshard.ops import OPS, get_op
from simshard.ops.check import check_rule

MAX_EXAMPLES = int(os.environ.get("SIMSHARD_OPS_EXAMPLES", "60"))


# -- the property ------------------------------------------------------------------------------
# Ops whose rules have the most structure (compound dims, windows, contractions) get several
# independent runs of MAX_EXAMPLES each.
HEAVY = {"conv2d": 8, "reshape": 4, "dot_general": 3, "broadcast_in_dim": 2, "take": 2}


def _check_random_case(op_name, data):
    assert op_name in GENERATORS, f"op {op_name!r} has no input generator in {__file__}: add one"
    assert op_name in OPS, f"generator for {op_name!r}, which is not registered"
    mesh = data.draw(meshes(), label="mesh")
    arrays, params = data.draw(GENERATORS[op_name](mesh), label="case")
    note(f"shapes {[a.shape for a in arrays]} dtypes {[a.dtype for a in arrays]}")
    op = get_op(op_name)
    in_avals = [Aval(a.shape, a.dtype) for a in arrays]
    out_avals = op.abstract_eval(*in_avals, **params)
    rule = op.factor_rule(in_avals, out_avals, **params)
    note(f"rule {rule}")
    in_shapes, out_shapes = [a.shape for a in in_avals], [a.shape for a in out_avals]
    assignment = data.draw(assignments(rule, in_shapes, out_shapes, mesh, op_name in RESULT_ONLY), label="assignment")
    report = check_rule(op_name, arrays, params, mesh, assignment)
    note(str(report))
    sizes = rule.sizes
    sharded = [f for f, axes in assignment.items() if math.prod(mesh.shape[a] for a in axes) > 1]
    event(f"{len(sharded)} factor(s) sharded")
    if any(rule.kind(f) == "reduction" for f in sharded):
        event("a reduction factor sharded")
    if any(sizes[f] % math.prod(mesh.shape[a] for a in assignment[f]) for f in sharded):
        event("uneven")


# Manual-region ops need a whole device group to run; tests/test_manual.py checks them by execution.
# Ops with a program parameter (scan, while, switch) are partitioned by their bodies, never run on
# blocks by their kernel: tests/transforms/test_control.py checks their sharded runs.
CHECKED = {name for name, op in OPS.items() if not op.region_only and not op.structured}
CASES = [(op, run) for op in sorted(CHECKED | set(GENERATORS)) for run in range(HEAVY.get(op, 1))]


@pytest.mark.parametrize("op_name, run", CASES, ids=[op if not run else f"{op}-more{run}" for op, run in CASES])
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rule_holds_by_execution(op_name, run, data):
    _check_random_case(op_name, data)


def test_every_op_has_a_generator():
    assert set(GENERATORS) == CHECKED
