"""One microbatch through one transformer layer (and the embedding and the head) on one device:
its matmuls, its memory-bound work and its tensor-parallel collectives, forward, backward and
recomputed, timed by the kernel model (``report/kernels.py``).

Per layer, ``T = b s`` tokens of a microbatch of ``b`` sequences, tensor parallel ``t``
(Megatron's split: QKV and the MLP's first matmul by columns, the output projection and the
MLP's second by rows), each device runs forward

* the matmuls ``[T, h] @ [h, 3h/t]``, ``[T, h/t] @ [h/t, h]``, ``[T, h] @ [h, f/t]``,
  ``[T, f/t] @ [f/t, h]``;
* attention over its ``a/t`` heads: unfused, the batched ``Q K^T`` and ``P V`` matmuls of
  ``b a/t`` heads of ``[s, d_h]`` and the score tensors through memory (Megatron's fused
  scale-mask-softmax: read and write ``b a/t s^2`` values; dropout: read them, write them and a
  one-byte mask); fused (FlashAttention-2), its ``4 b a/t s^2 d_h`` FLOPs at the published
  efficiency and no score tensor in memory (its backward runs 2.5 times those FLOPs: it
  recomputes the scores);
* the element-wise work at the achieved bandwidth, each op fused as Megatron fuses it: two
  LayerNorms (read and write ``T h``), two bias-dropout-residual adds (read two ``T h``, write one
  and a one-byte mask), bias-GeLU on ``T f/t`` (read and write); with sequence parallelism the
  LayerNorms and dropouts run on ``T/t`` tokens;
* two all-reduces of ``T h`` over the tensor-parallel group (sequence parallel: an all-gather
  and a reduce-scatter each, the same bytes).

Backward, each matmul ``[m, k] @ [k, n]`` becomes its input gradient ``[m, n] @ [n, k]`` and its
weight gradient ``[k, m] @ [m, n]`` (twice the FLOPs); element-wise backward reads the saved
input and the output gradient and writes the input gradient: 1.5 times the forward's bytes; the
two all-reduces again (the conjugates of the forward's identities); and unless the weight-gradient
matmuls accumulate into the float32 gradients themselves (``fused_accumulation``), an add of each
microbatch's weight gradients into them, 10 bytes per parameter. Recomputation reruns, before
the backward, the whole forward with its all-reduces (``full``) or the attention core alone
(``selective``: its matmuls, softmax and dropout; a fused attention kernel already recomputes
its scores in its backward, so nothing more).
"""

from __future__ import annotations

from typing import NamedTuple

from ..devices import DeviceSpec
from ..kernels import Gemm, flash_attention_seconds, gemm_seconds, stream_seconds
from .comm import Traffic, traffic
from .model import Options, Parallel, Transformer

BACKWARD_BYTES = 1.5  # element-wise backward: three passes (saved input, output gradient, input gradient) to two
# Unfused gradient accumulation: per parameter and microbatch, the float32 accumulated gradient
# read and written (8) and the new bf16 weight gradient read (2).
ACCUMULATE_BYTES = 10


class Cost(NamedTuple):
    """Seconds and matmul FLOPs of one pass, and its collectives."""

    seconds: float = 0.0
    flops: float = 0.0
    comm: Traffic = Traffic()

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.seconds + other.seconds, self.flops + other.flops, self.comm + other.comm)

    def times(self, n: int) -> "Cost":
        return Cost(self.seconds * n, self.flops * n, self.comm.times(n))


class Passes(NamedTuple):
    """One microbatch's forward, its recomputation and its backward on one device."""

    forward: Cost = Cost()
    recompute: Cost = Cost()
    backward: Cost = Cost()

    def __add__(self, other: "Passes") -> "Passes":
        return Passes(*(a + b for a, b in zip(self, other)))

    def times(self, n: int) -> "Passes":
        return Passes(*(c.times(n) for c in self))

    @property
    def total(self) -> Cost:
        return self.forward + self.recompute + self.backward


def matmuls(gemms: list[Gemm], device: DeviceSpec) -> tuple[Cost, Cost]:
    """Forward and backward of ``gemms``: each, then its input and weight gradients."""
    fwd = Cost(sum(gemm_seconds(g, device) for g in gemms), sum(g.flops for g in gemms))
    back = [x for g in gemms for x in (Gemm(g.m, g.k, g.n, g.batch, g.dtype), Gemm(g.k, g.n, g.m, g.batch, g.dtype))]
    return fwd, Cost(sum(gemm_seconds(g, device) for g in back), sum(g.flops for g in back))


def streamed(nbytes: float, device: DeviceSpec) -> tuple[Cost, Cost]:
    """Forward and backward of memory-bound work moving ``nbytes`` forward."""
    return Cost(stream_seconds(nbytes, device)), Cost(stream_seconds(BACKWARD_BYTES * nbytes, device))


def attention(model: Transformer, par: Parallel, opt: Options, device: DeviceSpec) -> tuple[Cost, Cost]:
    """The attention core of one microbatch: forward and backward (module docstring)."""
    s, dh, e = model.seq, model.hidden // model.heads, model.itemsize
    heads = opt.microbatch * model.heads // par.tp
    if opt.attention == "flash":
        flops = 4 * heads * s * s * dh
        # the backward recomputes the scores: 5 matmuls to the forward's 2, run 2.5x the forward's
        # FLOPs (as FlashAttention-2 counts them for its efficiencies); the model's count stays 2x
        return (Cost(flash_attention_seconds(flops, device, model.dtype), flops),
                Cost(flash_attention_seconds(2.5 * flops, device, model.dtype), 2 * flops))
    fwd, bwd = matmuls([Gemm(s, s, dh, heads, model.dtype), Gemm(s, dh, s, heads, model.dtype)], device)
    sf, sb = streamed(heads * s * s * (2 * e + 2 * e + 1), device)  # softmax read + write; dropout read, write, mask
    return fwd + sf, bwd + sb


def layer(model: Transformer, par: Parallel, opt: Options, device: DeviceSpec) -> Passes:
    """One layer, one microbatch, one device (module docstring)."""
    h, f, t, e, dt = model.hidden, model.ffn, par.tp, model.itemsize, model.dtype
    T = opt.microbatch * model.seq
    dense = matmuls([Gemm(T, 3 * h // t, h, 1, dt), Gemm(T, h, h // t, 1, dt), Gemm(T, f // t, h, 1, dt),
                     Gemm(T, h, f // t, 1, dt)], device)
    core = attention(model, par, opt, device)
    split = t if opt.sequence_parallel else 1
    element = streamed((2 * 2 * T * h * e + 2 * T * h * (3 * e + 1)) / split + 2 * T * (f // t) * e, device)
    tp = tp_traffic(T * h * e, 2, model, par, opt)
    forward = dense[0] + core[0] + element[0] + Cost(comm=tp)
    backward = dense[1] + core[1] + element[1] + Cost(comm=tp) + accumulate(model.layer_params // t, opt, device)
    if opt.recompute == "full":
        recompute = forward
    elif opt.recompute == "selective" and opt.attention == "unfused":
        recompute = core[0]
    else:
        recompute = Cost()
    return Passes(forward, recompute, backward)


def accumulate(params: int, opt: Options, device: DeviceSpec) -> Cost:
    """Adding a microbatch's weight gradients into the float32 accumulated ones: free when the
    weight-gradient matmul accumulates into them itself, else ``ACCUMULATE_BYTES`` per parameter."""
    return Cost() if opt.fused_accumulation else Cost(stream_seconds(ACCUMULATE_BYTES * params, device))


def tp_traffic(nbytes: int, count: int, model: Transformer, par: Parallel, opt: Options) -> Traffic:
    """``count`` tensor-parallel all-reduces of ``nbytes`` (sequence parallel: an all-gather and a
    reduce-scatter each)."""
    e = model.itemsize
    if opt.sequence_parallel:
        return traffic(("all_gather", "tp", nbytes, e, "sequence-parallel all-gather", count),
                       ("reduce_scatter", "tp", nbytes, e, "sequence-parallel reduce-scatter", count), par=par)
    return traffic(("all_reduce", "tp", nbytes, e, "tensor-parallel all-reduce", count), par=par)


def head(model: Transformer, par: Parallel, opt: Options, device: DeviceSpec) -> Passes:
    """The last stage's final LayerNorm, vocabulary projection (column-parallel over the
    vocabulary) and cross-entropy on float32 logits (Megatron's vocab-parallel cross-entropy:
    written, then read for the max, the sum and the loss: 12 bytes per logit forward, 8
    backward); its backward all-reduces the projection's input gradient."""
    h, t, e, dt = model.hidden, par.tp, model.itemsize, model.dtype
    T = opt.microbatch * model.seq
    proj = matmuls([Gemm(T, model.vocab_shard(t), h, 1, dt)], device)
    logits = T * model.vocab_shard(t)
    norm = streamed(2 * T * h * e, device)
    loss = (Cost(stream_seconds(12 * logits, device)), Cost(stream_seconds(8 * logits, device)))
    back_comm = Cost(comm=tp_traffic(T * h * e, 1, model, par, opt))
    forward = proj[0] + norm[0] + loss[0]
    grads = accumulate(model.vocab_shard(t) * h, opt, device)
    return Passes(forward, Cost(), proj[1] + norm[1] + loss[1] + back_comm + grads)


def embedding(model: Transformer, par: Parallel, opt: Options, device: DeviceSpec) -> Passes:
    """The first stage's vocabulary-parallel embedding lookup: it writes ``T h`` and all-reduces
    it over the tensor-parallel group; its backward adds the gradient rows into the table."""
    if not model.embedding:
        return Passes()
    T, h, e = opt.microbatch * model.seq, model.hidden, model.itemsize
    lookup = streamed(2 * T * h * e, device)
    return Passes(lookup[0] + Cost(comm=tp_traffic(T * h * e, 1, model, par, opt)), Cost(), lookup[1])


__all__ = ["Cost", "Passes", "attention", "embedding", "head", "layer", "matmuls", "tp_traffic"]
