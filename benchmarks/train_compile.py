"""Compile time of a training step whose layers are in ``ss.lax.scan`` versus unrolled.

    python benchmarks/train_compile.py [--layers 4 8 16 32] [--devices 8 64]

The step is value_and_grad of a squared-error loss over L residual ReLU-MLP layers (Megatron over
``y``, the batch over ``x``) and an SGD update; it is traced, propagated and partitioned (no
execution). A scan is one op whose body is partitioned once (a loop of the schedule), so its
compile time should not depend on L; the unrolled loop's grows with it.
A benchmark, not a test: these machines are shared, so read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import simshard as ss

P = ss.P


def layer(h, w):
    w1, w2 = w
    return h + np.maximum(h @ w1, 0) @ w2


def step(scanned: bool, n_layers: int):
    def forward(params, x):
        if scanned:
            return ss.lax.scan(lambda h, w: (layer(h, w), None), x, (params["w1"], params["w2"]))[0]
        h = x
        for k in range(n_layers):
            h = layer(h, (params["w1"][k], params["w2"][k]))
        return h

    def train(params, x, y):
        loss, g = ss.value_and_grad(lambda p: np.sum((forward(p, x) - y) ** 2))(params)
        return loss, {k: params[k] - 2.0**-10 * g[k] for k in params}

    return train


def measure(n_layers: int, mesh: ss.Mesh, scanned: bool, d: int = 64, f: int = 256, batch: int = 32) -> dict:
    params = {"w1": ss.ShapeDtype((n_layers, d, f)), "w2": ss.ShapeDtype((n_layers, f, d))}
    specs = {"w1": P(None, None, "y"), "w2": P(None, "y", None)}
    data = ss.ShapeDtype((batch, d))
    t0 = time.perf_counter()
    program = ss.trace(step(scanned, n_layers), params, data, data, mesh=mesh,
                       in_shardings=(specs, P("x", None), P("x", None)), out_shardings=(P(), specs))
    t1 = time.perf_counter()
    propagated = ss.propagate(program)
    t2 = time.perf_counter()
    ss.partition(propagated)
    t3 = time.perf_counter()
    return {"ops": len(program.eqns), "trace": t1 - t0, "propagate": t2 - t1, "partition": t3 - t2, "total": t3 - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--devices", type=int, nargs="+", default=[8, 64])
    args = ap.parse_args()
    print(f"{'layers':>6} {'devices':>7} {'how':>8} {'ops':>6} {'trace':>8} {'propagate':>10} {'partition':>10} {'total':>8}"
          f" {'per layer':>10}")
    for dev in args.devices:
        mesh = ss.make_mesh((2, -1) if dev <= 8 else (8, -1), ("x", "y"), devices=dev)
        for n in args.layers:
            for scanned in (True, False):
                r = measure(n, mesh, scanned)
                print(f"{n:6d} {dev:7d} {'scan' if scanned else 'unrolled':>8} {r['ops']:6d} {r['trace']:7.3f}s "
                      f"{r['propagate']:9.3f}s {r['partition']:9.3f}s {r['total']:7.3f}s {r['total'] / n * 1e3:8.1f}ms")


if __name__ == "__main__":
    main()
