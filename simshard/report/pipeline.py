"""A pipeline axis: a training step as S stages over M microbatches (GPipe or 1F1B), priced from
the estimates of its stages.

A pipelined step splits the layers over the ``S`` coordinates of a mesh axis (stages) and the
batch into ``M`` microbatches. Every stage runs its layers on its own devices (the rest of the
mesh: data and tensor parallel inside the stage), so one ``Estimate`` of a stage's forward and
backward of one microbatch (``stage``) holds its communication, compute and memory; the last
stage, which also runs the model's head and loss, has its own (``last``), and the slower of the
two paces every slot (a stage waits for its neighbours). Between
stages, per microbatch, a stage sends its output activation forward and receives its gradient
back (``boundary_bytes`` each, per device: its block of the activation). Once per step the
stage's gradients are synchronised (the data-parallel reduction the microbatches left pending)
and the optimizer runs: ``sync``, an ``Estimate`` of that program.

Both schedules run ``M + S - 1`` microbatch slots of forward and backward per stage, ``S - 1``
of them idle (the bubble), so with ``t`` a microbatch's time on a stage (its compute and
collectives, then the activation forward and the gradient back over the stage axis's link):

* step time ``(M + S - 1) t + sync``; bubble ``(S - 1) t``, a fraction ``(S - 1) / (M + S - 1)``;
* activations held: GPipe runs every forward before any backward, so a stage holds all ``M``
  microbatches' activations at once; 1F1B starts backwards as soon as the last stage can, so the
  first stage holds ``min(S, M)`` and the last one (it runs each microbatch's backward right after
  its forward).

Memory per device is the stage's resident bytes (its inputs: parameters and optimizer state, and
a microbatch) plus the microbatches in flight times what one microbatch's forward and backward
allocate beyond them (its peak less its inputs: an upper bound on the activations, since it also
counts the gradient buffers). Nothing overlaps: collectives, compute and transfers run one after
another, as the rest of the estimate assumes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .estimate import Estimate
from .topology import Link, Topology

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class Pipeline:
    """``stages`` stages along mesh axis ``axis``, ``microbatches`` per step, run as ``schedule``."""

    stages: int
    microbatches: int
    schedule: str = "1f1b"
    axis: str = "pp"

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"pipeline schedule {self.schedule!r}: expected one of {', '.join(SCHEDULES)}")
        if self.stages < 1 or self.microbatches < 1:
            raise ValueError(f"a pipeline needs at least one stage and one microbatch, got {self.stages} and "
                             f"{self.microbatches}")

    @property
    def slots(self) -> int:
        """Microbatch slots each stage runs (forward and backward), busy or idle: ``M + S - 1``."""
        return self.microbatches + self.stages - 1

    @property
    def bubble_fraction(self) -> float:
        return (self.stages - 1) / self.slots

    @property
    def in_flight(self) -> int:
        """Microbatches whose activations the busiest stage holds at once."""
        return self.microbatches if self.schedule == "gpipe" else min(self.stages, self.microbatches)


@dataclass(frozen=True)
class PipelineEstimate:
    """A pipelined step's time and memory per device, from one stage's estimate (module docstring)."""

    pipeline: Pipeline
    stage: Estimate  # one microbatch's forward and backward on one stage's devices
    boundary_bytes: int  # per device: its block of the activation a stage passes on, per microbatch
    sync: Estimate | None = None  # once per step: gradient synchronisation and the optimizer
    topology: Topology | None = None
    last: Estimate | None = None  # the last stage's microbatch (its layers, the head, the loss), if it differs
    last_sync: Estimate | None = None  # the last stage's synchronisation (its head's parameters too)

    def _stages(self) -> list[tuple[Estimate, Estimate | None, int]]:
        """Each kind of stage: its microbatch estimate, its synchronisation and the microbatches
        whose activations it holds at once."""
        out = [(self.stage, self.sync, self.pipeline.in_flight)]
        if self.last is not None:
            out.append((self.last, self.last_sync, self.pipeline.microbatches if self.pipeline.schedule == "gpipe" else 1))
        return out

    @property
    def link(self) -> Link:
        topo = self._topology()
        return topo.link((self.pipeline.axis,))

    def transfer_seconds(self) -> float:
        """One microbatch's activation forward and its gradient back, over the stage axis."""
        link = self.link
        return 2 * (link.latency + self.boundary_bytes / link.bandwidth) if self.pipeline.stages > 1 else 0.0

    def microbatch_seconds(self) -> float:
        """One slot: a microbatch's forward and backward on a stage, then its transfers."""
        return self._stage_seconds + self.transfer_seconds()

    def sync_seconds(self) -> float:
        return self._sync_seconds

    @functools.cached_property
    def _stage_seconds(self) -> float:  # every time figure reads it: the collectives' time once
        return max(self._seconds(est) for est, _, _ in self._stages())

    @functools.cached_property
    def _sync_seconds(self) -> float:
        return max(0.0 if sync is None else self._seconds(sync) for _, sync, _ in self._stages())

    def _seconds(self, est: Estimate) -> float:
        """``est``'s compute then its collectives, under this pipeline's topology."""
        topo = self._topology()
        return est.compute_seconds(topo.device) + est.comm.estimate(topo).total

    def step_seconds(self) -> float:
        return self.pipeline.slots * self.microbatch_seconds() + self.sync_seconds()

    def bubble_seconds(self) -> float:
        return (self.pipeline.stages - 1) * self.microbatch_seconds()

    @property
    def resident_bytes(self) -> int:
        """The largest inputs any stage device holds (parameters, optimizer state, a microbatch)."""
        return max(m.input_bytes for est, _, _ in self._stages() for m in est.memory.devices)

    @property
    def peak_bytes(self) -> int:
        """Per device at its peak, over the kinds of stage: its resident bytes plus the
        microbatches it holds at once, each what one microbatch's forward and backward allocates
        beyond the inputs."""
        def peak(est: Estimate, held: int) -> int:
            devices = est.memory.devices
            return max(m.input_bytes for m in devices) + held * max(m.peak_bytes - m.input_bytes for m in devices)

        return max(peak(est, held) for est, _, held in self._stages())

    @property
    def transfer_bytes(self) -> int:
        """Per device of a middle stage and step: bytes it sends to the next stage (activations),
        the same again to the previous one (gradients)."""
        return 2 * self.pipeline.microbatches * self.boundary_bytes if self.pipeline.stages > 1 else 0

    @property
    def collective_bytes(self) -> int:
        """Per device and step: bytes received in its stage's collectives (every microbatch) and
        the synchronisation's (once), on the device that receives most, over the kinds of stage."""
        return max(self.pipeline.microbatches * _most_received(est) + (_most_received(sync) if sync is not None else 0)
                   for est, sync, _ in self._stages())

    def _topology(self) -> Topology:
        if self.topology is None or self.topology.device is None:
            raise ValueError("a pipeline's time needs a topology with a device (Topology(..., device='h100'))")
        return self.topology

    def summary(self) -> dict:
        return {
            "stages": self.pipeline.stages, "microbatches": self.pipeline.microbatches,
            "schedule": self.pipeline.schedule, "step_seconds": self.step_seconds(),
            "bubble_seconds": self.bubble_seconds(), "bubble_fraction": self.pipeline.bubble_fraction,
            "peak_bytes": self.peak_bytes, "transfer_bytes": self.transfer_bytes,
            "collective_bytes": self.collective_bytes,
        }


def _most_received(est: Estimate) -> int:
    """The most bytes any one device receives in ``est``'s collectives (one pass over the records)."""
    return max((row["received"] for row in est.comm.summary("device")), default=0)


__all__ = ["Pipeline", "PipelineEstimate", "SCHEDULES"]
