"""The two ways a run's calls reach the device processes and come back: on the driver's control
lines (``LineRoute``) or as Ray actor calls (``RayRoute``). Each sends a process its run call,
waits for whichever answers come next, and reads one answer as an ``Answer``."""

from __future__ import annotations

import gc
import pickle
from enum import Enum
from typing import Any, Mapping, NamedTuple

from ... import control_line
from ..protocol import DeviceSummary
from ..start import import_ray


class Reply(str, Enum):
    """What came back for a run call."""

    VALUE = "value"  # the process's summaries
    DEAD = "dead"  # the process died (its actor, or its end of the control line, is gone)
    ERROR = "error"  # the call raised


class Answer(NamedTuple):
    reply: Reply
    value: Any  # device -> DeviceSummary (VALUE), or the exception (DEAD, ERROR)


def summaries_of(value) -> dict[int, DeviceSummary]:
    """A device host's answer (``DeviceHost.run``: device -> summary tuple, pickled where it could
    be), unpickled with the garbage collector paused: its thousands of small acyclic objects (a
    record and a span per instruction, a row per message) would otherwise set off collections,
    some of them over the driver's whole heap, which cost more than the unpickling itself
    (measured: 3 to 60 us per instruction instead of 3)."""
    if isinstance(value, bytes):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            value = pickle.loads(value)
        finally:
            if was_enabled:
                gc.enable()
    return {d: DeviceSummary.of(wire) for d, wire in value.items()}


class LineRoute:
    """A run on the control lines (group -> line): the plan and small shards on the socket."""

    name = "sockets"

    def __init__(self, lines: Mapping[tuple[int, ...], Any], calls):
        self.lines, self.calls = lines, calls

    def send(self, run_id: int, group, actor, plan: tuple, args: list):
        self.lines[group].send(run_id, "run", (plan, *args))
        self.calls["line"] += 1
        return self.lines[group]

    def wait(self, pending, run_id: int, left: float | None) -> list:
        return control_line.wait(list(pending), run_id, left)

    def answer(self, line, run_id: int) -> Answer:
        kind, value = line.outcome(run_id)  # "dead": its process died, as Ray would say its actor did
        reply = Reply(kind)
        return Answer(reply, summaries_of(value) if reply is Reply.VALUE else value)


class RayRoute:
    """A run as Ray actor calls, the shards in Ray's object store (or inline)."""

    name = "ray"

    def __init__(self, calls):
        self.calls = calls

    def send(self, run_id: int, group, actor, plan: tuple, args: list):
        # the plan in one argument (Ray handles each argument on its own), the shards as
        # top-level ones, so that Ray resolves the refs among them
        self.calls["remote"] += 1
        return actor.run.remote(plan, *args)

    def wait(self, pending, run_id: int, left: float | None) -> list:
        self.calls["wait"] += 1
        return import_ray().wait(list(pending), num_returns=1, timeout=left)[0]

    def answer(self, ref, run_id: int) -> Answer:
        ray = import_ray()
        self.calls["get"] += 1
        try:
            return Answer(Reply.VALUE, summaries_of(ray.get(ref)))
        except ray.exceptions.RayActorError as e:  # the host died, with all its devices
            return Answer(Reply.DEAD, e)
        except ray.exceptions.RayTaskError as e:
            return Answer(Reply.ERROR, getattr(e, "cause", e))
