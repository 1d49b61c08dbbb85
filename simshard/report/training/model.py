"""A GPT training run from numbers: the model, how it is parallelised and how each step runs.

``Transformer`` is a decoder-only GPT as Megatron-LM builds it (Shoeybi et al. 2019; Narayanan et
al., SC'21): ``layers`` pre-LN blocks of self-attention (``heads`` heads of ``hidden / heads``)
and an MLP of width ``ffn`` (4 x hidden), a vocabulary embedding tied to the output projection,
``seq`` tokens a sequence. ``Parallel`` is its 3-D layout (tensor ``tp``, pipeline ``pp``, data
``dp``); ``Options`` how a step runs (microbatches, pipeline schedule, recomputation, ZeRO stage,
sequence parallelism, fused attention, overlap of the data-parallel reduction). docs/estimate.md
(#a-training-run-from-numbers) derives every term.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "unfused")


@dataclass(frozen=True)
class Transformer:
    """A GPT's sizes (``ffn`` 0: 4 x hidden). ``dtype``: the compute dtype (mixed precision:
    bf16 compute over fp32 master weights); ``float32`` for an all-float32 model."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    ffn: int = 0
    dtype: str = "bfloat16"
    embedding: bool = True  # a vocabulary embedding on the first stage (False: the input is the embedded stream)
    biases: bool = True  # biases and LayerNorm parameters (False: weights only)
    vocab_multiple: int = 128  # Megatron pads the vocabulary to a multiple of this times tp (--make-vocab-size-divisible-by)
    name: str = field(default="", compare=False)

    def __post_init__(self):
        for what in ("layers", "hidden", "heads", "vocab", "seq"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"a transformer's {what} is a positive integer, got {v!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} does not split into {self.heads} heads")
        if not self.ffn:
            object.__setattr__(self, "ffn", 4 * self.hidden)

    def vocab_shard(self, tp: int) -> int:
        """One tensor-parallel device's vocabulary rows: the vocabulary padded, as Megatron pads it, to
        a multiple of ``vocab_multiple x tp`` (so every shard's matmul dim is a multiple of 128), over ``tp``."""
        unit = self.vocab_multiple * tp
        return -(-self.vocab // unit) * unit // tp

    @property
    def itemsize(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def layer_params(self) -> int:
        """Per layer: the four attention projections and the MLP (weights; biases and the two
        LayerNorms' 4h, as Megatron's count includes them)."""
        h = self.hidden
        return 4 * h * h + 2 * h * self.ffn + ((4 * h + self.ffn + h) + 4 * h if self.biases else 0)

    @property
    def params(self) -> int:
        """Every parameter: the layers, the (tied) embedding, the position embedding, the final
        LayerNorm (Narayanan et al. eq. 2 with ffn = 4h: ``12 l h^2 (1 + 13/(12h) + (V+s)/(12lh))``)."""
        extra = (self.seq * self.hidden if self.embedding else 0) + (2 * self.hidden if self.biases else 0)
        return self.layers * self.layer_params + self.vocab * self.hidden + extra


def megatron_flops(model: Transformer, batch: int) -> float:
    """Narayanan et al. (SC'21) eq. 3, the FLOPs of a training iteration with full activation
    recomputation as their Table 1 counts them: ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``."""
    B, s, l, h, V = batch, model.seq, model.layers, model.hidden, model.vocab
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def model_flops(model: Transformer, batch: int) -> float:
    """The model's FLOPs per iteration without the recomputed forward (the numerator of MFU):
    ``72 B s l h^2 (1 + s/(6h)) + 6 B s h V`` (the same paper's count with its 96 for 72; the
    vocabulary projection is not recomputed, so its term is the same)."""
    B, s, l, h, V = batch, model.seq, model.layers, model.hidden, model.vocab
    return 72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V


@dataclass(frozen=True)
class Parallel:
    """Tensor, pipeline and data parallel sizes; devices ``tp x pp x dp``, tensor parallel
    innermost (consecutive device ids: the devices of a node), then data, then pipeline."""

    tp: int = 1
    pp: int = 1
    dp: int = 1

    def __post_init__(self):
        for what in ("tp", "pp", "dp"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"parallel size {what} is a positive integer, got {v!r}")

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: ``1f1b`` (``virtual`` 1) or ``interleaved`` with ``virtual`` model
    chunks per device (Narayanan et al. section 2.2.2)."""

    kind: str = "1f1b"
    virtual: int = 1

    def __post_init__(self):
        if self.kind not in ("1f1b", "interleaved"):
            raise ValueError(f"pipeline schedule {self.kind!r}: expected 1f1b or interleaved:V")
        if self.virtual < 1 or (self.kind == "1f1b" and self.virtual != 1):
            raise ValueError(f"a {self.kind} schedule has {'1' if self.kind == '1f1b' else 'at least 1'} "
                             f"virtual stages per device, got {self.virtual}")

    @staticmethod
    def parse(text: str) -> "Schedule":
        """``1f1b`` or ``interleaved:V``."""
        kind, _, v = text.partition(":")
        if kind == "interleaved":
            if not v.isdigit():
                raise ValueError(f"--schedule {text!r}: write interleaved:V with V the virtual stages per device")
            return Schedule("interleaved", int(v))
        return Schedule(kind)

    def __str__(self) -> str:
        return self.kind if self.kind == "1f1b" else f"interleaved:{self.virtual}"


@dataclass(frozen=True)
class Options:
    """How each step runs (module docstring): ``batch`` sequences a step, ``microbatch`` a
    microbatch, ``zero`` the ZeRO stage (0 none; 1 optimizer state, 2 and gradients, 3 and
    parameters sharded over data parallel: FSDP), ``overlap``: the data-parallel reduction
    overlapped with the backward pass, ``fused_accumulation``: each microbatch's weight gradient
    accumulated into the float32 gradient by its matmul (else by a separate memory-bound add)."""

    batch: int
    microbatch: int = 1
    schedule: Schedule = Schedule()
    recompute: str = "none"
    zero: int = 0
    sequence_parallel: bool = False
    attention: str = "flash"
    overlap: bool = True
    fused_accumulation: bool = True

    def __post_init__(self):
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute {self.recompute!r}: expected one of {', '.join(RECOMPUTE)}")
        if self.attention not in ATTENTION:
            raise ValueError(f"attention {self.attention!r}: expected one of {', '.join(ATTENTION)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"ZeRO stage {self.zero!r}: expected 0, 1, 2 or 3")
        if self.batch < 1 or self.microbatch < 1:
            raise ValueError(f"batch {self.batch} and microbatch {self.microbatch} must be positive")

    def with_(self, **changes) -> "Options":
        return replace(self, **changes)


def check_fits(model: Transformer, par: Parallel, opt: Options) -> int:
    """The microbatches per step and data-parallel replica, ``batch / (dp x microbatch)``; a
    ValueError naming what does not divide."""
    if opt.batch % (par.dp * opt.microbatch):
        raise ValueError(f"batch {opt.batch} does not split into {par.dp} data-parallel replicas of microbatches "
                         f"of {opt.microbatch}")
    if model.heads % par.tp or model.ffn % par.tp:
        raise ValueError(f"{model.heads} heads (ffn {model.ffn}) do not split over tp={par.tp}")
    chunks = par.pp * opt.schedule.virtual
    if model.layers % chunks:
        raise ValueError(f"{model.layers} layers do not split into {par.pp} stages x {opt.schedule.virtual} "
                         f"virtual stages")
    m = opt.batch // (par.dp * opt.microbatch)
    if opt.schedule.kind == "interleaved" and m % par.pp:
        raise ValueError(f"the interleaved schedule needs the microbatches ({m}) to be a multiple of pp={par.pp}")
    if opt.sequence_parallel and model.seq % par.tp:
        raise ValueError(f"sequence parallelism splits seq {model.seq} over tp={par.tp}: it does not divide")
    return m


__all__ = ["ATTENTION", "Options", "Parallel", "RECOMPUTE", "Schedule", "Transformer", "check_fits", "megatron_flops", "model_flops"]
