"""Aggressive propagation through an element-wise op: operand-to-operand ("sideways") growth is
limited to what the result can hold (Shardy's ``aggressive_propagation.mlir``, the six
``*sideways*`` cases, at HEAD after "Bring back blocking sideways propagation"). Each case is a
whole ``propagate(strategy="aggressive")`` run on a Program whose ``add`` result carries the
annotation Shardy's test puts on it."""

import pytest

from shardy_cases import expected, run_case

M22 = {"mesh_a_2_b_2": {"a": 2, "b": 2}}
M4 = {"mesh_a_4": {"a": 4}}


def _case(name, meshes, arg0, arg1, result, want_arg1, want_v0, want_result0=None):
    mesh = next(iter(meshes))
    exp = {"arg0": f"<@{mesh}, [{arg0}]>", "arg1": want_arg1 and f"<@{mesh}, [{want_arg1}]>", "v0": f"<@{mesh}, [{want_v0}]>"}
    if want_result0 is not None:
        exp["result0"] = f"<@{mesh}, [{want_result0}]>"
    return pytest.param(
        {
            "id": name,
            "kind": "propagation",
            "strategy": "aggressive",
            "meshes": meshes,
            "inputs": [
                {"name": "arg0", "shape": [8], "sharding": f"<@{mesh}, [{arg0}]>"},
                {"name": "arg1", "shape": [8], "sharding": f"<@{mesh}, [{arg1}]>" if arg1 else None},
            ],
            "ops": [{"out": "v0", "op": "add", "args": ["arg0", "arg1"], "sharding": f"<@{mesh}, [{result}]>"}],
            "outputs": ["v0"],
            "expected": exp,
        },
        id=name,
    )


CASES = [
    # a closed empty result stops sideways propagation: arg1 stays unsharded
    _case("sideways_propagation_if_result_is_closed_empty", M22, '{"a"}', None, "{}", None, "{}"),
    _case("allow_sideways_propagation_if_result_is_open_empty", M22, '{"a", "b"}', "{?}", "{?}", '{"a", "b", ?}', '{"a", "b", ?}'),
    # a closed sub-axis result truncates "a" to "a":(1)2
    _case("sideways_propagation_if_result_is_closed_sub_axis", M4, '{"a"}', "{?}", '{"a":(1)2}', '{"a":(1)2, ?}', '{"a":(1)2}'),
    # a closed {"a"} result truncates {"a", "b"} to {"a"}
    _case("allow_partial_sideways_propagation_if_conflicting_with_result", M22, '{"a", "b"}', "{?}", '{"a"}', '{"a", ?}', '{"a"}'),
    _case("allow_sideways_propagation_if_result_fully_matches", M22, '{"a", "b"}', "{?}", '{"a", "b"}', '{"a", "b", ?}', '{"a", "b"}'),
]


@pytest.mark.parametrize("case", CASES)
def test_aggressive_sideways_through_elementwise(case):
    assert run_case(case) == expected(case)


def test_allow_sideways_propagation_if_no_conflicting_with_one_of_multiple_results():
    # Shardy's case is a custom call with the rule ([i], [i])->([i], [i]) and a closed empty
    # first result: not element-wise, so nothing caps the sideways propagation.
    from prop_helpers import S, mesh, run_factors

    m = mesh(a=2, b=2)
    args = ("i,i->i,i", [(8,), (8,)], [(8,), (8,)], [S('<@mesh, [{"a"}]>', m), S('<@mesh, [{?}]>', m)],
            [S('<@mesh, [{}]>', m), S('<@mesh, [{?}]>', m)], m)
    want = [None, '<@mesh, [{"a", ?}]>', None, '<@mesh, [{"a", ?}]>']
    assert run_factors("aggressive", *args) == want
