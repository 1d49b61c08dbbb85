"""Ray runtime speed: collective throughput, a Megatron MLP end to end, 64-device startup, controller calls.

    python benchmarks/ray_bench.py                      # the issue's sizes (64 MiB, batch 512 / d 1024 / d_ff 4096)
    python benchmarks/ray_bench.py --mib 16 --mlp-scale 0.5 --startup-devices 64

Prints ratios measured in one run (a benchmark, not a test: the machines are shared, read the
ratios, not the absolute times). Every figure comes from one function returning a dict of
numbers, so ``tests/benchmarks/test_ray_bench_smoke.py`` can run each at a toy size.

* ``bench_collectives``: all-gather, reduce-scatter, all-to-all and all-reduce over ``devices``
  device actors, hand-made ``SpmdProgram``s run with ``RayMesh.execute``. The time of one
  collective is the *marginal* time: a program with ``reps`` copies of the collective minus the
  same program with none (both scatter the same inputs and return the same outputs), divided by
  ``reps``; so the driver's scatter and gather are not counted. Its throughput is the bytes the
  Ray transport moved between devices (its transfer log, self-sends excluded) per second; the
  baseline moves the same bytes as one array between two plain Ray actors (``ray.put`` in one,
  the ``ObjectRef`` handed to the other, which reads it). ratio = collective / raw (goal >= 0.7).
* ``bench_mlp``: ``relu(x @ w1) @ w2`` with the Megatron sharding (batch on x, d_ff on y, an
  all-reduce over y) compiled once on a ``RayMesh``; a timed run is ``compiled(x, w1, w2).outputs``
  (scatter, run, gather). ratio = Ray / single-process numpy of the same function (goal <= 1.5).
* ``bench_startup``: ``RayMesh`` start (actor creation and peer handles) for a 64-device mesh,
  then compile and two runs of a small MLP on it (goal: start < 30 s).
* controller calls per run: ``RayMesh.calls`` before and after one whole run (outputs included).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

import numpy as np

import simshard as ss
from simshard import P
from simshard.partition import AllGather, AllReduce, AllToAll, Free, ReduceScatter, Schedule, SpmdProgram

KINDS = ("all_gather", "reduce_scatter", "all_to_all", "all_reduce")
MEGATRON = (P("x", None), P(None, "y"), P("y", None))


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def ray_mesh_cls():
    from simshard.runtime.ray_backend import RayMesh

    return RayMesh


def ensure_ray():
    """The initialised Ray if there is one, else a local one (the backend's defaults)."""
    from simshard.runtime.ray_backend import ensure_ray as _ensure

    return _ensure()


# -- collectives ---------------------------------------------------------------------------------


def collective_program(kind: str, devices: tuple[int, ...], rows: int, cols: int, reps: int) -> SpmdProgram:
    """Every device: input buffer 0 (``[rows, cols]`` float32), ``reps`` copies of the collective
    over all ``devices`` (instruction ids 1..reps, each result freed at once), output buffer 0."""
    n = len(devices)
    instrs = []
    for r in range(1, reps + 1):
        src = f"bench {kind} {r}"
        if kind == "all_gather":
            ins = AllGather(r, src, src=0, dst=1, group=devices, axis=0, axes=("d",))
        elif kind == "reduce_scatter":
            ins = ReduceScatter(r, src, src=0, dst=1, group=devices, axis=0, splits=(rows // n,) * n, axes=("d",))
        elif kind == "all_to_all":
            ins = AllToAll(r, src, src=0, dst=1, group=devices, split_axis=0, splits=(rows // n,) * n,
                           concat_axis=0, axes=("d",))
        elif kind == "all_reduce":
            ins = AllReduce(r, src, src=0, dst=1, group=devices, axes=("d",))
        else:
            raise ValueError(f"unknown collective {kind!r} (one of {KINDS})")
        instrs += [ins, Free(10_000 + r, src, bufs=(1,))]
    return SpmdProgram(None, tuple(Schedule(d, (0,), tuple(instrs), (0,)) for d in devices), (), ())


def collective_shape(kind: str, n: int, nbytes: int) -> tuple[int, int]:
    """Local input shape for a collective over a ``nbytes`` global array (float32, 256 columns):
    all-gather and all-to-all hold one shard (nbytes / n) each; reduce-scatter and all-reduce hold
    a whole ``nbytes`` partial each."""
    cols = 256
    rows = max(n * n, nbytes // (4 * cols) // (n * n) * (n * n))  # global rows, a multiple of n * n
    if kind in ("all_gather", "all_to_all"):
        rows //= n
    return rows, cols


def _timed(fn, trials: int) -> float:
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


class _Sender:
    def __init__(self):
        self.arrays: dict[int, np.ndarray] = {}

    def make(self, nbytes: int) -> int:
        self.arrays[nbytes] = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
        return nbytes

    def drop(self, nbytes: int) -> None:
        self.arrays.pop(nbytes, None)

    def send(self, receiver, nbytes: int) -> int:
        import ray

        ref = ray.put(self.arrays[nbytes])
        return ray.get(receiver.take.remote(ref))


class _Receiver:
    def take(self, array) -> int:  # Ray hands the array itself (read from the object store)
        return int(array.nbytes) + int(array[-1] != array[-1])  # touch it


class RawPair:
    """Two plain Ray actors; ``seconds(nbytes)``: best time to move one ``nbytes`` float32 array
    from one to the other (``ray.put`` in the sender, the ``ObjectRef`` handed to the receiver)."""

    def __init__(self):
        ray = ensure_ray()
        self.ray = ray
        self.sender = ray.remote(_Sender).options(num_cpus=0.01).remote()
        self.receiver = ray.remote(_Receiver).options(num_cpus=0.01).remote()

    def seconds(self, nbytes: int, trials: int = 3) -> float:
        ray, sender, receiver = self.ray, self.sender, self.receiver
        ray.get(sender.make.remote(nbytes))
        ray.get(sender.send.remote(receiver, nbytes))  # warm-up
        t = _timed(lambda: ray.get(sender.send.remote(receiver, nbytes)), trials)
        ray.get(sender.drop.remote(nbytes))
        return t

    def close(self) -> None:
        for a in (self.sender, self.receiver):
            self.ray.kill(a)


def raw_transfer_seconds(nbytes: int, trials: int = 3) -> float:
    """``RawPair().seconds(nbytes)`` with a pair of its own."""
    pair = RawPair()
    try:
        return pair.seconds(nbytes, trials)
    finally:
        pair.close()


def bench_collectives(mib: float = 64.0, devices: int = 8, reps: int = 2, trials: int = 2, mesh=None,
                      kinds=KINDS) -> dict:
    """``{kind: {bytes, seconds, gbps, raw_seconds, raw_gbps, ratio}}`` (see the module docstring).
    ``mesh``: a started ``RayMesh`` holding devices 0..devices-1 to reuse (else one is started)."""
    RayMesh = ray_mesh_cls()
    ensure_ray()
    ids = tuple(range(devices))
    own = mesh is None
    rm = RayMesh(devices=ids).start() if own else mesh
    nbytes = int(mib * (1 << 20))
    out = {}
    pair = RawPair()
    try:
        for kind in kinds:
            rows, cols = collective_shape(kind, devices, nbytes)
            rng = np.random.default_rng(1)
            inputs = {d: [rng.standard_normal((rows, cols)).astype(np.float32)] for d in ids}
            base, full = collective_program(kind, ids, rows, cols, 0), collective_program(kind, ids, rows, cols, reps)
            kb, kf = rm.load(base, timeout=120.0), rm.load(full, timeout=120.0)
            ex = rm.execute(kf, full, inputs)  # warm-up, and the bytes moved
            moved = sum(b for (s, d), b in ex.transfers.matrix().items() if s != d) // reps
            t_base = _timed(lambda: rm.execute(kb, base, inputs), trials)
            t_full = _timed(lambda: rm.execute(kf, full, inputs), trials)
            seconds = max(t_full - t_base, 1e-9) / reps
            raw = pair.seconds(moved, max(trials, 3))
            out[kind] = {"bytes": moved, "seconds": seconds, "gbps": moved / seconds / 1e9,
                         "raw_seconds": raw, "raw_gbps": moved / raw / 1e9, "ratio": raw / seconds,
                         "local_shape": (rows, cols)}
    finally:
        pair.close()
        if own:
            rm.close()
    return out


# -- the MLP -------------------------------------------------------------------------------------


def mlp_args(batch: int, d: int, d_ff: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, d)).astype(np.float32),
            (rng.standard_normal((d, d_ff)) / np.sqrt(d)).astype(np.float32),
            (rng.standard_normal((d_ff, d)) / np.sqrt(d_ff)).astype(np.float32))


def bench_mlp(batch: int = 512, d: int = 1024, d_ff: int = 4096, x: int = 2, y: int = 4, trials: int = 3,
              mesh=None) -> dict:
    """Ray end to end vs numpy: ``{ray_seconds, numpy_seconds, ratio, compile_seconds,
    controller_calls, calls_per_run, max_abs_err}``. ``mesh``: a started ``RayMesh`` over an
    ``x * y``-device mesh {x, y} to reuse."""
    RayMesh = ray_mesh_cls()
    ensure_ray()
    smesh = ss.Mesh({"x": x, "y": y})
    args = mlp_args(batch, d, d_ff)
    own = mesh is None
    rm = RayMesh(smesh).start() if own else mesh
    try:
        t0 = time.perf_counter()
        compiled = rm.compile(mlp, *args, in_shardings=MEGATRON, timeout=120.0)
        compile_s = time.perf_counter() - t0
        got = compiled(*args).outputs  # warm-up
        before = dict(rm.calls)
        res = compiled(*args)
        _ = res.outputs
        per_run = {k: v - before.get(k, 0) for k, v in rm.calls.items() if v - before.get(k, 0)}
        ray_s = _timed(lambda: compiled(*args).outputs, trials)
    finally:
        if own:
            rm.close()
    np_s = _timed(lambda: mlp(*args), trials)
    return {"ray_seconds": ray_s, "numpy_seconds": np_s, "ratio": ray_s / np_s, "compile_seconds": compile_s,
            "controller_calls": dict(res.controller_calls), "calls_per_run": per_run,
            "calls_per_run_total": sum(per_run.values()), "devices": x * y,
            "max_abs_err": float(np.max(np.abs(got - mlp(*args))))}


# -- startup -------------------------------------------------------------------------------------


def bench_startup(devices: int = 64, batch: int = 64, d: int = 64, d_ff: int = 256) -> dict:
    """Fresh actors for a ``devices`` mesh {x: 8, y: devices/8} (or {x: 1, y: devices}):
    ``{start_seconds, compile_seconds, first_run_seconds, run_seconds, calls_per_run}``."""
    RayMesh = ray_mesh_cls()
    ensure_ray()
    xs = 8 if devices % 8 == 0 and devices >= 16 else (2 if devices % 2 == 0 and devices >= 4 else 1)
    smesh = ss.Mesh({"x": xs, "y": devices // xs})
    args = mlp_args(batch, d, d_ff)
    rm = RayMesh(smesh)
    t0 = time.perf_counter()
    try:
        rm.start()
        t1 = time.perf_counter()
        compiled = rm.compile(mlp, *args, in_shardings=MEGATRON, timeout=120.0)
        t2 = time.perf_counter()
        out = compiled(*args).outputs
        t3 = time.perf_counter()
        before = dict(rm.calls)
        out = compiled(*args).outputs
        t4 = time.perf_counter()
        per_run = {k: v - before.get(k, 0) for k, v in rm.calls.items() if v - before.get(k, 0)}
    finally:
        rm.close()
    assert np.allclose(out, mlp(*args), rtol=1e-4, atol=1e-4)
    return {"devices": devices, "start_seconds": t1 - t0, "compile_seconds": t2 - t1,
            "first_run_seconds": t3 - t2, "run_seconds": t4 - t3, "calls_per_run": per_run,
            "calls_per_run_total": sum(per_run.values())}


# -- the script ----------------------------------------------------------------------------------


def _calls(c: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + f" (total {sum(c.values())})"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=64.0, help="global array per collective, MiB (default 64)")
    ap.add_argument("--devices", type=int, default=8, help="devices for the collectives (default 8)")
    ap.add_argument("--reps", type=int, default=2, help="collectives per timed program (default 2)")
    ap.add_argument("--trials", type=int, default=2, help="best of this many timed runs (default 2)")
    ap.add_argument("--mlp-scale", type=float, default=1.0,
                    help="scale batch, d and d_ff of the MLP (default 1: 512, 1024, 4096)")
    ap.add_argument("--startup-devices", type=int, default=64, help="devices for the startup benchmark (default 64)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["collectives", "mlp", "startup"])
    args = ap.parse_args(argv)

    ray = ensure_ray()
    print(f"# ray_bench {datetime.date.today()}  {platform.node()}  {os.cpu_count()} cores  "
          f"ray {ray.__version__}  numpy {np.__version__}  python {platform.python_version()}")
    if "collectives" not in args.skip:
        print(f"\n## collectives: {args.devices} devices, {args.mib:g} MiB global array, float32 "
              f"(marginal time of {args.reps} in one program, best of {args.trials})")
        print(f"{'collective':15s} {'moved':>10s} {'time':>9s} {'GB/s':>7s} {'raw time':>9s} {'raw GB/s':>8s} {'ratio':>6s}")
        res = bench_collectives(args.mib, args.devices, args.reps, args.trials)
        for k, r in res.items():
            print(f"{k:15s} {r['bytes'] / (1 << 20):8.1f}Mi {r['seconds']:8.3f}s {r['gbps']:7.2f} "
                  f"{r['raw_seconds']:8.3f}s {r['raw_gbps']:8.2f} {r['ratio']:6.2f}")
        print("ratio = collective throughput / raw actor-to-actor throughput of the same bytes (goal >= 0.7)")
    if "mlp" not in args.skip:
        s = args.mlp_scale
        b, d, f = (max(8, int(v * s)) for v in (512, 1024, 4096))
        print(f"\n## Megatron MLP relu(x @ w1) @ w2: batch {b}, d {d}, d_ff {f}, float32, mesh x=2,y=4 "
              f"(best of {args.trials})")
        r = bench_mlp(b, d, f, trials=args.trials)
        print(f"ray end to end {r['ray_seconds']:.3f}s   numpy {r['numpy_seconds']:.3f}s   ratio {r['ratio']:.2f}x "
              f"(goal <= 1.5x)   compile + ship {r['compile_seconds']:.2f}s   max |err| {r['max_abs_err']:.2e}")
        print(f"controller calls per run: {_calls(r['calls_per_run'])}; in the run itself: {_calls(r['controller_calls'])}")
    if "startup" not in args.skip:
        print(f"\n## startup: {args.startup_devices} device actors")
        r = bench_startup(args.startup_devices)
        print(f"start {r['start_seconds']:.2f}s (goal < 30 s)   compile + ship {r['compile_seconds']:.2f}s   "
              f"first run {r['first_run_seconds']:.2f}s   run {r['run_seconds']:.2f}s")
        print(f"controller calls per run: {_calls(r['calls_per_run'])}")


if __name__ == "__main__":
    main()
