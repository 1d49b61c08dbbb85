"""What a device works out once per collective instruction (``runtime/core/collectives/prepared.py``):
a permute's signature and whether this device reads its buffer, the note's words; a host keeps
them per loaded program, so a schedule run again finds them made and runs to the same bits; the
note a message carries is the one the driver's diagnosis names (``failures.sent_at``)."""

import asyncio

import numpy as np

from simshard.runtime.core.collectives import signature
from simshard.runtime.core.collectives.prepared import Prepared, note, prepare
from simshard.runtime.core.executor import Executor
from simshard.runtime.local.in_memory import InMemoryTransport
from simshard.runtime.ray.driver.failures import sent_at
from simshard.spmd import AllReduce, CollectivePermute, Schedule

PERMUTE = CollectivePermute(4, "%3 permute", src=0, dst=1, pairs=((0, 1), (1, 2)), shape=(2,), dtype="float32",
                            axes=("x",))
SUM = AllReduce(5, "%4 dot_general", src=1, dst=2, group=(0, 1, 2), axes=("x",))


def test_a_permute_is_prepared_per_device_and_other_kinds_leave_their_signature_to_the_run():
    source, middle, target = (prepare(PERMUTE, d) for d in (0, 1, 2))
    assert source.tag == middle.tag == target.tag == signature(PERMUTE)
    assert (source.reads, middle.reads, target.reads) == (True, True, False)  # device 2 only receives
    assert note(7, PERMUTE) == "at position 7 [4] collective_permute from '%3 permute'"
    assert f"at position 7{source.what}" == note(7, PERMUTE)
    summed = prepare(SUM, 0)
    assert summed.tag is None and summed.reads  # its dtype and shape come from the buffer each run


def test_the_note_a_message_carries_is_where_the_drivers_diagnosis_says_it_was_sent():
    schedule = Schedule(0, (0,), (PERMUTE,), (1,))
    assert sent_at(schedule, PERMUTE.id) == note(0, PERMUTE)


def _chain(devices, steps):
    return [Schedule(d, (0,), tuple(CollectivePermute(k + 1, f"%{k} permute", src=k, dst=k + 1,
                                                      pairs=((k % 2, 1 - k % 2),), shape=(3,), dtype="float32")
                                   for k in range(steps)), (steps,)) for d in devices]


def test_a_schedule_run_again_with_its_prepared_collectives_makes_none_and_gives_the_same_bits():
    schedules, kept = _chain((0, 1), 6), {0: Prepared(0), 1: Prepared(1)}

    async def run():
        transport = InMemoryTransport((0, 1))
        executors = [Executor(s, transport, prepared=kept[s.device]) for s in schedules]
        return await asyncio.gather(*(e.run([np.arange(3, dtype=np.float32) + 10 * e.device]) for e in executors))

    first = asyncio.run(run())
    made = {d: dict(p.collectives) for d, p in kept.items()}
    assert all(len(m) == 6 for m in made.values())  # one per collective instruction
    second = asyncio.run(run())
    assert {d: p.collectives for d, p in kept.items()} == made
    assert all(a is b for d in (0, 1) for a, b in zip(kept[d].collectives.values(), made[d].values()))  # reused
    # device 0's array went there and back three times; device 1, the target of no pair last, has zeros
    want = [np.arange(3, dtype=np.float32).tobytes(), np.zeros(3, np.float32).tobytes()]
    assert [o[0].tobytes() for o in first] == [o[0].tobytes() for o in second] == want
