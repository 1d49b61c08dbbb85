"""Conformance with XLA's partitioner: every program of tests/data/jax_collectives.json, one test id each.

Each program is rebuilt as a numpy function (the JAX source beside it in the file), traced with
the case's in / out shardings on the case's mesh, propagated, partitioned and run on the local
executor. Values must equal the plain numpy function bit for bit (inputs are exact: integer
valued, and for the transformer block chosen so that softmax is an exact one-hot and every
sharded sum is exact). Bytes: per device, simshard must receive no more than XLA's collectives
move (counted the same way: all-gather ``result - operand``, reduce-scatter ``(g-1) * result``,
all-reduce ``2(g-1)/g * operand``, all-to-all ``(g-1)/g * operand``, collective-permute the operand
on devices that receive from another one). Where XLA is known to be wasteful (a partial sum
all-reduced then sliced instead of reduce-scattered; the "involuntary full rematerialization"
of P(None,'y') -> P('x',None)) simshard must move strictly less in total.

Two cases were refused by XLA (uneven shardings at the jit boundary raise IndivisibleError, a
JAX limitation the notes record, not one of the sharding model); simshard runs them, exactly,
at the lower bound of bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import simshard as ss

from .run import run_partitioned

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "jax_collectives.json").read_text())
PROGRAMS = {p["id"]: p for p in DATA["programs"]}

WASTEFUL = {
    "mlp_megatron_dp_tp_2d_out_xy": "partial sum all-reduced then sliced; a reduce-scatter moves half",
    "mm_x_y__y_none__out_x_y": "partial sum all-reduced then sliced; a reduce-scatter moves half",
    "conv_in_channels_sharded_out_channels_sharded": "partial sum all-reduced then sliced",
    "reshard_2d_none_y__to__x_none": "involuntary full rematerialization: all-gather of 4x the data",
    "reshard_2d_x_none__to__y_none": "slice + permute of every row block; the exchange sends only missing rows",
}


# -- the programs as numpy functions -------------------------------------------------------------------
def layernorm(x, g, b, eps=1e-5):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * (1 / np.sqrt(var + eps)) * g + b


def transformer_block(x, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, w2):
    S = x.shape[1]
    h = layernorm(x, ln1_g, ln1_b)
    q = np.einsum("bsd,dhk->bhsk", h, wq)
    k = np.einsum("bsd,dhk->bhsk", h, wk)
    v = np.einsum("bsd,dhk->bhsk", h, wv)
    s = np.einsum("bhqk,bhtk->bhqt", q, k) / np.float32(np.sqrt(q.shape[-1]))
    mask = np.tril(np.ones((S, S), dtype=bool))
    s = np.where(mask, s, np.float32(-1e9))
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    o = np.einsum("bhqt,bhtk->bhqk", p, v)
    x = x + np.einsum("bhsk,hkd->bsd", o, wo)
    h = layernorm(x, ln2_g, ln2_b)
    return x + np.maximum(h @ w1, 0) @ w2


def uneven_constraint_rows_to_cols(x):
    y = ss.with_sharding_constraint(np.sin(x), ss.P("y", None))
    z = ss.with_sharding_constraint(y * 2.0, ss.P(None, "y"))
    return np.cos(z)


def _np_uneven(x):
    return np.cos(np.sin(x) * 2.0)


def _sm(mesh, body, in_spec, out_spec):
    return lambda x: ss.shard_map(body, mesh=mesh, in_specs=in_spec, out_specs=out_spec)(x)


def functions(case, mesh):
    """(function to trace, plain numpy reference)."""
    f = case["function"]
    if f == "identity":
        return (lambda x: x), (lambda x: x)
    if f == "uneven_constraint_rows_to_cols":
        return uneven_constraint_rows_to_cols, _np_uneven
    if f == "matmul":
        return (lambda x, w: x @ w), (lambda x, w: x @ w)
    if f == "mlp2":
        fn = lambda x, w1, w2: np.maximum(x @ w1, 0) @ w2  # noqa: E731
        return fn, fn
    if f == "transformer_block":
        return transformer_block, transformer_block
    if f == "conv2d":
        return (lambda x, k: ss.nn.conv2d(x, k, stride=1, padding="VALID")), (lambda x, k: np.einsum("nchw,ocij->nohw", x, k))
    lax = ss.lax
    P = ss.P
    if f == "sm_psum":
        return _sm(mesh, lambda b: lax.psum(b, "x"), P("x", None), P(None, None)), (lambda x: x.reshape(8, 8, 16).sum(0))
    if f == "sm_psum_scatter":
        body = lambda b: lax.psum_scatter(b, "x", scatter_dimension=0, tiled=True)  # noqa: E731
        return _sm(mesh, body, P("x", None), P("x", None)), (lambda x: x.reshape(8, 8, 16).sum(0))
    if f == "sm_ppermute":
        body = lambda b: lax.ppermute(b, "x", perm=[(i, (i + 1) % 8) for i in range(8)])  # noqa: E731
        return _sm(mesh, body, P("x", None), P("x", None)), (lambda x: np.roll(x.reshape(8, 8, 16), 1, axis=0).reshape(64, 16))
    if f == "sm_all_gather_xy_2d":
        body = lambda b: lax.all_gather(b, ("x", "y"), axis=0, tiled=True)  # noqa: E731
        return _sm(mesh, body, P(("x", "y"), None), P(None, None)), (lambda x: x)
    raise KeyError(f)


def inputs(case) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = [tuple(s) for s in case["shapes"]]
    if case["function"] == "transformer_block":
        return transformer_inputs(rng)
    return [(rng.integers(1, 5, size=s) * rng.choice([-1, 1], size=s)).astype(np.float32) for s in shapes]


def transformer_inputs(rng):
    """Exact inputs: layernorm 1 gives +-1, the scores make softmax an exact one-hot on the
    diagonal, layernorm 2 gives its bias, every sum is of small integers."""
    B, S, D, H, K, F = 8, 32, 64, 4, 16, 256
    signs = rng.choice([-1.0, 1.0], size=(B, S, 32))
    t = np.arange(S)
    for bit in range(5):
        signs[:, :, bit] = 2 * ((t >> bit) & 1) - 1
    signs[:, :, 5] = 1
    x = np.concatenate([signs, -signs], axis=-1) * 4096
    wq = np.zeros((D, H, K))
    wq[5, :, 0] = 16
    wk = np.zeros((D, H, K))
    for bit in range(5):
        wk[bit, :, 0] = 16 * 2**bit
    wv = rng.integers(-3, 4, size=(D, H, K))
    wo = rng.integers(-3, 4, size=(H, K, D))
    ln1_g, ln1_b = np.ones(D), np.zeros(D)
    ln2_g, ln2_b = np.zeros(D), rng.integers(1, 4, size=D) * rng.choice([-1, 1], size=D)
    w1 = rng.integers(-3, 4, size=(D, F))
    w2 = rng.integers(-3, 4, size=(F, D))
    return [np.asarray(a, dtype=np.float32) for a in (x, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, w2)]


def _spec(entries):
    return ss.P(*[tuple(e) if isinstance(e, list) else e for e in entries])


def xla_bytes(case) -> tuple[int, int]:
    """(max per device, total over devices) bytes received by XLA's collectives."""
    n = int(np.prod(list(case["mesh"].values())))
    per = np.zeros(n)
    for c in case["collectives"]:
        kind = c["kind"]
        if kind == "collective-permute":
            pairs = c.get("source_target_pairs") or c.get("pairs") or []
            for s, t in pairs:
                if s != t:
                    per[t] += c["operand_bytes"]
            continue
        g = c["group_size"]
        if kind == "all-gather":
            b = c["result_bytes"] - c["operand_bytes"]
        elif kind == "reduce-scatter":
            b = (g - 1) * c["result_bytes"]
        elif kind == "all-reduce":
            b = 2 * (g - 1) / g * c["operand_bytes"]
        elif kind == "all-to-all":
            b = (g - 1) / g * c["operand_bytes"]
        else:  # pragma: no cover
            raise KeyError(kind)
        per += b
    return int(per.max()), int(per.sum())


@pytest.mark.parametrize("case_id", list(PROGRAMS))
def test_jax_collectives_case(case_id):
    case = PROGRAMS[case_id]
    mesh = ss.Mesh(case["mesh"], case.get("mesh_device_ids"))
    fn, ref = functions(case, mesh)
    args = inputs(case)
    in_sh = tuple(_spec(s) for s in case["in_specs"])
    out_sh = _spec(case["out_specs"])
    program = ss.trace(fn, *args, in_shardings=in_sh, out_shardings=out_sh, mesh=mesh)
    ran = run_partitioned(ss.propagate(program), args, ref(*args))
    if "error" in case:  # XLA refused the uneven jit boundary; simshard runs it at the lower bound
        plan = ss.plan_reshard(ss.NamedSharding(mesh, in_sh[0]), ss.NamedSharding(mesh, out_sh), args[0].shape)
        assert ran.total_received == plan.bytes == plan.minimum_bytes
        return
    xla_max, xla_total = xla_bytes(case)
    assert ran.max_received <= xla_max, f"simshard receives {ran.max_received} B on its busiest device, XLA {xla_max}"
    assert ran.total_received <= xla_total
    if case_id in WASTEFUL:
        assert ran.total_received < xla_total, WASTEFUL[case_id]
