"""A GPT training step's time on a cluster, from numbers: the layers' passes on a pipeline
stage, the schedule's bubble, the data-parallel reduction and what of it the backward pass hides,
the optimizer.

With ``m`` microbatches per replica, ``p`` stages of ``v`` chunks each (docs/estimate.md derives
each line):

* a slot is one microbatch's forward, recomputation and backward on the slowest stage (the
  first holds the embedding, the last the head), its tensor-parallel collectives included (they
  sit between its matmuls: nothing hides them), plus its activation sent to the next stage and
  its gradient back (per chunk boundary: ``v`` of each);
* 1F1B runs ``m + p - 1`` slots; the interleaved schedule ``m + (p - 1)/v``: the bubble
  ``(p - 1)/(v m)`` of the busy time (Narayanan et al., SC'21, section 2.2);
* the data-parallel reduction of the stage's gradients (an all-reduce; a reduce-scatter and an
  all-gather of the updated weights under ZeRO-1/2) runs once per step, bucket by bucket as the
  last microbatch's backward produces them: with ``overlap``, only what outlasts that backward
  is exposed; ZeRO-3 gathers each layer's weights for every microbatch's forward and backward
  and reduce-scatters its gradients, prefetched (with ``overlap``) behind the compute;
* the optimizer (Adam, mixed precision) reads and writes 30 bytes per parameter it updates:
  float32 master weight, momentum and variance read and written (24), the gradient read (4), the
  bf16 weight written (2), at the achieved bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..devices import DeviceSpec
from ..kernels import stream_seconds
from ..topology import Topology
from .comm import Traffic, traffic
from .layer import Passes, embedding, head, layer
from .memory import peak_bytes, stage_params
from .model import Options, Parallel, Transformer, check_fits, megatron_flops

ADAM_BYTES = 30  # per parameter updated (module docstring)


@dataclass(frozen=True)
class StepEstimate:
    """One training step's time and memory per device, and where the time goes."""

    model: Transformer
    parallel: Parallel
    options: Options
    microbatches: int
    slot_seconds: float  # one microbatch on the slowest stage, transfers included
    compute_seconds: float  # per step: the slots' compute (no bubble, no collectives)
    tp_seconds: float  # per step: tensor-parallel collectives (never hidden)
    pp_seconds: float  # per step: stage-to-stage transfers
    bubble_seconds: float
    dp_seconds: float  # the data-parallel reduction (ZeRO-3: its gathers too)
    dp_exposed_seconds: float  # what of it the backward pass does not hide
    optimizer_seconds: float
    peak_bytes: float
    device_memory: float
    comm: Traffic  # per device and step
    matmul_flops: float  # per device and step, on the slowest stage

    @property
    def step_seconds(self) -> float:
        return self.microbatches * self.slot_seconds + self.bubble_seconds + self.dp_exposed_seconds + \
            self.optimizer_seconds

    @property
    def megatron_flops_per_device(self) -> float:
        """Megatron's count (Narayanan et al. eq. 3) per device and second."""
        return megatron_flops(self.model, self.options.batch) / (self.step_seconds * self.parallel.devices)

    @property
    def fits(self) -> bool:
        return not self.device_memory or self.peak_bytes <= self.device_memory

    def summary(self) -> dict:
        o = self.options
        return {
            "step_seconds": self.step_seconds,
            "model_flops_per_device": self.megatron_flops_per_device,
            "peak_memory_bytes": self.peak_bytes, "device_memory_bytes": self.device_memory, "fits": self.fits,
            "microbatches": self.microbatches, "microbatch": o.microbatch, "schedule": str(o.schedule),
            "recompute": o.recompute, "zero": o.zero, "sequence_parallel": o.sequence_parallel,
            "attention": o.attention, "overlap": o.overlap,
            "seconds": {"compute": self.compute_seconds, "tensor_parallel": self.tp_seconds,
                        "pipeline_transfers": self.pp_seconds, "bubble": self.bubble_seconds,
                        "data_parallel": self.dp_seconds, "data_parallel_exposed": self.dp_exposed_seconds,
                        "optimizer": self.optimizer_seconds},
            "bytes_received_per_device": self.comm.by_kind(),
        }


def stage_passes(model: Transformer, par: Parallel, opt: Options, device: DeviceSpec) -> list[Passes]:
    """One microbatch on each kind of stage: first (with the embedding), middle, last (with the
    head); one stage holds all three."""
    layers = layer(model, par, opt, device).times(model.layers // par.pp)
    first, last = embedding(model, par, opt, device) + layers, layers + head(model, par, opt, device)
    if par.pp == 1:
        return [embedding(model, par, opt, device) + layers + head(model, par, opt, device)]
    return [first, layers, last] if par.pp > 2 else [first, last]


def transfers(model: Transformer, par: Parallel, opt: Options) -> Traffic:
    """Per microbatch: each chunk boundary's activation forward and gradient back, each device
    sending its ``1/t`` of it, then gathered over the tensor-parallel group (Megatron's
    scatter-gather optimisation, Narayanan et al. section 4.1)."""
    if par.pp == 1:
        return Traffic()
    n, e, v = opt.microbatch * model.seq * model.hidden * model.itemsize, model.itemsize, opt.schedule.virtual
    return traffic(("collective_permute", "pp", n // par.tp, e, "pipeline send", 2 * v),
                   ("all_gather", "tp", n, e, "pipeline scatter-gather", 2 * v), par=par)


def data_parallel(model: Transformer, par: Parallel, opt: Options, m: int) -> Traffic:
    """The gradients' reduction (and ZeRO's weight gathers) per device and step."""
    n, e = stage_params(model, par) * model.itemsize, model.itemsize
    if opt.zero == 3:
        gathers = m * (2 + (opt.recompute == "full"))
        return traffic(("all_gather", "dp", n, e, "ZeRO-3 weight gather", gathers),
                       ("reduce_scatter", "dp", n, e, "ZeRO-3 gradient reduce-scatter", m), par=par)
    if opt.zero:
        return traffic(("reduce_scatter", "dp", n, e, "ZeRO gradient reduce-scatter", 1),
                       ("all_gather", "dp", n, e, "ZeRO weight all-gather", 1), par=par)
    return traffic(("all_reduce", "dp", n, e, "data-parallel gradient all-reduce", 1), par=par)


def estimate_step(model: Transformer, par: Parallel, opt: Options, device: DeviceSpec,
                  topology: Topology) -> StepEstimate:
    """The step's time and memory (module docstring)."""
    m = check_fits(model, par, opt)
    stages = stage_passes(model, par, opt, device)
    hop = transfers(model, par, opt)
    pp = hop.seconds(topology)
    tp = [s.total.comm.seconds(topology) for s in stages]
    slots = [s.total.seconds + c + pp for s, c in zip(stages, tp)]
    k = max(range(len(stages)), key=slots.__getitem__)
    slot, busiest = slots[k], stages[k]
    dp = data_parallel(model, par, opt, m)
    dp_seconds = dp.seconds(topology)
    hidden = busiest.backward.seconds if opt.zero < 3 else m * busiest.total.seconds
    exposed = max(dp_seconds - hidden, 0.0) if opt.overlap else dp_seconds
    updated = stage_params(model, par) / (par.dp if opt.zero else 1)
    return StepEstimate(
        model, par, opt, m, slot, m * busiest.total.seconds, m * tp[k], m * pp,
        (par.pp - 1) * slot / opt.schedule.virtual, dp_seconds, exposed,
        stream_seconds(ADAM_BYTES * updated, device), peak_bytes(model, par, opt, m), device.memory,
        busiest.total.comm.times(m) + hop.times(m) + dp, m * busiest.total.flops)


__all__ = ["ADAM_BYTES", "StepEstimate", "data_parallel", "estimate_step", "stage_passes", "transfers"]
