"""The one memory ledger the executor and the estimate keep (simshard/report/ledger.py)."""

import numpy as np
import pytest

from simshard.report.collective_cost import AllToAllGroup, all_reduce_cost, all_to_all_cost, reduce_scatter_cost, sends
from simshard.report.ledger import NO_PEAK, MemoryLedger, OverCapacity, Peak
from simshard.report.memory import DeviceMemory


class _At:
    def __init__(self, id, source):
        self.id, self.source = id, source


def test_live_bytes_and_the_peak_with_where_it_happened():
    ledger = MemoryLedger()
    assert ledger.peak == NO_PEAK
    ledger.write([(0, np.zeros(4, np.float32)), (1, np.zeros(2, np.float32))])  # the inputs, 24 bytes
    ledger.inputs_placed()
    ledger.at(0, _At(7, "%3 dot"))
    ledger.write_one(2, np.zeros(8, np.float32))  # 56 live: the peak, at [7]
    ledger.free([0, 2])
    ledger.at(1, _At(8, "%4 add"))
    ledger.write_one(1, np.zeros(4, np.float32))  # overwrites b1: counted while the old one is live
    assert ledger.peak == Peak(56, 0, 7, "%3 dot")
    assert ledger.memory(3, capacity=100) == DeviceMemory(3, 56, 0, 7, "%3 dot", 24, 16, 100)


def test_a_write_past_the_capacity_holds_nothing_new():
    ledger = MemoryLedger()
    ledger.write([(0, np.zeros(4, np.float32))])
    with pytest.raises(OverCapacity) as e:
        ledger.write([(1, np.zeros(4, np.float32))], capacity=20)
    assert (e.value.needed, e.value.new, e.value.live) == (32, 16, 16)
    assert set(ledger.buffers) == {0} and ledger.live == 16 and ledger.peak.bytes == 16


def test_copies_diverge():
    ledger = MemoryLedger()
    ledger.write_one(0, np.zeros(4, np.float32))
    other = MemoryLedger()
    ledger.copy_into(other)
    other.free([0])
    assert ledger.live == 16 and other.live == 0 and 0 in ledger.buffers


def test_direct_collective_costs():
    group = (4, 5, 6)
    # an all-reduce of 2 elements over 3: one chunk is empty and travels nowhere
    assert [all_reduce_cost(group, i, 2, 4)[:4] for i in range(3)] == [(12, 12, 3, 3), (12, 12, 3, 3), (8, 8, 2, 2)]
    assert not sends("all_reduce", 0) and sends("all_gather", 0) and sends("all_to_all", 0)
    assert reduce_scatter_cost(group, 0, (0, 2, 1), 8)[:4] == (24, 0, 2, 0)
    sums = AllToAllGroup.of([(1, 1, 2)] * 3, [4, 4, 4])
    assert sums.uniform and all_to_all_cost(group, 2, sums)[:4] == (8, 16, 2, 2)


def test_a_device_memory_travels_as_a_tuple_of_every_field():
    """A device process ships its ``DeviceMemory`` as a plain tuple (``to_wire``); ``of_wire`` makes
    the same record again, every field included (a field added later and left out fails here)."""
    from dataclasses import astuple, fields

    for m in (DeviceMemory(3, 655360, 0, 7, "%3 dot_general", 589824, 65536),
              DeviceMemory(0, 0, -1, None, "", 0, 0, capacity=1 << 20)):
        wire = m.to_wire()
        assert type(wire) is tuple and len(wire) == len(fields(DeviceMemory)) and wire == astuple(m)
        assert DeviceMemory.of_wire(wire) == m
