"""A decoder-only transformer's training step (layers in a scan), at a size that runs and at the
sizes people rent devices for: ``tiny`` (the default ``PROGRAM``, exact-arithmetic inputs),
``gpt2-small`` and a 7B configuration (``program(name)``: ``ShapeDtype`` inputs, for
``ss.estimate`` on thousands of devices).

What ``tiny`` verifies bitwise on 8 devices (``tests/programs/test_gpt_bitwise.py`` runs it): the
forward pass, under every strategy (the block's fixed-point grid keeps every sum exact). The
training step (``mode="sgd"`` or ``"adam"``), under every strategy, ``dp`` included: the loss and
the unembedding's update bitwise, the layers' updates equal up to reassociation (a few hundred to
a few thousand ULP). The rounding is straight-through, so layernorm's and softmax's derivatives are
off the grid, and each device sums its own 8 sequences' weight gradients before the all-reduce
adds the 8 partial sums: another order than numpy's sum over the 64.

    h = scan(block, x, layer params)          pre-LN blocks of programs/transformer.py
    logits = layernorm(h) @ unembed            the final LayerNorm, then the vocabulary projection

The input is the embedded token stream ``x`` [batch, seq, d] (the embedding lookup is left out);
the training loss is the library's squared error of the logits against labels of the same shape,
not a cross-entropy. Parameters: ``12 L d^2`` in the blocks (a 4d MLP) plus ``d V`` in the
unembedding: 85M + 39M for GPT-2 small, 6.4B + 0.13B for ``7b``.

Strategies over a mesh with axes ``x`` and ``y`` (what each moves is in its ``about``):

* ``dp``: the batch over every device, parameters replicated: a training step all-reduces every
  gradient.
* ``fsdp``: the batch over every device and every parameter sharded over all devices along its
  largest dim (ZeRO-3, PyTorch FSDP's default ``reshard_after_forward=True``): a layer's weights
  all-gathered for its forward pass and again for its backward pass, gradients reduce-scattered:
  3 (g-1)/g of the layers' parameter bytes per device.
* ``fsdp-no-reshard``: the same layout with ``reshard_after_forward=False``: the weights gathered
  in the forward pass are kept for the backward pass: 2 (g-1)/g of the parameters, more memory.
* ``megatron``: tensor parallel over every device: heads split (wq/wk/wv by columns, wo by rows),
  the MLP column- then row-parallel, the vocabulary projection column-parallel.
* ``sequence``: the sequence over every device, parameters replicated.
* ``2d``: data parallel over ``x`` and Megatron over ``y``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

import simshard as ss
from simshard import P
from simshard.programs import ProgramDef, Strategy, Training
from simshard.report.pipeline import PipelineEstimate

from .training import squared_error
from .transformer import block, layernorm


@dataclass(frozen=True)
class Config:
    name: str
    layers: int
    d: int
    heads: int
    d_ff: int
    vocab: int
    seq: int
    batch: int

    @property
    def layer_params(self) -> dict[str, tuple[int, ...]]:
        d, f, n = self.d, self.d_ff, self.layers
        return {"wq": (n, d, d), "wk": (n, d, d), "wv": (n, d, d), "wo": (n, d, d), "w1": (n, d, f), "w2": (n, f, d)}

    @property
    def param_count(self) -> int:
        return sum(int(np.prod(s)) for s in self.layer_params.values()) + self.d * self.vocab


CONFIGS = {
    # the transformer program's block (d_head 4: every softmax scale exact), two layers, vocab 64
    "tiny": Config("tiny", layers=2, d=32, heads=8, d_ff=64, vocab=64, seq=8, batch=64),
    "gpt2-small": Config("gpt2-small", layers=12, d=768, heads=12, d_ff=3072, vocab=50257, seq=1024, batch=512),
    "7b": Config("7b", layers=32, d=4096, heads=32, d_ff=16384, vocab=32000, seq=2048, batch=1024),
}


def forward(cfg: Config, gather: str | None = None):
    """The model: embeddings in, ``cfg.layers`` pre-LN blocks in one ``ss.lax.scan``, then a final
    LayerNorm and the vocabulary projection.

    ``gather`` (FSDP's two ways): each layer's weights are gathered whole where the layer starts
    (a constraint to replicated, the value its matmuls read). ``"keep"``: the gathered weights
    are the forward pass's, kept for the backward pass as residuals of the scan (PyTorch FSDP's
    ``reshard_after_forward=False``); ``"regather"``: the gather is in ``ss.checkpoint``, so the
    backward pass computes it again from the layer's sharded slice (ZeRO-3; FSDP's
    ``reshard_after_forward=True``). The unembedding, used last, keeps its gathered copy, as
    FSDP's root module does."""

    def gathered(w):
        return ss.with_sharding_constraint(w, P())

    def use(p):
        if gather is None:
            return p
        if gather == "keep":
            return {k: gathered(w) for k, w in p.items()}
        return {k: ss.checkpoint(gathered)(w) for k, w in p.items()}

    def f(params, x):
        layers = {k: params[k] for k in cfg.layer_params}
        h = ss.lax.scan(lambda h, p: (block(use(p), h, cfg.heads), None), x, layers)[0]
        return layernorm(h) @ params["unembed"]

    return f


def _abstract(cfg: Config) -> tuple:
    params = {k: ss.ShapeDtype(s, np.float32) for k, s in cfg.layer_params.items()}
    params["unembed"] = ss.ShapeDtype((cfg.d, cfg.vocab), np.float32)
    act = (cfg.batch, cfg.seq, cfg.d)
    return params, ss.ShapeDtype(act, np.float32), ss.ShapeDtype((cfg.batch, cfg.seq, cfg.vocab), np.float32)


def _exact(cfg: Config) -> tuple:
    """Weights in {-1, 0, 1}, activations integers in [-8, 8], labels in [-2, 2]: exact in float32
    through the blocks (programs/transformer.py's bounds, per layer) and the projection, whose
    LayerNorm outputs are multiples of 1/4 below sqrt(d) summed d at a time."""
    names = list(cfg.layer_params)
    shapes = [cfg.layer_params[n] for n in names] + [(cfg.d, cfg.vocab)]
    ws = ss.exact_inputs(shapes, seed=1, max_abs=1)
    params = dict(zip(names + ["unembed"], ws))
    x = ss.exact_inputs((cfg.batch, cfg.seq, cfg.d), seed=0, max_abs=8)
    y = ss.exact_inputs((cfg.batch, cfg.seq, cfg.vocab), seed=9, max_abs=2)
    return params, x, y


def _inputs(cfg: Config) -> tuple:
    return _exact(cfg) if cfg.name == "tiny" else _abstract(cfg)


# -- layouts -------------------------------------------------------------------------------------
COLUMNS, ROWS = ("wq", "wk", "wv", "w1"), ("wo", "w2")


def _megatron(axes, cfg: Config, mesh, warn: bool) -> dict:
    """Megatron's layout over ``axes``; a warning where Megatron-LM would refuse the split (its
    tensor-parallel size must divide the heads, and here the MLP width and d too): simshard then
    gathers at the head reshape, which Megatron's formula does not count."""
    tp = int(np.prod([mesh.shape[a] for a in axes]))
    uneven = [f"{n} {what}" for n, what in ((cfg.heads, "heads"), (cfg.d, "model dims"), (cfg.d_ff, "MLP dims"))
              if n % tp]
    if uneven and warn:
        warnings.warn(f"gpt {cfg.name}: Megatron over {tp} devices splits {', '.join(uneven)} unevenly (Megatron-LM "
                      f"needs its tensor-parallel size to divide them): the head reshape gathers activations, "
                      f"more than Megatron's (4L + 1) all-reduces", stacklevel=3)
    specs = {k: P(None, None, axes) for k in COLUMNS} | {k: P(None, axes, None) for k in ROWS}
    return specs | {"unembed": P(None, axes)}


def _fsdp(axes, cfg: Config) -> dict:
    def largest(shape):  # the layer dim stays whole
        dims = list(shape[1:]) if len(shape) == 3 else list(shape)
        k = int(np.argmax(dims))
        spec = [None] * len(dims)
        spec[k] = axes
        return P(*([None] if len(shape) == 3 else []), *spec)

    return {k: largest(s) for k, s in cfg.layer_params.items()} | {"unembed": largest((cfg.d, cfg.vocab))}


def layout(cfg: Config, strategy: str, mesh, warn: bool = True) -> tuple:
    """``(param_specs, x_spec, y_spec)`` of a strategy on a mesh whose axes are ``x`` and ``y``
    (a warning where Megatron's split is uneven, unless ``warn`` is False)."""
    axes = tuple(mesh.axis_names)
    if strategy == "dp":
        return P(), P(axes, None, None), P(axes, None, None)
    if strategy in FSDP:
        return _fsdp(axes, cfg), P(axes, None, None), P(axes, None, None)
    if strategy == "megatron":
        return _megatron(axes, cfg, mesh, warn), P(), P(None, None, axes)
    if strategy == "sequence":
        return P(), P(None, axes, None), P(None, axes, None)
    if strategy == "2d":
        major, minor = axes[0], axes[1:]
        return _megatron(minor, cfg, mesh, warn), P(major, None, None), P(major, None, minor)
    raise ValueError(f"gpt: no layout for strategy {strategy!r}")


FSDP = ("fsdp", "fsdp-no-reshard")
ABOUT = {
    "dp": "data parallel: batch over x and y, parameters replicated; every gradient all-reduced",
    "fsdp": "fully sharded (ZeRO-3, reshard_after_forward=True): batch over x and y, each parameter split along its "
            "largest dim; a layer's weights all-gathered for its forward pass, freed, gathered again for its "
            "backward pass; gradients reduce-scattered",
    "fsdp-no-reshard": "fully sharded, reshard_after_forward=False: as fsdp, but the weights gathered in the forward "
                       "pass are kept for the backward pass (fewer bytes, more memory)",
    "megatron": "tensor parallel over x and y: heads and MLP split, vocabulary projection column-parallel",
    "sequence": "sequence parallel over x and y, parameters replicated; keys and values all-gathered",
    "2d": "data parallel over x, Megatron over y",
}


def program(name: str = "tiny", layers: int | None = None) -> ProgramDef:
    """The training step of configuration ``name`` (``CONFIGS``) as a library program; ``layers``:
    that many layers instead of the configuration's (the solve-time benchmark's scan check)."""
    cfg = CONFIGS[name] if layers is None else replace(CONFIGS[name], layers=layers)
    f = forward(cfg)
    default = ss.Mesh({"x": 2, "y": 4})
    strategies = tuple(Strategy(s, ABOUT[s], in_shardings=layout(cfg, s, default, warn=False)[:2]) for s in ABOUT)
    return ProgramDef(
        name="gpt" if name == "tiny" else f"gpt-{name}",
        about=f"decoder-only transformer ({cfg.name}: {cfg.layers} layers, d {cfg.d}, {cfg.heads} heads, "
              f"vocab {cfg.vocab}, {cfg.param_count / 1e6:,.0f}M parameters), layers in a scan",
        fn=f,
        inputs=lambda: _inputs(cfg)[:2],
        mesh={"x": 2, "y": 4},
        strategies=strategies,
        extras={"config": cfg},
        training=Training("the squared error of the logits against labels", lambda: _inputs(cfg),
                          lambda strategy, mesh: layout(cfg, strategy.name, mesh), forward=f,
                          variants={"fsdp": forward(cfg, gather="regather"),
                                    "fsdp-no-reshard": forward(cfg, gather="keep")}),
    )


PROGRAM = program("tiny")


# -- a pipeline axis -------------------------------------------------------------------------------
DP_AXES = {"dp": "all", "sequence": "all", "2d": "major", "megatron": "none", "fsdp": "none", "fsdp-no-reshard": "none"}


def stage_config(cfg: Config, stages: int, microbatches: int) -> Config:
    """The configuration one middle stage runs: ``layers / stages`` layers on one microbatch."""
    if cfg.layers % stages or cfg.batch % microbatches:
        raise ValueError(f"gpt {cfg.name}: {cfg.layers} layers over {stages} stages and a batch of {cfg.batch} in "
                         f"{microbatches} microbatches must divide evenly")
    return Config(f"{cfg.name}-stage", cfg.layers // stages, cfg.d, cfg.heads, cfg.d_ff, cfg.vocab, cfg.seq,
                  cfg.batch // microbatches)


def _stage_layers(cfg: Config, params: dict, h):
    """A stage's few layers, unrolled, not scanned: its weight gradients then stay pending over the
    data-parallel axes to the end (a scan's stacked outputs are reduced inside the loop), to be
    reduced once per step, after the last microbatch, as pipelines accumulate them."""
    for i in range(cfg.layers):
        h = block({k: params[k][i] for k in cfg.layer_params}, h, cfg.heads)
    return h


def stage_layers_scan(cfg: Config, params: dict, h):
    """A stage's layers in ``ss.lax.scan`` (the pipeline search's stage: one search for any count)."""
    layers = {k: params[k] for k in cfg.layer_params}
    return ss.lax.scan(lambda h, p: (block(p, h, cfg.heads), None), h, layers)[0]


def stage_loss(cfg: Config, params: dict, h, y):
    """The last stage's forward: its layers (scanned), the final LayerNorm, the projection, the loss."""
    return squared_error(layernorm(stage_layers_scan(cfg, params, h)) @ params["unembed"], y)


def stage_step(cfg: Config):
    """``f(params, x, ct) -> (d params, d x)``: one microbatch through a middle stage's layers
    (forward), then back with the gradient ``ct`` the next stage returns (backward)."""

    def f(params, x, ct):
        _, pull = ss.vjp(lambda p, h: _stage_layers(cfg, p, h), params, x)
        return pull(ct)

    return f


def last_stage_step(cfg: Config):
    """``f(params, x, y) -> (d params, d x)``: one microbatch through the last stage: its layers,
    the final LayerNorm, the vocabulary projection and the loss against ``y`` (forward), then back
    from the loss (backward)."""

    def f(params, x, y):
        def loss(p, h):
            return squared_error(layernorm(_stage_layers(cfg, p, h)) @ p["unembed"], y)

        _, pull = ss.vjp(loss, params, x)
        return pull(np.float32(1.0))

    return f


def estimate_pipeline(name: str, strategy: str, mesh: dict, pipeline, topology=None):
    """A pipelined training step of configuration ``name``: ``mesh`` names the stage axis
    (``pipeline.axis``) and the axes ``x`` and ``y`` inside each stage, laid out as ``strategy``
    (``dp``, ``fsdp``, ``megatron``, ``sequence`` or ``2d``: with ``2d`` and a stage axis, the 3-D
    strategy). One middle stage's forward and backward of a microbatch is estimated on its own
    devices, its gradients left pending over the data-parallel axes; they are reduced once per
    step, where an SGD update then runs (``sync``). The last stage also runs the final LayerNorm,
    the vocabulary projection and the loss, estimated on its own (``last``; with one stage, it is
    the stage). The model has no embedding lookup (its input is the embedded stream), so the first
    stage is a middle one."""
    cfg = CONFIGS[name]
    sizes = dict(mesh)
    if sizes.get(pipeline.axis) != pipeline.stages:
        raise ValueError(f"the mesh's {pipeline.axis!r} axis has {sizes.get(pipeline.axis)} devices, the pipeline "
                         f"{pipeline.stages} stages")
    inner = ss.Mesh({a: n for a, n in sizes.items() if a != pipeline.axis})
    sc = stage_config(cfg, pipeline.stages, pipeline.microbatches)
    param_specs, x_spec, y_spec = layout(sc, strategy, inner)
    act = ss.ShapeDtype((sc.batch, sc.seq, sc.d), np.float32)
    pending = _pending_axes(strategy, inner)
    shapes = dict(sc.layer_params) | {"unembed": (sc.d, sc.vocab)}
    params = {k: ss.ShapeDtype(s, np.float32) for k, s in shapes.items()}
    specs = {k: param_specs[k] if isinstance(param_specs, dict) else param_specs for k in params}
    grads = {k: _with_unreduced(specs[k], pending, len(params[k].shape)) for k in params}

    def sync_of(names):  # once per step: the pending gradients reduced, an SGD update
        p, s, g = ({k: d[k] for k in names} for d in (params, specs, grads))
        return ss.estimate(lambda g, p: {k: p[k] - 0.125 * g[k] for k in p}, p, p, mesh=inner, in_shardings=(g, s),
                           out_shardings=s, topology=topology)

    labels = ss.ShapeDtype((sc.batch, sc.seq, sc.vocab), np.float32)
    last = ss.estimate(last_stage_step(sc), params, act, labels, mesh=inner, in_shardings=(specs, x_spec, y_spec),
                       out_shardings=(grads, x_spec), topology=topology)
    boundary = ss.layout(ss.NamedSharding(inner, x_spec), act.shape)
    boundary_bytes = max(int(np.prod(boundary.local_shape(d))) for d in inner.device_ids) * 4
    if pipeline.stages == 1:
        return PipelineEstimate(pipeline, last, boundary_bytes, sync_of(list(shapes)), topology)
    body = list(sc.layer_params)
    stage = ss.estimate(stage_step(sc), {k: params[k] for k in body}, act, act, mesh=inner,
                        in_shardings=({k: specs[k] for k in body}, x_spec, x_spec),
                        out_shardings=({k: grads[k] for k in body}, x_spec), topology=topology)
    return PipelineEstimate(pipeline, stage, boundary_bytes, sync_of(body), topology, last, sync_of(list(shapes)))


def _pending_axes(strategy: str, mesh) -> tuple[str, ...]:
    which = DP_AXES[strategy]
    return tuple(mesh.axis_names) if which == "all" else (mesh.axis_names[0],) if which == "major" else ()


def _with_unreduced(spec, axes: tuple[str, ...], rank: int):
    """``spec`` with the gradient pending (unreduced) over ``axes`` it does not shard with."""
    used = {a for e in tuple(spec) if e is not None for a in ((e,) if isinstance(e, str) else e)}
    free = tuple(a for a in axes if a not in used)
    return P(*tuple(spec), unreduced=free) if free else spec
