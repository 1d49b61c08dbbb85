"""Compile speed: trace + propagate (+ partition when available) for a stack of transformer blocks.

    python benchmarks/compile.py [--blocks N ...] [--devices 8 64]

Prints one row per (ops, devices): seconds per stage and ops per second. A benchmark, not a
test: these machines are shared, so read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import simshard as ss


def block(x, p):
    """One pre-norm transformer block (attention with a causal mask, then an MLP), plain numpy."""
    b, s, d = x.shape
    h = p["heads"]
    mu = x.mean(axis=-1, keepdims=True)
    xn = (x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)
    q = (xn @ p["wq"]).reshape(b, s, h, d // h).transpose(0, 2, 1, 3)
    k = (xn @ p["wk"]).reshape(b, s, h, d // h).transpose(0, 2, 1, 3)
    v = (xn @ p["wv"]).reshape(b, s, h, d // h).transpose(0, 2, 1, 3)
    att = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // h)
    att = np.where(np.tril(np.ones((s, s), dtype=bool)), att, -1e9)
    att = np.exp(att - att.max(axis=-1, keepdims=True))
    att = att / att.sum(axis=-1, keepdims=True)
    o = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ p["wo"]
    x = x + o
    return x + np.tanh(x @ p["w1"]) @ p["w2"]


def model(x, params):
    for p in params:
        x = block(x, p)
    return x


def measure(n_blocks: int, mesh: ss.Mesh, d: int = 64) -> dict:
    params = [
        {"heads": 4, **{k: ss.ShapeDtype((d, d)) for k in ("wq", "wk", "wv", "wo")},
         "w1": ss.ShapeDtype((d, 4 * d)), "w2": ss.ShapeDtype((4 * d, d))}
        for _ in range(n_blocks)
    ]
    fn = lambda x, ps: model(x, [{**p, "heads": 4} for p in ps])  # noqa: E731
    ps = [{k: v for k, v in p.items() if k != "heads"} for p in params]
    tp = {"wq": ss.P(None, "y"), "wk": ss.P(None, "y"), "wv": ss.P(None, "y"), "wo": ss.P("y", None),
          "w1": ss.P(None, "y"), "w2": ss.P("y", None)}
    t0 = time.perf_counter()
    program = ss.trace(fn, ss.ShapeDtype((8, 16, d)), ps, in_shardings=(ss.P("x", None, None), [tp] * n_blocks), mesh=mesh)
    t1 = time.perf_counter()
    propagated = ss.propagate(program)
    t2 = time.perf_counter()
    row = {"ops": len(program.eqns), "devices": mesh.size, "trace_s": t1 - t0, "propagate_s": t2 - t1}
    partition = getattr(ss, "partition", None)
    if partition is not None:
        partition(propagated)
        row["partition_s"] = time.perf_counter() - t2
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, nargs="+", default=[20, 200])
    ap.add_argument("--devices", type=int, nargs="+", default=[8, 64])
    args = ap.parse_args()
    for n in args.blocks:
        for dev in args.devices:
            mesh = ss.make_mesh((2, -1), ("x", "y"), devices=dev)
            r = measure(n, mesh)
            total = sum(v for k, v in r.items() if k.endswith("_s"))
            stages = "  ".join(f"{k[:-2]} {v:7.3f}s" for k, v in r.items() if k.endswith("_s"))
            print(f"{r['ops']:6d} ops  {r['devices']:3d} devices  {stages}  total {total:7.3f}s  ({r['ops'] / total:,.0f} ops/s)")


if __name__ == "__main__":
    main()
