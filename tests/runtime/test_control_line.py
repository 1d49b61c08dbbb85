"""The driver's control line to a device process (runtime/wire/control_line.py; the host's end,
control_server.py), without Ray: a ``ControlServer`` on an event loop in a thread, serving a
stand-in for ``DeviceHost.run``."""

import asyncio
from collections import Counter
import math
import pickle
import threading
import time

import numpy as np
import pytest

from simshard.runtime.wire import control_line, control_server
from simshard.runtime.wire.control_line import ControlLine, HostError
from simshard.runtime.wire.control_server import ControlServer
from runtime_helpers import EVENT_LOOPS, new_loop

SECRET = b"s" * 16


class Host:
    """A ControlServer whose ``run(plan, *inputs)`` sums its inputs (or raises, or waits, as the
    plan says), on its own loop in a thread."""

    def __init__(self, loop: str = "asyncio"):
        self.loop = new_loop(loop)
        self.release = asyncio.Event()
        self.seen: list = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ControlServer(SECRET, {"run": self.run, "fetch": self.fetch})
        self.address = self.call(self.server.start())

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def fetch(self, ids):
        return [np.arange(n, dtype=np.float32) for n in ids]

    async def run(self, plan, *inputs):
        self.seen.append((plan, inputs))
        if plan == "raise":
            raise ValueError("an input is an array this process no longer holds (id 7)")
        if plan == "wait":
            await self.release.wait()
        if plan == "unpicklable":
            return {"status": "error", "error": threading.Lock()}
        return pickle.dumps({"plan": plan, "sum": [float(np.sum(a)) for a in inputs]})

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)
        time.sleep(0.05)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(params=EVENT_LOOPS)
def host(request):
    """A host on each event loop Ray may give a device process."""
    h = Host(request.param)
    yield h
    h.stop()


def answer(line: ControlLine, run_id: int, timeout: float = 10.0) -> bytes:
    assert control_line.wait([line], run_id, timeout) == [line]
    return line.take(run_id)


def test_a_run_goes_and_its_summary_comes_back_with_the_arrays_by_value(host):
    line = ControlLine(host.address, SECRET)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    line.send(0, "run", ("p0", a, a, np.ones(5)))  # a named twice
    got = pickle.loads(answer(line, 0))
    assert got == {"plan": "p0", "sum": [66.0, 66.0, 5.0]}
    (_, inputs), = host.seen
    assert inputs[0] is inputs[1]  # sent once: pickle's memo
    assert np.array_equal(inputs[0], a) and not inputs[0].flags.writeable  # a run's inputs are not written
    line.close()


def test_a_fetch_answers_arrays_read_off_the_socket_into_the_driver_s_own_memory(host):
    line = ControlLine(host.address, SECRET)
    line.send(7, "fetch", ([3, 0, 1 << 20],))
    got = answer(line, 7)
    assert [a.tolist() for a in got[:2]] == [[0.0, 1.0, 2.0], []]
    assert np.array_equal(got[2], np.arange(1 << 20, dtype=np.float32))
    assert all(a.flags.writeable for a in got)  # each its own, not a view of anything shared
    line.send(8, "no such method", ())
    with pytest.raises(HostError):
        answer(line, 8)
    line.close()


def test_answers_are_matched_by_run_id_and_a_given_up_run_is_dropped(host):
    line = ControlLine(host.address, SECRET)
    line.send(1, "run", ("wait",))
    assert control_line.wait([line], 1, 0.2) == []  # not answered yet: the wait times out
    line.send(2, "run", ("p2", np.ones(3)))
    assert pickle.loads(answer(line, 2))["sum"] == [3.0]  # a later run answers while the first waits
    host.loop.call_soon_threadsafe(host.release.set)
    line.send(3, "run", ("p3",))
    assert pickle.loads(answer(line, 3))["plan"] == "p3"
    assert 1 not in line.answers  # run 1's answer came and went: nobody waited for it any more
    line.close()


def test_a_polling_wait_gets_the_answer_and_sleeps_once_its_spin_is_over(host):
    line = ControlLine(host.address, SECRET)
    line.send(0, "run", ("p0", np.ones(2)))
    assert control_line.wait([line], 0, 10.0, spin=1.0) == [line]  # polled for: the same answer
    assert pickle.loads(line.take(0))["sum"] == [2.0]
    line.send(1, "run", ("wait",))
    start, cpu = time.monotonic(), time.process_time()
    assert control_line.wait([line], 1, 0.3, spin=0.05) == []  # no answer: polls 50 ms, then sleeps
    assert time.monotonic() - start >= 0.3
    assert time.process_time() - cpu < 0.2  # slept through most of the 0.3 s
    assert control_line.wait([line], 1, 0.1, spin=math.inf) == []  # polls until the timeout
    host.loop.call_soon_threadsafe(host.release.set)
    assert pickle.loads(answer(line, 1))["plan"] == "wait"
    line.close()


def test_what_run_raises_comes_back_as_a_host_error(host):
    line = ControlLine(host.address, SECRET)
    line.send(0, "run", ("raise",))
    with pytest.raises(HostError) as err:
        answer(line, 0)
    assert isinstance(err.value.args[0], ValueError) and "no longer holds (id 7)" in str(err.value.args[0])
    line.send(1, "run", ("unpicklable",))  # a summary plain pickle refuses goes by value (cloudpickle) or as text
    with pytest.raises(HostError, match="lock"):
        answer(line, 1)
    line.send(2, "run", ("p2",))
    assert pickle.loads(answer(line, 2))["plan"] == "p2"  # the line still works
    line.close()


def test_a_host_that_goes_breaks_the_line_and_the_wait_says_so(host):
    line = ControlLine(host.address, SECRET)
    line.send(0, "run", ("wait",))
    time.sleep(0.1)
    host.stop()  # its process going closes its end
    start = time.monotonic()
    assert control_line.wait([line], 0, 10.0) == [line]
    assert time.monotonic() - start < 5.0
    assert isinstance(line.failed, ConnectionError) and "closed its end" in str(line.failed)
    line.send(1, "run", ("p1",))  # a broken line writes nothing and does not raise: the wait reports it
    assert control_line.wait([line], 1, 0.0) == [line]


def test_a_connection_without_the_secret_is_closed(host):
    line = ControlLine(host.address, b"x" * 16)
    line.send(0, "run", ("p0",))
    assert control_line.wait([line], 0, 10.0) == [line] and line.failed is not None
    assert host.seen == []  # nothing ran


def test_a_large_answer_goes_out_in_chunks_as_the_driver_reads_it(host, monkeypatch):
    """Flow control: an answer of 64 MiB to a driver that is slow to read never sits whole in the
    host's write buffer; it goes out a chunk at a time, as room is made, and arrives intact."""
    seen = []
    made = control_server.CallReader.connection_made

    def connection_made(self, transport):  # the write buffer's size after every write
        class Watched:
            def __getattr__(self, name):
                return getattr(transport, name)

            def write(self, data):
                transport.write(data)
                seen.append(transport.get_write_buffer_size())

        made(self, Watched())

    monkeypatch.setattr(control_server.CallReader, "connection_made", connection_made)
    line = ControlLine(host.address, SECRET)
    n = 16 << 20  # float32s: 64 MiB
    line.send(3, "fetch", ([n],))
    time.sleep(0.3)  # the driver reads nothing yet: the host's buffer fills and it waits
    (got,) = answer(line, 3, timeout=60.0)
    assert np.array_equal(got, np.arange(n, dtype=np.float32))
    assert seen and max(seen) <= 2 * control_line.CHUNK + (1 << 20)  # never the whole 64 MiB
    line.close()


def test_a_call_of_more_parts_than_one_sendmsg_takes_arrives_whole(host):
    """A run with more input shards than one ``sendmsg`` writes (``IOV_PARTS``) goes in several,
    each shard in order."""
    line = ControlLine(host.address, SECRET)
    shards = [np.full(3, i, dtype=np.float32) for i in range(control_line.IOV_PARTS + 90)]
    line.send(5, "run", ("many", *shards))
    got = pickle.loads(answer(line, 5))
    assert got["sum"] == [3.0 * i for i in range(len(shards))]
    line.close()


def test_a_runs_calls_are_all_made_before_the_first_is_written(monkeypatch):
    """``LineRoute.send``: every process's frame pickled first, then the frames written back to
    back (a frame made between two writes would delay the later processes' starts, which the
    first collective waits for); each line answers its own call, and the calls are counted."""
    from simshard.runtime.ray.driver.routes import LineRoute, RunCall

    events = []
    frame, write = ControlLine.frame, ControlLine.write
    monkeypatch.setattr(ControlLine, "frame", staticmethod(lambda *a: events.append("frame") or frame(*a)))
    monkeypatch.setattr(ControlLine, "write", lambda self, f: events.append("write") or write(self, f))
    hosts = [Host(), Host()]
    lines = {(0, 1): ControlLine(hosts[0].address, SECRET), (2, 3): ControlLine(hosts[1].address, SECRET)}
    try:
        calls, counted = [RunCall((0, 1), (0, 1), None, "p0", [np.ones(3)]),
                          RunCall((2,), (2, 3), None, "p1", [np.ones(4), np.ones(2)])], Counter()
        pending = LineRoute(lines, counted).send(9, calls)
        assert events == ["frame", "frame", "write", "write"]
        assert pending == {lines[(0, 1)]: (0, 1), lines[(2, 3)]: (2,)}
        assert counted == {"line": 2, "line by ring": 0}  # (no rings opened: every call on the socket)
        assert pickle.loads(answer(lines[(0, 1)], 9)) == {"plan": "p0", "sum": [3.0]}
        assert pickle.loads(answer(lines[(2, 3)], 9)) == {"plan": "p1", "sum": [4.0, 2.0]}
    finally:
        for line in lines.values():
            line.close()
        for h in hosts:
            h.stop()
