"""A training run's peak memory per device: model states under mixed precision and ZeRO, and the
activations its pipeline schedule and recomputation keep.

Model states (Rajbhandari et al., "ZeRO", SC'20, section 3.1): mixed-precision Adam holds per
parameter a 2-byte (bf16) weight, a 2-byte gradient, and 12 bytes of float32 master weight,
momentum and variance: 16 bytes. ZeRO-1 shards the 12 bytes over the ``dp`` replicas, ZeRO-2
the gradient too, ZeRO-3 (FSDP) everything: ``2 + 2 + 12/dp``, ``2 + 14/dp``, ``16/dp``.

Activations of one layer and microbatch of ``b`` sequences (Korthikanti et al., "Reducing
Activation Recomputation in Large Transformer Models", MLSys'23, section 4, with 2-byte values,
1-byte dropout masks and a 4h MLP), ``sbh = s b h``:

* none: ``sbh (10 + 24/t + 5 a s / (h t))``; with sequence parallelism ``sbh (34 + 5 a s / h) / t``;
* selective (the attention core recomputed) and a fused attention kernel (no score tensor
  stored either way): the ``5 a s / h`` term goes;
* full: the layer's input only, ``2 sbh`` (``/ t`` sequence parallel), plus one layer's full
  activations while it is recomputed.

A pipeline stage of ``L/p`` layers holds them for the microbatches in flight: the first stage of
1F1B ``min(p, m)`` (Narayanan et al. section 2.2.1), of the interleaved schedule
``p (1 + (p-1)/(p v))`` (Korthikanti et al. section 4.2.3); without a pipeline one microbatch
(gradient accumulation frees each microbatch's activations after its backward). The last stage
also holds its float32 logits and their gradient, ``2 x 4 b s V / t``.
"""

from __future__ import annotations

from .model import Options, Parallel, Transformer


def stage_params(model: Transformer, par: Parallel) -> int:
    """Parameters on one device of the stage that holds most: its layers' share and the vocabulary
    matrix's (the last stage's projection, tied to the first stage's embedding, which also holds
    the position embedding)."""
    layers = model.layers // par.pp * model.layer_params // par.tp
    return layers + model.vocab_shard(par.tp) * model.hidden + (model.seq * model.hidden if model.embedding else 0)


def state_bytes(model: Transformer, par: Parallel, opt: Options) -> float:
    """Weights, gradients and optimizer state per device (module docstring)."""
    p, d = stage_params(model, par), par.dp
    weight, grad, optimizer = 2 * p, 2 * p, 12 * p
    if opt.zero >= 1:
        optimizer /= d
    if opt.zero >= 2:
        grad /= d
    if opt.zero >= 3:
        weight /= d
    return weight + grad + optimizer


def layer_activation_bytes(model: Transformer, par: Parallel, opt: Options) -> float:
    """One layer's saved activations for one microbatch (module docstring)."""
    s, b, h, a, t = model.seq, opt.microbatch, model.hidden, model.heads, par.tp
    sbh = s * b * h
    scores = 0.0 if (opt.recompute != "none" or opt.attention == "flash") else 5 * a * s / h
    if opt.recompute == "full":
        return 2 * sbh / (t if opt.sequence_parallel else 1)
    if opt.sequence_parallel:
        return sbh * (34 + scores) / t
    return sbh * (10 + 24 / t + scores / t)


def in_flight(par: Parallel, opt: Options, microbatches: int) -> float:
    """Microbatches whose activations the first stage holds at once (module docstring)."""
    p = par.pp
    if p == 1:
        return 1
    if opt.schedule.kind == "interleaved":
        return min(p * (1 + (p - 1) / (p * opt.schedule.virtual)), microbatches)
    return min(p, microbatches)


def peak_bytes(model: Transformer, par: Parallel, opt: Options, microbatches: int) -> float:
    """The most memory a device holds at once: its states, the activations in flight, the
    layer being recomputed (full recomputation), the last stage's logits."""
    per_stage = model.layers // par.pp
    acts = per_stage * layer_activation_bytes(model, par, opt) * in_flight(par, opt, microbatches)
    if opt.recompute == "full":
        acts += layer_activation_bytes(model, par, opt.with_(recompute="none"))
    logits = 2 * 4 * opt.microbatch * model.seq * model.vocab_shard(par.tp)
    return state_bytes(model, par, opt) + acts + logits


__all__ = ["in_flight", "layer_activation_bytes", "peak_bytes", "stage_params", "state_bytes"]
