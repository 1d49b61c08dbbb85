"""Dispatch tables by instruction kind are checked against the instruction set when built."""

import pytest

from simshard.spmd import INSTRUCTIONS
from simshard.spmd.dispatch import COLLECTIVE_KINDS, INSTRUCTION_KINDS, DispatchError, dispatch_table


def test_the_kinds_are_read_from_the_instruction_classes():
    assert INSTRUCTION_KINDS == set(INSTRUCTIONS)
    assert COLLECTIVE_KINDS == {k for k, c in INSTRUCTIONS.items() if c.is_collective}
    assert "all_reduce" in COLLECTIVE_KINDS and "compute" not in COLLECTIVE_KINDS


def test_a_table_missing_a_kind_or_naming_an_unknown_one_is_refused():
    full = {k: k for k in INSTRUCTION_KINDS}
    assert dict(dispatch_table(full, "here")) == full
    with pytest.raises(DispatchError, match=r"here: no handler for compute"):
        dispatch_table({k: k for k in INSTRUCTION_KINDS - {"compute"}}, "here")
    with pytest.raises(DispatchError, match=r"lacks: gather"):
        dispatch_table({**full, "gather": None}, "here")
    with pytest.raises(DispatchError, match=r"no handler for all_to_all"):
        dispatch_table({k: k for k in COLLECTIVE_KINDS - {"all_to_all"}}, "there", COLLECTIVE_KINDS)


def test_the_executor_the_estimate_and_the_collectives_cover_every_kind():
    from simshard.report.estimate.walk import STEPS
    from simshard.runtime.core.collectives import RUNS, SIGNATURES
    from simshard.runtime.core.executor import STEPS as EXECUTOR_STEPS

    assert set(STEPS) == set(EXECUTOR_STEPS) == INSTRUCTION_KINDS
    assert set(RUNS) == set(SIGNATURES) == COLLECTIVE_KINDS
