"""A pre-LayerNorm transformer block (causal multi-head attention + ReLU MLP) and how to shard it.

    x1 = x  + attention(layernorm(x))        attention: per head softmax(q k^T / sqrt(dh), causal) v, then @ wo
    x2 = x1 + relu(layernorm(x1) @ w1) @ w2

Exact on purpose. Layernorm and softmax divide, take roots and exponentials, so their outputs are
not integers; a sharded matmul that then adds them in another order would round differently.
So the block rounds activations to a fixed-point grid where integer inference would quantize
them (``fixed_point``: layernorm outputs to 1/4, softmax's exponentials to 1/256 and its
probabilities to 1/16). With integer-valued inputs every matmul and every softmax sum then adds
exactly representable numbers (bounds in ``inputs``), so any order gives numpy's bits. The one
inexact reduction left is layernorm's statistics over the feature dim, which no strategy shards:
every device reduces whole rows, as numpy does. (Order matters even unsharded: numpy's
reductions add in an order that depends on memory layout, which a partitioned program does not
reproduce; without the grid not even ``dp`` is bitwise.)

Strategies on the default mesh ``{x: 2, y: 4}`` (8 devices; ``about`` of each says what moves):

* ``dp``: batch over every device, parameters replicated: no communication.
* ``megatron``: tensor parallel over every device: heads split (wq, wk, wv by columns, wo by rows),
  the MLP column- then row-parallel; two all-reduces of ``batch x seq x d``.
* ``sequence``: the sequence split over every device, parameters replicated; keys and values are
  all-gathered for attention (each query needs every earlier key), nothing else moves.
* ``explicit``: Megatron written in explicit sharding mode (``simshard.numpy`` with
  ``out_sharding``): the types say where each all-reduce happens.
"""

from __future__ import annotations

import numpy as np

import simshard as ss
import simshard.numpy as snp
from simshard import P
from simshard.programs import ProgramDef, Strategy, Training

BATCH, SEQ, D, HEADS, D_FF = 8, 8, 32, 8, 64
D_HEAD = D // HEADS  # 4: the softmax scale 1/sqrt(4) = 1/2 is exact
PARAMS = {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "w1": (D, D_FF), "w2": (D_FF, D)}


def fixed_point(v, bits):
    """``v`` rounded to the nearest multiple of ``2**-bits`` (halves up): what an integer kernel
    would store. Element-wise, so every device computes it as numpy does.

    Written ``v + stop_gradient(q - v)``, a straight-through rounding: the training step's
    gradient passes it unchanged (a rounding's own derivative is 0 almost everywhere). The value
    is ``q`` bit for bit: ``q`` and ``v`` are within half a grid step, so ``q - v`` is exact
    (Sterbenz, or ``q = 0``) and ``v + (q - v)`` is the representable ``q``."""
    scale = float(2**bits)
    q = np.floor(v * scale + 0.5) / scale
    return v + ss.lax.stop_gradient(q - v)


def layernorm(x, eps=1e-5):
    """Layernorm over the feature (last) dim, no learned scale or shift (element-wise, no comm)."""
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return fixed_point(xc / np.sqrt(var + eps), 2)


def softmax(s):
    """Softmax over the last (key) dim, rounded to 1/16. The exponentials are rounded to 1/256
    first (each row holds a 1: no zero sums), so their row sums are exact in any order."""
    e = fixed_point(np.exp(s - s.max(axis=-1, keepdims=True)), 8)
    return fixed_point(e / e.sum(axis=-1, keepdims=True), 4)


def heads(t, n: int = HEADS):
    """[b, s, d] -> [b, n, s, d / n]."""
    b, s, d = t.shape
    return t.reshape(b, s, n, d // n).transpose(0, 2, 1, 3)


def merge_heads(t):
    """[b, heads, s, d_head] -> [b, s, d]."""
    b, h, s, dh = t.shape
    return t.transpose(0, 2, 1, 3).reshape(b, s, h * dh)


def attention_core(q, k, v):
    """Causal attention of [b, h, s, dh] queries, keys, values; the key dim is never split."""
    s = np.einsum("bhsd,bhtd->bhst", q, k) * q.shape[-1] ** -0.5  # a Python float: keeps float32
    causal = np.tril(np.ones((q.shape[2], k.shape[2]), dtype=bool))
    p = softmax(np.where(causal, s, -np.inf))
    return np.einsum("bhst,bhtd->bhsd", p, v)


def block(params, x, n_heads: int = HEADS):
    h = layernorm(x)
    q, k, v = heads(h @ params["wq"], n_heads), heads(h @ params["wk"], n_heads), heads(h @ params["wv"], n_heads)
    k, v = ss.with_sharding_annotation(k, "keys"), ss.with_sharding_annotation(v, "values")
    x1 = x + merge_heads(attention_core(q, k, v)) @ params["wo"]
    return x1 + np.maximum(layernorm(x1) @ params["w1"], 0) @ params["w2"]


def inputs():
    """``params`` with weights in {-1, 0, 1} and ``x`` integers in [-8, 8].

    Why every matmul is exact in float32 (24 significand bits, every bound in units far below
    2**24): layernorm outputs are multiples of 1/4 with |h| <= sqrt(d) < 6, so q, k, v are
    multiples of 1/4 below 32 * 6 = 192; scores (times 1/2) multiples of 1/32 below
    4 * 192**2 / 2 = 73728, under 2**22 units; the 8 probabilities of a row are multiples of 1/16
    summing to at most 1 + 8/32, so p @ v is a multiple of 1/64 below 1.25 * 192 = 240 and
    @ wo below 32 * 240 = 7680; the MLP's hidden values are multiples of 1/4 below 192, its output
    below 64 * 192 = 12288; the residual stream stays a multiple of 1/64 below 2**15.
    """
    names = list(PARAMS)
    ws = ss.exact_inputs([PARAMS[n] for n in names], seed=1, max_abs=1)
    x = ss.exact_inputs((BATCH, SEQ, D), seed=0, max_abs=8)
    return dict(zip(names, ws)), x


# -- strategies ------------------------------------------------------------------------------------

def _axes(mesh):
    return tuple(mesh.axis_names)


def _sequence(mesh):
    """Tokens split over every device; keys and values gathered whole before attention."""
    axes = _axes(mesh)
    helper = ss.MeshShardingHelper(mesh.axis_sizes, mesh.axis_names, name=mesh.name)
    return helper.sjit(block, in_shardings=(P(), P(None, axes, None)), out_shardings=P(None, axes, None),
                       annotation_shardings={"keys": P(), "values": P()})


def block_explicit(params, x):
    """``block`` in explicit sharding mode, Megatron-style: the column-parallel projections keep
    their sharded columns (the rule infers it); the row-parallel ones contract a sharded dim,
    which explicit mode refuses to guess, so ``out_sharding=P()`` says: all-reduce here."""
    h = layernorm(x)
    q, k, v = heads(h @ params["wq"]), heads(h @ params["wk"]), heads(h @ params["wv"])
    a = merge_heads(attention_core(q, k, v))
    x1 = x + snp.matmul(a, params["wo"], out_sharding=P())
    f = np.maximum(layernorm(x1) @ params["w1"], 0)
    return x1 + snp.matmul(f, params["w2"], out_sharding=P())


def _megatron_specs(axes):
    col, row = P(None, axes), P(axes, None)
    return {"wq": col, "wk": col, "wv": col, "wo": row, "w1": col, "w2": row}


def _explicit(mesh):
    axes = _axes(mesh)
    emesh = ss.make_mesh(mesh.axis_sizes, mesh.axis_names, axis_types=ss.AxisType.Explicit, name=mesh.name)
    return ss.jit(block_explicit, in_shardings=(_megatron_specs(axes), P()), mesh=emesh)


# -- training: blocks stacked in a scan ---------------------------------------------------------
TRAIN_LAYERS = 2


def stack(params, x):
    """``TRAIN_LAYERS`` blocks, their parameters stacked on a leading layer dim, in ``ss.lax.scan``."""
    return ss.lax.scan(lambda h, p: (block(p, h), None), x, params)[0]


def train_inputs():
    """Stacked parameters (the forward's bounds per layer), the forward's ``x``, integer labels."""
    names = list(PARAMS)
    layers = [ss.exact_inputs([PARAMS[n] for n in names], seed=1 + k, max_abs=1) for k in range(TRAIN_LAYERS)]
    params = {n: np.stack([ws[i] for ws in layers]) for i, n in enumerate(names)}
    _, x = inputs()
    return params, x, ss.exact_inputs((BATCH, SEQ, D), seed=9, max_abs=8)


def train_layout(strategy, mesh):
    """``(param_specs, x_spec, y_spec)``: a layer's layout with the layer dim whole."""
    axes = _axes(mesh)
    if strategy.name == "megatron":
        return {k: P(None, *spec) for k, spec in _megatron_specs(axes).items()}, P(), P()
    if strategy.name == "sequence":
        return P(), P(None, axes, None), P(None, axes, None)
    params, x = strategy.in_shardings
    return params, x, x


PROGRAM = ProgramDef(
    name="transformer",
    about="pre-LN transformer block: causal multi-head attention and a ReLU MLP, with residuals",
    fn=block,
    inputs=inputs,
    mesh={"x": 2, "y": 4},
    strategies=(
        Strategy("dp", "data parallel: batch over x and y, parameters replicated; no communication",
                 in_shardings=(P(), P(("x", "y"), None, None))),
        Strategy("megatron", "tensor parallel over x and y: heads split (wq/wk/wv by columns, wo by rows), "
                 "MLP column- then row-parallel; one all-reduce of batch x seq x d after attention, one after the MLP",
                 in_shardings=(_megatron_specs(("x", "y")), P()), out_shardings=P()),
        Strategy("sequence", "sequence parallel over x and y, parameters replicated; keys and values all-gathered "
                 "for attention", build=_sequence),
        Strategy("explicit", "Megatron in explicit sharding mode: snp.matmul(..., out_sharding=P()) places each all-reduce",
                 build=_explicit),
    ),
    training=Training(f"the squared error of {TRAIN_LAYERS} blocks in a scan against integer labels", train_inputs,
                      train_layout, forward=stack, strategies=("dp", "megatron", "sequence")),
)
