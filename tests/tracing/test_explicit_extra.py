"""1,000 more explicit-mode cases recorded from JAX 0.10.2 (tests/tools/gen_jax_explicit_extra.py), one
test id each: random shapes, specs and meshes over reshape, broadcasting, contractions, reductions,
sort/cumsum, slicing, pad, gather/scatter, dynamic slices, reshard, creation and auto_axes.

Same checks as the recorded conformance cases: the type string ``jax.typeof`` gave while tracing, or
JAX's exception kind and first message line. Two things are normalised: the abstract mesh's device
fields, and ``np.int64(n)`` in shapes JAX printed from numpy ints. Where JAX itself failed internally
(an AssertionError from its reshape rule), simshard must refuse the reshape with a ShardingTypeError.
"""

from __future__ import annotations

import re

import pytest

import simshard as ss
from casedata import load_cases
from test_explicit_conformance import ERROR_KINDS, _jax_message, _run

CASES = load_cases("jax_explicit_extra.json")


def _normalise(text: str) -> str:
    return re.sub(r"np\.int64\((\d+)\)", r"\1", _jax_message(text))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_jax_explicit_extra_case(case):
    result = case["result"]
    if "error" not in result:
        _, seen = _run(case)
        assert str(seen["type"]) == result["type_str"]
        return
    with pytest.raises(Exception) as info:
        _run(case)
    err = info.value
    if result["error_type"] == "AssertionError":  # JAX's own rule crashed; simshard refuses cleanly
        assert isinstance(err, ss.ShardingTypeError) and "reshape is not supported" in str(err)
        return
    kind = ERROR_KINDS[result["error_type"]]
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    if kind is ValueError:
        assert not isinstance(err, ss.ShardingTypeError)
    assert str(err).splitlines()[0] == _normalise(result["error"])
