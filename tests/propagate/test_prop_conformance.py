"""Conformance with Shardy: every ``propagation`` case of tests/data/shardy_propagation.json, one
test id each, run under the strategy the case names; every value the oracle checks must print
exactly as Shardy's (``None`` = no sharding, see shardy_cases.text)."""

import pytest

from shardy_cases import expected, propagation_cases, run_case

CASES = propagation_cases()
XFAIL: dict[str, str] = {}


def _param(case):
    marks = [pytest.mark.xfail(strict=True, reason=XFAIL[case["id"]])] if case["id"] in XFAIL else []
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_shardy_propagation_case(case):
    assert run_case(case) == expected(case)


def test_every_propagation_case_is_collected():
    assert len(CASES) == 38
