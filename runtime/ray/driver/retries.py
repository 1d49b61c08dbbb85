"""A run of a loaded program with its retries: each attempt on the control lines where it can, else
as Ray calls with the shards in the object store (put once however many attempts need them), the
lost devices restarted between attempts (``RayMesh.repair``)."""

from __future__ import annotations

import time
from collections import Counter
from functools import partial
from typing import Mapping, Sequence

import numpy as np

from ...core.execution import Execution, check_inputs
from ...errors import DeviceLostError
from ..put_once import PutOnce
from ..start import import_ray
from .attempt import RunAttempt
from .held import Held
from .lines import WhyRayCalls
from .routes import LineRoute, RayRoute


class ObjectStoreShards:
    """Each device's shards with every numpy array put into Ray's object store, once however many
    attempts need them (a block several devices hold goes once; a DeviceArray's shards are on the
    devices already)."""

    def __init__(self, mesh, shards: Mapping[int, list]):
        self.mesh, self.shards, self.stored = mesh, shards, None

    def __call__(self) -> dict:
        if self.stored is None:
            ray, put = import_ray(), PutOnce()
            self.stored = {d: [a if isinstance(a, (ray.ObjectRef, Held)) else put(a) for a in ins]
                           for d, ins in self.shards.items()}
            self.mesh.calls["put"] += len(put)
        return self.stored


def run_with_retries(mesh, key, spmd, inputs: Mapping[int, Sequence[np.ndarray]], *, trace_values: bool,
                     abort_wait: float, lost_grace: float, retries: int) -> Execution:
    """``RayMesh.execute``: up to ``retries`` more attempts after a lost device, each under a new
    run id (messages of a failed attempt are ignored). The ``Execution`` is the successful
    attempt's, with every attempt's calls; once the retries are spent the last attempt's
    ``DeviceLostError`` is raised."""
    check_inputs(spmd, inputs)
    if retries < 0:
        raise ValueError(f"retries must be >= 0, not {retries}")
    before = Counter(mesh.calls)
    shards = {d: list(inputs[d]) for d in spmd.devices}
    in_object_store = ObjectStoreShards(mesh, shards)
    restarted: list[int] = []
    for attempt in range(retries + 1):
        last = attempt == retries
        if attempt:
            restarted += mesh.repair(floor=mesh.last_run + 1)
        try:
            return one_attempt(mesh, key, spmd, shards, in_object_store, trace_values=trace_values,
                               abort_wait=abort_wait, lost_grace=lost_grace if last else 0.0,
                               run=partial(whole_run, mesh, before, attempt + 1, tuple(restarted)))
        except DeviceLostError as e:
            if last:
                e.attempts = attempt + 1
                raise
    raise AssertionError("unreachable")


def whole_run(mesh, before: Counter, attempts: int, restarted: tuple[int, ...]) -> dict:
    """The ``Execution`` fields of the whole run, as its last attempt ends: every attempt's calls
    (the mesh's counts since ``before``), how many attempts, the devices restarted."""
    return {"controller_calls": dict(mesh.calls - before), "attempts": attempts, "restarted": restarted}


def one_attempt(mesh, key, spmd, shards: Mapping[int, list], in_object_store, run, **how) -> Execution:
    """One run of the program on every device: on the control lines where it can
    (``ControlLines.claim``, ``for_run``), else by Ray calls with ``in_object_store()``'s shards, the
    ``Execution`` saying why (``WhyRayCalls``); ``run()``: the whole run's fields, once it ends."""
    with mesh.lines.claim() as mine:
        if mine:
            lines, why = mesh.lines.for_run(mesh.groups, shards)
        else:
            lines, why = None, WhyRayCalls.LINES_BUSY if mesh.lines.enabled else WhyRayCalls.RAY_DATA_PLANE
        if lines is not None:
            attempt = RunAttempt(mesh, key, spmd, shards, LineRoute(lines, mesh.calls, mesh.answer_spin(key)), **how)
        else:
            attempt = RunAttempt(mesh, key, spmd, in_object_store(), RayRoute(mesh.calls), **how)
        began = time.monotonic()
        attempt.send()
        attempt.collect()
        if lines is not None and not attempt.failed and not attempt.dead:
            mesh.run_seconds[key] = time.monotonic() - began  # how long the driver polls next time
        return attempt.result(control_reason=None if why is None else why.value, **run())
