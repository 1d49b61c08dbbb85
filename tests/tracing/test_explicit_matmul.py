"""``jnp.matmul`` in explicit mode against real JAX (issue 34): 300 cases recorded from JAX 0.10.2
(tests/tools/gen_jax_explicit_matmul.py) whose operands differ in rank or batch extent: a batch
dim only one side has (a weight shared by a batch, from the left or the right), extent-1 batch
dims sharded or not, vectors, and ``out_sharding`` where the dot_general's result is transposed
into numpy's order. simshard lowers them as jnp.matmul does (no broadcast of either operand), so
the result's type, or the error and its first line, is JAX's."""

from __future__ import annotations

import pytest

import simshard as ss
from casedata import load_cases
from test_explicit_conformance import ERROR_KINDS, _jax_message, _run

CASES = load_cases("jax_explicit_matmul.json")


def _ops(program) -> list[str]:
    return [e.op for e in program.eqns]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_jax_explicit_matmul_case(case):
    result = case["result"]
    if "error" not in result:
        program, seen = _run(case)
        assert str(seen["type"]) == result["type_str"]
        assert "broadcast_in_dim" not in _ops(program)
        return
    with pytest.raises(Exception) as info:
        _run(case)
    err = info.value
    kind = ERROR_KINDS[result["error_type"]]
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    if kind is ValueError:
        assert not isinstance(err, ss.ShardingTypeError)
    assert str(err).splitlines()[0] == _jax_message(result["error"])
