"""A pipeline of uneven stages: each stage its own layers, its own estimate, priced by Alpa's
pipeline latency (Zheng et al., OSDI '22, section 5, eq. 2).

``report/pipeline.py`` prices a pipeline whose stages are alike (one estimate for every stage
but the last) as ``(M + S - 1)`` slots of the slowest stage. Where the stages differ (a split of
the layers chosen per stage, ``autoshard.stages``), the step is the first microbatch's way
through every stage and back (``sum_i t_i``: the pipeline fills and drains), then the other
``M - 1`` microbatches paced by the slowest stage::

    step = sum_i t_i + (M - 1) max_i t_i + max_i sync_i,

``t_i`` stage ``i``'s slot: one microbatch's forward and backward on its devices (compute, then
its collectives) plus the activation sent forward and its gradient back over the stage axis
(``2 (latency + boundary_bytes / bandwidth)``, none with one stage); ``sync_i`` what the stage
runs once per step (the optimizer), the stages in parallel. With equal stages it is
``report/pipeline.py``'s ``(M + S - 1) t + sync``. The bubble is ``sum_i t_i - max_i t_i``: the
fill and drain, beyond the slowest stage's ``M`` busy slots.

Memory per device of stage ``i``: its resident bytes (parameters, optimizer state, a
microbatch: the estimate's input bytes) plus ``held(i)`` microbatches each what one
microbatch's forward and backward allocates beyond its inputs (peak less inputs), as
``PipelineEstimate.peak_bytes`` counts: GPipe holds all ``M``; 1F1B holds ``min(S - i, M)`` on
stage ``i`` (the first ``min(S, M)``, the last one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .estimate import Estimate
from .pipeline import Pipeline
from .topology import Topology


def held(pipeline: Pipeline, stage: int) -> int:
    """Microbatches whose activations stage ``stage`` (from 0) holds at once (module docstring)."""
    if pipeline.schedule == "gpipe":
        return pipeline.microbatches
    return min(pipeline.stages - stage, pipeline.microbatches)


def pipeline_seconds(slots: Sequence[float], syncs: Sequence[float], microbatches: int) -> float:
    """Alpa's step latency: ``sum(slots) + (M - 1) max(slots) + max(syncs)`` (module docstring)."""
    return sum(slots) + (microbatches - 1) * max(slots) + max(syncs, default=0.0)


def transfer_seconds(topology: Topology, axis: str, stages: int, boundary_bytes: int) -> float:
    """One microbatch's activation forward and its gradient back over the stage axis's link."""
    if stages == 1:
        return 0.0
    link = topology.link((axis,))
    return 2 * (link.latency + boundary_bytes / link.bandwidth)


def estimate_seconds(est: Estimate, topology: Topology) -> float:
    """``est``'s compute then its collectives under ``topology`` (``PipelineEstimate``'s count)."""
    return est.compute_seconds(topology.device) + est.comm.estimate(topology).total


def stage_bytes(est: Estimate, held_microbatches: int) -> int:
    """A stage device's peak: its inputs plus ``held_microbatches`` times a microbatch's activations."""
    devices = est.memory.devices
    return max(m.input_bytes for m in devices) + held_microbatches * max(m.peak_bytes - m.input_bytes for m in devices)


@dataclass(frozen=True)
class StageEstimate:
    """One stage: its ``layers``, one microbatch's forward and backward (``microbatch``), what it
    runs once per step (``sync``), and the block of the activation it passes on, per device."""

    layers: int
    microbatch: Estimate
    sync: Estimate | None
    boundary_bytes: int


@dataclass(frozen=True)
class StagedPipelineEstimate:
    """A pipelined step of uneven stages (module docstring); ``topology`` must name a device."""

    pipeline: Pipeline
    stages: tuple[StageEstimate, ...]
    topology: Topology

    def __post_init__(self):
        if len(self.stages) != self.pipeline.stages:
            raise ValueError(f"a pipeline of {self.pipeline.stages} stages given {len(self.stages)} stage estimates")
        if self.topology.device is None:
            raise ValueError("a pipeline's time needs a topology with a device (Topology(..., device='h100'))")

    def slot_seconds(self) -> tuple[float, ...]:
        """Per stage: a microbatch's forward and backward, then its transfers."""
        s, axis = self.pipeline.stages, self.pipeline.axis
        return tuple(estimate_seconds(st.microbatch, self.topology)
                     + transfer_seconds(self.topology, axis, s, st.boundary_bytes) for st in self.stages)

    def sync_seconds(self) -> tuple[float, ...]:
        return tuple(0.0 if st.sync is None else estimate_seconds(st.sync, self.topology) for st in self.stages)

    def step_seconds(self) -> float:
        return pipeline_seconds(self.slot_seconds(), self.sync_seconds(), self.pipeline.microbatches)

    def bubble_seconds(self) -> float:
        slots = self.slot_seconds()
        return sum(slots) - max(slots)

    def peak_bytes(self) -> tuple[int, ...]:
        """Per stage, a device's peak with the microbatches it holds (module docstring)."""
        return tuple(stage_bytes(st.microbatch, held(self.pipeline, i)) for i, st in enumerate(self.stages))

    def summary(self) -> dict:
        return {"stages": self.pipeline.stages, "microbatches": self.pipeline.microbatches,
                "schedule": self.pipeline.schedule, "layers": [st.layers for st in self.stages],
                "step_seconds": self.step_seconds(), "bubble_seconds": self.bubble_seconds(),
                "slot_seconds": list(self.slot_seconds()), "sync_seconds": list(self.sync_seconds()),
                "peak_bytes": list(self.peak_bytes())}


__all__ = ["StageEstimate", "StagedPipelineEstimate", "held", "pipeline_seconds", "stage_bytes",
           "transfer_seconds"]
