"""Propagation reads every rule an op has (its own and those ``ss.register_rule`` adds): at each
visit it propagates through each and keeps the outcome that leaves the op's tensors the most
sharded, the op's own rule first among equals (docs/propagation.md, "Ops with several rules")."""

import numpy as np
import pytest

import simshard as ss
from simshard.ir.program import Aval
from simshard.ops import OPS, factor_rule
from simshard.tracing import ShapeDtype, trace

MESH = ss.Mesh({"x": 2, "y": 4})
OP = "test_rowwise_neg"


def _rule(blocked):
    return lambda ins, outs, **_: factor_rule("ab->ab", [ins[0].shape], [outs[0].shape], blocked=blocked)


@pytest.fixture
def op():
    # an elementwise negation whose own rule is over-cautious: nothing flows along either dim
    o = ss.register_op(OP, lambda x, **_: (Aval(x.shape, x.dtype),), lambda x, **_: (np.negative(x),), _rule("ab"))
    yield o
    del OPS[OP]


def _out(strategy="user_priority", in_sh=("x", "y")):
    p = trace(lambda a: OPS[OP](a) + 1.0, ShapeDtype((8, 8)), in_shardings=(ss.NamedSharding(MESH, ss.P(*in_sh)),))
    return str(ss.propagate(p, strategy=strategy).sharding_of(0))


def test_an_opaque_own_rule_alone_propagates_nothing(op):
    assert _out() == "<@mesh, [{?}, {?}]>"


@pytest.mark.parametrize("strategy", ["aggressive", "user_priority"])
def test_a_registered_rule_is_used(op, strategy):
    ss.register_rule(OP, _rule(""))
    assert _out(strategy) == '<@mesh, [{"x", ?}, {"y", ?}]>'


def test_the_most_sharded_outcome_wins_then_the_others_still_apply(op):
    # rule 2 carries dim 0 ("x": 2 blocks), rule 3 dim 1 ("y": 4 blocks): one aggressive run
    # takes rule 3; op-priority's later stages revisit the op, and rule 2 then adds "x"
    ss.register_rule(OP, _rule("b"))
    ss.register_rule(OP, _rule("a"))
    assert _out("aggressive") == '<@mesh, [{?}, {"y", ?}]>'
    assert _out("user_priority") == '<@mesh, [{"x", ?}, {"y", ?}]>'


def test_ties_go_to_the_earlier_rule(op):
    # two outcomes of 2 blocks each: "x" on the result's dim 0 (rule 2) or on its dim 1 (rule 3,
    # a transposing claim, only to make a tie; propagation does not check rules on data)
    ss.register_rule(OP, _rule("b"))
    ss.register_rule(OP, lambda ins, outs, **_: factor_rule("ab->ba", [ins[0].shape], [outs[0].shape]))
    assert _out("aggressive", in_sh=("x", None)) == '<@mesh, [{"x", ?}, {?}]>'


def test_a_program_propagated_through_a_registered_rule_runs_bitwise(op):
    ss.register_rule(OP, _rule(""))
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    res = ss.run(lambda a: OPS[OP](a) + 1.0, a, mesh=MESH, in_shardings=(ss.P("x", "y"),), backend="local")
    assert res.verify.bitwise
    assert [r.kind for r in res.comm.records] == []
