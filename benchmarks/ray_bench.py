"""Ray runtime speed: collective throughput, a Megatron MLP end to end, 64-device startup, controller calls.

    python benchmarks/ray_bench.py                      # the issue's sizes (64 MiB, batch 512 / d 1024 / d_ff 4096)
    python benchmarks/ray_bench.py --mib 16 --mlp-scale 0.5 --startup-devices 64

Prints ratios measured in one run (a benchmark, not a test: the machines are shared, read the
ratios, not the absolute times). Every figure comes from one function returning a dict of
numbers, so ``tests/benchmarks/test_ray_bench_smoke.py`` can run each at a toy size.

* ``bench_collectives``: all-gather, reduce-scatter, all-to-all and all-reduce over ``devices``
  device actors, hand-made ``SpmdProgram``s run with ``RayMesh.execute``. The time of one
  collective comes from the devices' timelines (``Execution.timeline``): a program runs ``reps``
  copies back to back, and the steady-state time of one (``collective_programs.collective_seconds``)
  is the collective's; the driver's scatter and gather are not in it. Its throughput is the bytes the
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
import asyncio
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import ray

import simshard as ss
from simshard import P
from simshard.runtime.ray import start as ray_start
from simshard.runtime.ray.driver.mesh import RayMesh

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # imported from elsewhere (the smoke tests): collective_programs is its neighbour
    sys.path.insert(0, str(HERE))

from collective_programs import (  # noqa: E402
    KINDS, collective_case, collective_seconds, steady_seconds,
)
from simshard_sides import best, mlp  # noqa: E402  (peers.py's, the same step)

MEGATRON = (P("x", None), P(None, "y"), P("y", None))



def ray_mesh_cls():
    """The Ray backend's ``RayMesh`` (the smoke test starts its actors through this module)."""
    return RayMesh


def ensure_ray():
    """The initialised Ray if there is one, else a local one (the backend's defaults)."""
    return ray_start.ensure_ray()


# -- collectives ---------------------------------------------------------------------------------


class _Sender:
    def __init__(self):
        self.arrays: dict[int, np.ndarray] = {}

    def make(self, nbytes: int) -> int:
        self.arrays[nbytes] = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
        return nbytes

    def drop(self, nbytes: int) -> None:
        self.arrays.pop(nbytes, None)

    def send(self, receiver, nbytes: int) -> int:
        ref = ray.put(self.arrays[nbytes])
        return ray.get(receiver.take.remote(ref))


class _Peer:
    """A plain async Ray actor: puts arrays, hands their ObjectRefs to peers, reads what it gets."""

    def __init__(self):
        self.peers = {}
        self.block = np.zeros(0, np.float32)

    async def connect(self, peers: dict, max_bytes: int) -> int:
        self.peers = peers
        self.block = np.random.default_rng(0).standard_normal(max(max_bytes // 4, 1)).astype(np.float32)
        return len(peers)

    async def take(self, array) -> int:  # Ray hands the array itself (read from the object store)
        return int(array.nbytes) + int(array[-1] != array[-1] if array.size else 0)  # touch it

    async def send(self, payloads: list, reps: int) -> list:
        """``reps`` rounds of ``payloads`` ((nbytes, destinations): one ``ray.put``, its ref to every
        destination); when each round had been taken by every destination."""
        done = []
        for _ in range(reps):
            acks = []
            for nbytes, dsts in payloads:
                ref = ray.put(self.block[: nbytes // 4])
                acks += [self.peers[d].take.remote(ref) for d in dsts]
            await asyncio.gather(*acks)
            done.append(time.time())
        return done


class RawPair:
    """Two plain Ray actors; ``seconds(nbytes)``: best time to move one ``nbytes`` float32 array
    from one to the other (``ray.put`` in the sender, the ``ObjectRef`` handed to the receiver)."""

    def __init__(self):
        ray = ensure_ray()
        self.ray = ray
        self.sender = ray.remote(_Sender).options(num_cpus=0.01).remote()
        self.receiver = ray.remote(_Peer).options(num_cpus=0.01).remote()  # only its ``take``

    def seconds(self, nbytes: int, trials: int = 3) -> float:
        ray, sender, receiver = self.ray, self.sender, self.receiver
        ray.get(sender.make.remote(nbytes))
        ray.get(sender.send.remote(receiver, nbytes))  # warm-up
        t = best(lambda: ray.get(sender.send.remote(receiver, nbytes)), trials, warmup=0)
        ray.get(sender.drop.remote(nbytes))
        return t

    def close(self) -> None:
        for a in (self.sender, self.receiver):
            self.ray.kill(a)


def raw_payloads(kind: str, transfers, instr: int = 1) -> dict[int, list]:
    """The messages one collective (instruction ``instr``) sent, from the transport's transfer
    log, as raw payloads per sender;
    what our transport puts once for several peers (an all-gather's block, an all-reduce's
    finished chunk in step 1) is one payload with several destinations here too."""
    shared: dict[tuple, list] = {}
    out: dict[int, list] = {}
    for e in transfers.entries:
        if e.direction != "sent" or e.device == e.peer or e.key[0] != instr:
            continue
        step = e.key[1] if len(e.key) > 1 else 0
        if kind == "all_gather" or (kind == "all_reduce" and step == 1):
            shared.setdefault((e.device, e.key, e.nbytes), []).append(e.peer)
        else:
            out.setdefault(e.device, []).append((e.nbytes, (e.peer,)))
    for (src, _, nbytes), dsts in shared.items():
        out.setdefault(src, []).append((nbytes, tuple(dsts)))
    return out


class RawMesh:
    """``n`` plain Ray actors; ``seconds(payloads)``: the steady-state time of one round of the
    given messages, every sender at once (timed like ``collective_seconds``)."""

    def __init__(self, n: int, max_bytes: int):
        ray = ensure_ray()
        self.ray = ray
        self.actors = [ray.remote(_Peer).options(num_cpus=0.01, max_concurrency=1000).remote() for _ in range(n)]
        handles = dict(enumerate(self.actors))
        ray.get([a.connect.remote(handles, max_bytes) for a in self.actors])

    def seconds(self, payloads: dict[int, list], reps: int = 3, trials: int = 2) -> float:
        ray, rounds = self.ray, max(reps, 2)
        best = float("inf")
        for _ in range(trials):
            done = ray.get([self.actors[d].send.remote(p, rounds) for d, p in payloads.items()])
            best = min(best, steady_seconds([max(r[k] for r in done) for k in range(rounds)]))
        return best

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


def raw_transfer_seconds(nbytes: int, trials: int = 3) -> float:
    """``RawPair().seconds(nbytes)`` with a pair of its own."""
    pair = RawPair()
    try:
        return pair.seconds(nbytes, trials)
    finally:
        pair.close()


def bench_collectives(mib: float = 64.0, devices: int = 8, reps: int = 3, trials: int = 2, mesh=None,
                      kinds=KINDS) -> dict:
    """``{kind: {bytes, seconds, gbps, raw_seconds, raw_gbps, ratio}}`` (see the module docstring).
    ``mesh``: a started ``RayMesh`` holding devices 0..devices-1 to reuse (else one is started)."""
    ensure_ray()
    ids = tuple(range(devices))
    own = mesh is None
    rm = RayMesh(devices=ids).start() if own else mesh
    nbytes = int(mib * (1 << 20))
    out = {}
    pair = RawPair()
    raw_mesh = None
    try:
        for kind in kinds:
            full, inputs = collective_case(kind, ids, nbytes, reps)
            kf = rm.load(full, timeout=120.0)
            ex = rm.execute(kf, full, inputs)  # warm-up, and the bytes moved
            moved = sum(b for (s, d), b in ex.transfers.matrix().items() if s != d) // reps
            seconds = min(collective_seconds(rm.execute(kf, full, inputs), reps) for _ in range(trials))
            raw = pair.seconds(moved, max(trials, 3))
            payloads = raw_payloads(kind, ex.transfers)
            if raw_mesh is None:
                raw_mesh = RawMesh(devices, max(n for p in payloads.values() for n, _ in p))
            same = raw_mesh.seconds(payloads, reps, trials)
            out[kind] = {"bytes": moved, "seconds": seconds, "gbps": moved / seconds / 1e9,
                         "raw_seconds": raw, "raw_gbps": moved / raw / 1e9, "ratio": raw / seconds,
                         "same_messages_seconds": same, "same_messages_ratio": same / seconds,
                         "messages": sum(len(d) for p in payloads.values() for _, d in p),
                         "local_shape": inputs[0][0].shape}
    finally:
        pair.close()
        if raw_mesh is not None:
            raw_mesh.close()
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
        ray_s = best(lambda: compiled(*args).outputs, trials, warmup=0)
    finally:
        if own:
            rm.close()
    np_s = best(lambda: mlp(*args), trials, warmup=0)
    return {"ray_seconds": ray_s, "numpy_seconds": np_s, "ratio": ray_s / np_s, "compile_seconds": compile_s,
            "controller_calls": dict(res.controller_calls), "calls_per_run": per_run,
            "calls_per_run_total": sum(per_run.values()), "devices": x * y,
            "max_abs_err": float(np.max(np.abs(got - mlp(*args))))}


# -- startup -------------------------------------------------------------------------------------


def bench_startup(devices: int = 64, batch: int = 64, d: int = 64, d_ff: int = 256) -> dict:
    """Fresh actors for a ``devices`` mesh {x: 8, y: devices/8} (or {x: 1, y: devices}):
    ``{start_seconds, compile_seconds, first_run_seconds, run_seconds, calls_per_run}``."""
    ensure_ray()
    xs = 8 if devices % 8 == 0 and devices >= 16 else (2 if devices % 2 == 0 and devices >= 4 else 1)
    smesh = ss.Mesh({"x": xs, "y": devices // xs})
    args = mlp_args(batch, d, d_ff)
    rm = RayMesh(smesh, devices_per_process=1)  # the start-up of one actor per device
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
    ap.add_argument("--reps", type=int, default=3, help="collectives per timed program (default 3)")
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
              f"(steady state of {args.reps} in one program, best of {args.trials})")
        print(f"{'collective':15s} {'moved':>9s} {'msgs':>5s} {'time':>8s} {'GB/s':>6s} | {'same msgs':>9s} {'ratio':>6s} | "
              f"{'one array':>9s} {'ratio':>6s}")
        res = bench_collectives(args.mib, args.devices, args.reps, args.trials)
        for k, r in res.items():
            print(f"{k:15s} {r['bytes'] / (1 << 20):7.1f}Mi {r['messages']:5d} {r['seconds']:7.3f}s {r['gbps']:6.2f} | "
                  f"{r['same_messages_seconds']:8.3f}s {r['same_messages_ratio']:6.2f} | "
                  f"{r['raw_seconds']:8.3f}s {r['ratio']:6.2f}")
        print("ratio = collective throughput / plain Ray throughput of the same bytes (goal >= 0.7): 'same msgs' sends\n"
              "them as the same messages between plain actors, 'one array' as one array between two actors")
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
