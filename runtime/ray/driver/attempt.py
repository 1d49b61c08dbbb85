"""One attempt at running a loaded program on every device of a ``RayMesh``.

``RunAttempt`` sends each device process its run call (``send``), collects the answers as they
come (``collect``), stops the others when a device fails or dies (``abort``, after a grace time
in which survivors of a dead device name what they waited for), and turns the answers into an
``Execution`` or the error that names the device (``result``). Its calls go on the control lines
or as Ray calls (``routes.py``); the state machine is the same for both.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from simshard.report.memory import MemoryReport

from ...core.execution import Execution
from ...core.diagnosis import Timeline
from ...core.transfer_log import TransferLog
from ..protocol import DeviceSummary, RunPlan, Status
from .connected import messages_taken, routes_used
from .failures import check_delivered, run_failure
from .held import Held, HeldOutputs
from .probe import NotAnswering, silent
from .routes import RunCall
from ...wire.control_line import OutcomeKind


class RunAttempt:
    """A run of program ``key`` (``spmd``) on ``mesh`` with each device's ``shards``, by ``route``."""

    def __init__(self, mesh, key, spmd, shards: Mapping[int, list], route, *, trace_values: bool,
                 abort_wait: float, lost_grace: float):
        self.mesh, self.key, self.spmd, self.shards, self.route = mesh, key, spmd, shards, route
        self.trace_values, self.abort_wait, self.lost_grace = trace_values, abort_wait, lost_grace
        self.run_id = mesh.last_run = next(mesh.run_ids)
        self.pending: dict[Any, tuple[int, ...]] = {}  # one run call per process (a line, or a ref): its devices
        self.summaries: dict[int, DeviceSummary] = {}
        self.failed = False  # whether a summary taken so far says its device failed (``_react``)
        self.dead: dict[int, BaseException] = {}
        self.told_dead: set[int] = set()
        self.deadline: float | None = None  # once something failed: when to stop waiting
        self.aborted = False
        # how long to hear nothing before probing the processes still running (the program's
        # receive timeout; None: wait as long as it takes)
        self.patience = next((args.timeout for args in mesh.shipped.get(key, {}).values()), None)

    def send(self) -> None:
        """Every process's run call. Every call is made before any is sent: ``run_args`` may refuse
        a shard, and then nothing has started."""
        mesh = self.mesh
        made = [(group, devs, mesh.arrays.run_args(devs, self.shards)) for group in mesh.groups
                for devs in [tuple(d for d in group if d in self.shards)] if devs]
        calls = []
        for group, devs, (held, args) in made:
            counts = tuple((d, len(self.shards[d])) for d in devs)
            released = tuple(mesh.arrays.released.pop(mesh.actors[devs[0]], ()))  # dropped arrays go with the run
            plan = RunPlan(self.key, self.run_id, bool(self.trace_values), counts, held, released)
            calls.append(RunCall(devs, group, mesh.actors[devs[0]], tuple(plan), args))
        self.pending.update(self.route.send(self.run_id, calls))
        mesh.arrays.release_dropped()  # hosts this run does not reach

    def collect(self) -> None:
        """Wait for every answer, aborting the survivors when a device fails or dies."""
        while self.pending:
            left = self.patience if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            ready = self.route.wait(self.pending, self.run_id, left)
            if not ready:
                if self.aborted:
                    break  # aborted devices that do not answer: reported as such
                if self.deadline is None:
                    self._probe()  # nothing heard for a while: is every process still there?
                    continue
                self.abort()  # survivors of a dead device that did not fail in the grace time
                continue
            for call in ready:
                self._take(self.pending.pop(call), self.route.answer(call, self.run_id))
            if not self.aborted and self.pending:
                self._react()
        for devs in self.pending.values():
            self.summaries.update((d, DeviceSummary.aborted("not answering")) for d in devs)

    def _probe(self) -> None:
        """Take the processes that do not answer a probe (``probe.py``) for dead ones: their calls
        will never come back."""
        quiet = set(silent(self.mesh, [d for devs in self.pending.values() for d in devs], self.patience))
        if not quiet:
            return
        for call, devs in list(self.pending.items()):
            if quiet & set(devs):
                del self.pending[call]
                self.dead.update((d, NotAnswering(self.patience)) for d in devs)
        self._react()

    def _take(self, devs: tuple[int, ...], answer) -> None:
        if answer.kind is OutcomeKind.VALUE:
            self.summaries.update(answer.value)
            self.failed = self.failed or any(not s.ok for s in answer.value.values())
        elif answer.kind is OutcomeKind.DEAD:
            self.dead.update((d, answer.value) for d in devs)
        else:
            self.summaries.update((d, DeviceSummary.failed(answer.value)) for d in devs)
            self.failed = True

    def _react(self) -> None:
        """After answers came: abort at once if a device failed, or died and the run will be tried
        again; if one died on the last try, let the others run on until they need it (and so name
        what they waited for), and abort whatever still runs after the grace time."""
        newly_dead = set(self.dead) - self.told_dead
        if self.failed:
            self.abort()
        elif newly_dead and self.lost_grace <= 0:
            self.abort()
        elif newly_dead:
            self.told_dead |= newly_dead
            self.deadline = time.monotonic() + self.lost_grace
            for devs in self.pending.values():
                for d in devs:
                    self.mesh.call(d, "peer_lost", self.run_id, tuple(sorted(self.told_dead)))

    def abort(self) -> None:
        """Stop every device still running; their answers are awaited ``abort_wait`` seconds more."""
        self.aborted, self.deadline = True, time.monotonic() + self.abort_wait
        for devs in self.pending.values():
            for d in devs:
                self.mesh.call(d, "abort", self.run_id)

    def result(self, **run) -> Execution:
        """The run's ``Execution`` (outputs left on the devices), or the error naming the device;
        ``run``: the fields only the whole run knows (its calls, attempts, restarted devices, why
        its calls went as Ray calls), so that the ``Execution`` is made once."""
        spmd, summaries = self.spmd, self.summaries
        if self.dead or any(s.status is not Status.OK for s in summaries.values()):
            raise run_failure(spmd, summaries, self.dead)
        check_delivered(spmd, summaries)
        mesh = self.mesh
        outputs = HeldOutputs({d: [Held(mesh.actors[d], i, mesh.arrays.released) for i in summaries[d].outputs]
                               for d in spmd.devices}, mesh.arrays.fetch_held)
        return Execution(
            spmd, outputs,
            ran={d: summaries[d].ran for d in spmd.devices},
            memory=MemoryReport.of_wire(summaries[d].memory for d in spmd.devices),
            transfers=TransferLog.of_packed(summaries[d].transfers for d in spmd.devices),
            values={d: summaries[d].values for d in spmd.devices} if self.trace_values else {},
            timeline=Timeline({d: summaries[d].timeline for d in spmd.devices}, spmd.schedule),
            data_plane=mesh.data_plane, control_plane=self.route.name,
            routes=self._routes(),
            messages=messages_taken(summaries[d].taken for d in spmd.devices),
            stepped_aside=sum(summaries[d].stepped_aside for d in spmd.devices), **run,
        )

    def _routes(self) -> dict[str, int]:
        """How many ordered pairs of the run's devices each route joins, made once per set of
        devices (a mesh of n devices has n(n-1) pairs: 4 million at 2,048)."""
        mesh, devices = self.mesh, self.spmd.devices
        got = mesh.routes_among.get(devices)
        if got is None:
            got = mesh.routes_among[devices] = routes_used(mesh.peer_routes, devices)
        return got
