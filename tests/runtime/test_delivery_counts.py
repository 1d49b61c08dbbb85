"""The driver's check that every message of a Ray run was taken by its receiver
(``ray/driver/failures.check_delivered``), from the counts the devices report: no device asks its
peers anything when it finishes. A message sent and never taken (its receiver had finished, or it
was left in the mailbox) is a ``ScheduleMismatchError`` naming both devices, the message and where
its sender was."""

from __future__ import annotations

import pytest

from simshard.runtime.errors import ScheduleMismatchError
from simshard.runtime.ray.driver.failures import check_delivered
from simshard.runtime.ray.protocol import DeviceSummary, Status
from simshard.spmd import CollectivePermute, Schedule, SpmdProgram

PERM = CollectivePermute(3, "%3 perm", src=0, dst=1, pairs=((0, 1),), shape=(2,), dtype="float32")
SPMD = SpmdProgram(None, (Schedule(0, (0,), (PERM,), (1,)), Schedule(1, (0,), (PERM,), (1,))), (), ())


def summary(transfers=(), taken=(), received=0, undelivered=()) -> DeviceSummary:
    return DeviceSummary(Status.OK, "finished", transfers=tuple(transfers), taken=tuple(taken), received=received,
                         undelivered=tuple(undelivered))


def test_every_message_taken_passes():
    check_delivered(SPMD, {0: summary([(0, 1, "sent", (3, 0), 8)], [("unix", 1)]),
                           1: summary([(1, 0, "received", (3, 0), 8)], received=1)})


def test_a_message_never_taken_is_named_from_the_counts_and_rows():
    # device 0 sent (3, 0) to device 1, which finished without taking it (late, or still on its way)
    with pytest.raises(ScheduleMismatchError, match=r"device 0 sent message \(3, 0\) \(instruction id 3, sent at "
                                                    r"position 0 \[3\] collective_permute from '%3 perm'\) to device 1, "
                                                    r"which finished without receiving it"):
        check_delivered(SPMD, {0: summary([(0, 1, "sent", (3, 0), 8)], [("unix", 1)]), 1: summary()})


def test_a_message_left_in_the_mailbox_is_named_with_its_own_note():
    with pytest.raises(ScheduleMismatchError, match=r"sent at step 7\) to device 1"):
        check_delivered(SPMD, {0: summary([(0, 1, "sent", (3, 0), 8)], [("process", 1)]),
                               1: summary(undelivered=[(0, (3, 0), "at step 7")])})


def test_a_summary_travels_as_a_plain_tuple_with_its_outputs_replaced_by_the_ids_kept():
    """``DeviceSummary.to_wire(outputs)``: the tuple of the summary with ``outputs`` in place of its
    own (the ids its host keeps them under), every other field where ``of`` reads it back."""
    s = summary([(0, 1, "sent", (3, 0), 8)], [("unix", 1)], received=2)._replace(outputs=("an array",), ran=((3, 0),))
    assert DeviceSummary.of(s.to_wire((7,))) == s._replace(outputs=(7,))
    assert DeviceSummary.of(s.to_wire()) == s and s.to_wire()[0] == "ok"
