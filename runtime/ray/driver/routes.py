"""The two ways a run's calls reach the device processes and come back: on the driver's control
lines (``LineRoute``) or as Ray actor calls (``RayRoute``). Each sends a process its run call,
waits for whichever answers come next, and reads one answer as an ``Outcome`` (the control line's:
the process's summaries, the exception its call raised, or the error that says it died)."""

from __future__ import annotations

import gc
import pickle
from typing import Any, Mapping, NamedTuple, Sequence

from ...wire import control_line
from ...wire.control_line import Outcome, OutcomeKind, Request
from ..protocol import DeviceSummary
from ..start import import_ray


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


class RunCall(NamedTuple):
    """One process's run call: the devices it runs, its host's handle, the ``RunPlan`` (a plain
    tuple) and the shards it passes (kept ones are named in the plan)."""

    devices: tuple[int, ...]
    group: tuple[int, ...]
    actor: Any
    plan: tuple
    args: list


class LineRoute:
    """A run on the control lines (group -> line): the plan and small shards on the socket; the
    driver polls ``spin`` seconds for each answer before it sleeps (``RayMesh.answer_spin``)."""

    name = "sockets"

    def __init__(self, lines: Mapping[tuple[int, ...], Any], calls, spin: float = 0.0):
        self.lines, self.calls, self.spin = lines, calls, spin
        self.waiter: control_line.Waiter | None = None  # the run's (``send`` makes it)

    def send(self, run_id: int, calls: Sequence[RunCall]) -> dict:
        """Every call written, each process's line -> its devices. The frames are all made first
        and then written back to back: the devices start as close together as the driver can
        make them, and the first collective waits for the last of them (each frame's pickling
        between two writes would spread their starts by as much again)."""
        frames = [(self.lines[c.group], control_line.ControlLine.frame(run_id, Request.RUN, (c.plan, *c.args)))
                  for c in calls]
        ringed = sum(line.write(frame) for line, frame in frames)
        self.calls["line"] += len(frames)
        self.calls["line by ring"] += ringed
        self.waiter = control_line.Waiter([line for line, _ in frames], run_id, self.spin)
        return {line: c.devices for (line, _), c in zip(frames, calls)}

    def wait(self, pending, run_id: int, left: float | None) -> list:
        return self.waiter.wait(list(pending), left)

    def answer(self, line, run_id: int) -> Outcome:
        raw = line.answers.get(run_id)
        if raw is not None and raw.by_ring:
            self.calls["answer by ring"] += 1
        kind, value = line.outcome(run_id)  # DEAD: its process died, as Ray would say its actor did
        return Outcome(kind, summaries_of(value) if kind is OutcomeKind.VALUE else value)


class RayRoute:
    """A run as Ray actor calls, the shards in Ray's object store (or inline)."""

    name = "ray"

    def __init__(self, calls):
        self.calls = calls

    def send(self, run_id: int, calls: Sequence[RunCall]) -> dict:
        """Every call made, each one's object ref -> its devices. The plan goes in one argument
        (Ray handles each argument on its own), the shards as top-level ones, so that Ray
        resolves the refs among them."""
        self.calls["remote"] += len(calls)
        return {c.actor.run.remote(c.plan, *c.args): c.devices for c in calls}

    def wait(self, pending, run_id: int, left: float | None) -> list:
        self.calls["wait"] += 1
        return import_ray().wait(list(pending), num_returns=1, timeout=left)[0]

    def answer(self, ref, run_id: int) -> Outcome:
        ray = import_ray()
        self.calls["get"] += 1
        try:
            return Outcome(OutcomeKind.VALUE, summaries_of(ray.get(ref)))
        except ray.exceptions.RayActorError as e:  # the host died, with all its devices
            return Outcome(OutcomeKind.DEAD, e)
        except ray.exceptions.RayTaskError as e:
            return Outcome(OutcomeKind.ERROR, getattr(e, "cause", e))
