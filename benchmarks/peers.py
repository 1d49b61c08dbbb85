"""simshard against its peers, in one run: PyTorch DTensor's transport (torch.distributed over
gloo, one process per rank) and JAX (8 host CPU devices), on the same shapes.

    python benchmarks/peers.py                        # the table, with ratios
    python benchmarks/peers.py --quick                # toy sizes (a smoke run)
    python benchmarks/peers.py --peer-python /path/to/venv/bin/python --write docs/performance.md

The peers run ``peer_workers.py`` in subprocesses of ``--peer-python`` (default: this interpreter),
so they may live in their own environment (``pip install -e '.[peers]'`` puts torch 2.13 CPU and JAX
in this one); a peer that is not installed is reported as such, not an error. Every figure is the
best of a few timed repetitions after a warm-up, each from a function returning numbers:

* collectives (all-gather, reduce-scatter, all-reduce, all-to-all over 8 ranks, of a global array of
  the given size): simshard's is the steady-state time of one collective on the devices' own clocks
  (``collective_programs.collective_seconds``), on Ray (one process per device, sockets data plane)
  and on the local backend; torch's from the first rank's start to the last rank's end (the ranks
  lined up by a barrier before each trial); JAX's a jitted collective, ``block_until_ready``.
* the Megatron MLP ``relu(x @ w1) @ w2`` on a [2, 4] mesh (batch over x, d_ff over y, an
  all-reduce over y), inputs already on the devices (simshard: DeviceArrays, outputs left on
  the devices; torch: each rank's shards; JAX: committed arrays), and end to end (put, run, gather).
* a tiny MLP step on 64 devices ([8, 8]): simshard with 8 devices per process.
* per-message overhead: a chain of tiny collective-permutes around 8 devices, time per round.
* a pair (``--rows pair``): 2 devices, one process each, against 2 gloo ranks: the Megatron MLP on a
  [1, 2] mesh at each device's share of the [2, 4] rows (64x256x512: each device the products of
  128x256x1024's; 256x1024x2048: those of 512x1024x4096's) and a 1 MiB all-reduce: one process per
  device with a core each, as on a many-core node, where a 2-core machine can give one.
* the event loops (``--rows loops``): the pair's rows on Ray's default loop (uvloop's wherever it is
  installed) and with uvloop hidden (asyncio's), both in each round. ``SIMSHARD_HIDE_UVLOOP=1``
  hides it from every row of a run instead. Each simshard row names the loop it ran on.

The collectives and the Megatron MLP run every side once in each of ``--rounds`` rounds (default
3), one side after another, and keep each side's best: the machine's speed drifts over minutes,
and a peer measured in a fast minute against simshard in a slow one (or the reverse) says
nothing about either.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import simshard as ss
from simshard import P
from simshard.runtime import LocalMesh, run_local
from simshard.spmd import CollectivePermute, Schedule, SpmdProgram

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # imported from elsewhere (the smoke test): collective_programs, peer_workers
    sys.path.insert(0, str(HERE))

from peer_workers import span_times  # noqa: E402,F401  (a worker's spans to one figure; the smoke test reads it here)
from collective_programs import collective_program, collective_seconds, collective_shape  # noqa: E402
from peer_table import row_line, table, write_section  # noqa: E402  (the smoke test reads them here too)

PEER_WORKERS = HERE / "peer_workers.py"  # what a peer runs, in a subprocess of --peer-python
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
ROWS = ("collectives", "mlp", "pair", "tiny", "messages", "loops")  # the groups of rows, each run or not (--rows)
USED: dict = {}  # (devices, devices per process) of a message chain on Ray -> what it ran on (``routes_used``)


# SIMSHARD_HIDE_UVLOOP=1: every Ray mesh's device processes on asyncio's loop even where uvloop is
# installed (issue 33's last goal compares the two); each row says which loop it ran on
HIDE_UVLOOP = {"env_vars": {"RAY_USE_UVLOOP": "0"}}  # a mesh's processes on asyncio's loop
RUNTIME_ENV = HIDE_UVLOOP if os.environ.get("SIMSHARD_HIDE_UVLOOP") == "1" else None
WARMUP = 5  # untimed calls before the trials, each side alike: a step's first calls pay for caches and buffers


def best(fn, trials: int = 10, warmup: int = WARMUP) -> float:
    """The fastest of ``trials`` timed calls of ``fn``, after ``warmup`` untimed ones (a training
    step runs thousands of times: its steady state is the figure, as for the peers' ranks)."""
    for _ in range(warmup):
        fn()
    out = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def best_of(results) -> dict:
    """Each key's smallest time over several rounds' result dicts (a peer's error where it never ran)."""
    out = {}
    for res in results:
        for k, v in res.items():
            if isinstance(v, float) and (not isinstance(out.get(k), float) or v < out[k]):
                out[k] = v
            else:
                out.setdefault(k, v)
    return out


def mlp_shapes(scale: str, quick: bool) -> tuple[int, int, int]:
    if quick:
        return (16, 32, 64)
    return {"small": (128, 256, 1024), "large": (512, 1024, 4096)}[scale]


# -- simshard ----------------------------------------------------------------------------------


def simshard_collectives(nbytes: int, backend: str, reps: int = 3, n: int = 8, kinds=KINDS,
                         runtime_env=RUNTIME_ENV) -> dict:
    """Seconds of one collective over ``n`` devices (steady state, devices' clocks)."""
    ids = tuple(range(n))
    out, used = {}, set()
    rm = None
    if backend == "ray":
        from simshard.runtime.ray.driver.mesh import RayMesh  # ray only when the Ray backend is chosen

        rm = RayMesh(devices=ids, devices_per_process=1, runtime_env=runtime_env).start()
    try:
        for kind in kinds:
            rows, cols = collective_shape(kind, n, nbytes)
            rng = np.random.default_rng(1)
            inputs = {d: [rng.standard_normal((rows, cols)).astype(np.float32)] for d in ids}
            spmd = collective_program(kind, ids, rows, cols, reps)
            if rm is None:
                run = lambda: run_local(spmd, inputs, timeout=120.0)  # noqa: E731
            else:
                key = rm.load(spmd, timeout=120.0)
                run = lambda key=key: rm.execute(key, spmd, inputs)  # noqa: E731
            if rm is not None:
                used.add(routes_used(run(), rm))
            run()
            out[kind] = min(collective_seconds(run(), reps) for _ in range(3))
    finally:
        if rm is not None:
            rm.close()
    out["used"] = " / ".join(sorted(used)) or "local"
    return out


def routes_used(execution, mesh) -> str:
    """What a simshard Ray row actually ran on: its messages between devices per route taken (each
    counted as it was sent), the device pairs per route, the run calls' route (and why, where they
    were Ray calls: large input shards go through Ray's object store; a device's messages never
    do), how the device processes wait, and how many there were. A message sent by Ray calls where
    a socket was meant ("ray" among the messages' routes) is flagged, so that a silent fallback
    can never pass for a measurement."""
    text = (f"{execution.describe_routes()}; polling {mesh.polling(mesh.devices[0])}; {len(mesh.groups)} processes "
            f"on {mesh.event_loop(mesh.devices[0])}")
    if ("ray" in execution.messages or "ray" in execution.routes) and execution.data_plane == "sockets":
        text = "FALLBACK to Ray calls: " + text
        print(f"warning: {text}", file=sys.stderr)
    return text


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def mlp_inputs(batch: int, d: int, d_ff: int) -> tuple[tuple, tuple]:
    """The Megatron MLP's exact-arithmetic inputs and their shardings (batch over x, d_ff over y)."""
    rng = np.random.default_rng(0)
    args = (rng.integers(-2, 3, (batch, d)).astype(np.float32), rng.integers(-2, 3, (d, d_ff)).astype(np.float32),
            rng.integers(-2, 3, (d_ff, d)).astype(np.float32))
    return args, (P("x", None), P(None, "y"), P("y", None))


def simshard_mlp(batch: int, d: int, d_ff: int, backend: str, mesh_shape=(2, 4), per_process: int | None = None,
                 busy_poll: bool | None = None, runtime_env=RUNTIME_ENV) -> dict:
    """Seconds per step, inputs resident (DeviceArrays in, outputs left on the devices) and end to
    end (numpy in, numpy out); on Ray, ``per_process`` devices per process (None: the default for
    this machine, ``auto_per_process``)."""
    mesh = ss.Mesh({"x": mesh_shape[0], "y": mesh_shape[1]})
    args, specs = mlp_inputs(batch, d, d_ff)
    if backend == "ray":
        from simshard.runtime.ray.driver.mesh import RayMesh  # ray only when the Ray backend is chosen

        devices = RayMesh(mesh, devices_per_process=per_process, busy_poll=busy_poll, runtime_env=runtime_env).start()
    else:
        devices = LocalMesh(mesh)
    try:
        step = devices.compile(mlp, *args, in_shardings=specs, timeout=120.0)
        resident = devices.put(args, specs)
        got = step(*resident).outputs
        timed = {"resident": best(lambda: step(*resident).arrays),
                 "end_to_end": best(lambda: step(*args).outputs, 3),
                 "used": routes_used(step(*resident).execution, devices) if backend == "ray" else "local"}
        # checked after the timing: numpy's product here wakes its BLAS threads, one per core,
        # which spin for a while after it (OpenBLAS: about a tenth of a second) on the cores the
        # device processes run on (measured here: the pair's small step 1.3 to 1.4 ms in that
        # window, 0.7 ms without it; docs/performance.md)
        assert np.array_equal(got, mlp(*args)), "simshard's MLP differs from numpy"
        return timed
    finally:
        if backend == "ray":
            devices.close()


def permute_chain(ids: tuple, pairs, steps: int) -> SpmdProgram:
    """A chain of ``steps`` tiny collective-permutes over devices ``ids``, step ``k`` moving a
    4-element array along ``pairs(k)``."""
    return SpmdProgram(None, tuple(Schedule(d, (0,), tuple(
        CollectivePermute(k + 1, f"%{k} permute", src=k, dst=k + 1, pairs=pairs(k), shape=(4,), dtype="float32",
                          axes=("x",)) for k in range(steps)), (steps,)) for d in ids), (), ())


def hop_pairs(k: int) -> tuple:
    """Step ``k`` of one message in flight: devices 0 and 1 pass the array back and forth."""
    return ((k % 2, 1 - k % 2),)


def _permute_chain(ids: tuple, pairs, steps: int, backend: str, per_process: int, busy_poll: bool | None = None,
                   runtime_env=RUNTIME_ENV) -> float:
    """Seconds per step of ``permute_chain(ids, pairs, steps)``."""
    spmd = permute_chain(ids, pairs, steps)
    inputs = {d: [np.full(4, d, np.float32)] for d in ids}
    if backend == "local":
        return best(lambda: run_local(spmd, inputs, timeout=60.0), 3) / steps
    from simshard.runtime.ray.driver.mesh import RayMesh  # ray only when the Ray backend is chosen

    with RayMesh(devices=ids, devices_per_process=per_process, busy_poll=busy_poll, runtime_env=runtime_env) as rm:
        key = rm.load(spmd, timeout=60.0)
        USED[(len(ids), per_process)] = routes_used(rm.execute(key, spmd, inputs), rm)
        return best(lambda: rm.execute(key, spmd, inputs), 3) / steps


def simshard_message_round(backend: str, per_process: int = 1, rounds: int = 200) -> float:
    """Seconds per round of a chain of tiny collective-permutes around 8 devices (8 messages at once)."""
    ring = tuple((i, (i + 1) % 8) for i in range(8))
    return _permute_chain(tuple(range(8)), lambda k: ring, rounds, backend, per_process)


def simshard_message_hop(backend: str, per_process: int = 1, hops: int = 2000, busy_poll: bool | None = None,
                         runtime_env=RUNTIME_ENV) -> float:
    """Seconds per message with one message in flight: devices 0 and 1 pass a tiny array back and
    forth, so each hop is one message's whole latency."""
    return _permute_chain((0, 1), hop_pairs, hops, backend, per_process, busy_poll, runtime_env)


# -- peers, each in a subprocess -----------------------------------------------------------------


def run_peer(python: str, peer: str, task: dict, timeout: float = 900.0) -> dict:
    """``peer`` ("torch" or "jax") running ``task`` in a subprocess of ``python``: its numbers,
    or ``{"error": why}`` (not installed, failed, timed out)."""
    env = dict(os.environ)
    if peer == "jax":
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        env["JAX_PLATFORMS"] = "cpu"
    try:
        p = subprocess.run([python, str(PEER_WORKERS), peer, json.dumps(task)], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        errors = [ln for ln in p.stderr.splitlines() if "Error" in ln] or p.stderr.strip().splitlines() or ["no output"]
        last = errors[-1]
        return {"error": "not installed" if "No module named" in last else last[:200]}
    return json.loads(lines[-1])


def measure(args) -> dict:
    quick = args.quick
    load_start = os.getloadavg()[0]  # report only runs that start below 1: the machines are shared
    small, large = (1 << 14, 1 << 16) if quick else (1 << 20, 64 << 20)
    peer = args.peer_python
    rows = []

    def add(work, ray=None, local=None, torch=None, jax=None, used=None):
        rows.append({"work": work, "simshard ray": ray, "simshard local": local, "torch gloo": torch, "jax": jax,
                     "ray ran on": used})
        # each row as it is measured (stderr): a run cut off by a time limit still says what it had
        print(row_line(rows[-1]), file=sys.stderr, flush=True)

    # the machine's speed drifts by up to 2x over minutes: for the collectives and the Megatron
    # MLP, every side runs in each of several rounds, one after another, and keeps its best
    sizes = {"small": small, "large": large}
    for nbytes in [sizes[k] for k in args.sizes] if "collectives" in args.rows else ():
        label = f"{nbytes / (1 << 20):g} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
        rounds = [(simshard_collectives(nbytes, "ray"), simshard_collectives(nbytes, "local"),
                   run_peer(peer, "torch", {"what": "collectives", "nbytes": nbytes}),
                   run_peer(peer, "jax", {"what": "collectives", "nbytes": nbytes}))
                  for _ in range(args.rounds)]
        r, loc, t, j = (best_of(side) for side in zip(*rounds))
        for kind in KINDS:
            add(f"{label} {kind.replace('_', '-')}, 8 ranks", r[kind], loc[kind], t.get(kind, t.get("error")),
                j.get(kind, j.get("error")), r["used"])
    for scale in ("small", "large") if "mlp" in args.rows else ():
        shapes = mlp_shapes(scale, quick)
        rounds = [(run_peer(peer, "torch", {"what": "mlp", "mesh": [2, 4], "shapes": shapes}),
                   simshard_mlp(*shapes, "ray", per_process=1), simshard_mlp(*shapes, "ray"),
                   simshard_mlp(*shapes, "local"), run_peer(peer, "jax", {"what": "mlp", "mesh": [2, 4], "shapes": shapes}))
                  for _ in range(args.rounds)]
        t, r1, r, loc, j = (best_of(side) for side in zip(*rounds))
        name = "x".join(map(str, shapes))
        add(f"Megatron MLP {name}, 2x4, inputs on the devices, Ray as this machine's defaults give it", r["resident"],
            loc["resident"], t.get("resident", t.get("error")), j.get("resident", j.get("error")), r["used"])
        add(f"Megatron MLP {name}, 2x4, inputs on the devices, Ray with 1 device per process", r1["resident"], None,
            t.get("resident", t.get("error")), j.get("resident", j.get("error")), r1["used"])
        add(f"Megatron MLP {name}, 2x4, end to end (put, run, gather)", r["end_to_end"], loc["end_to_end"],
            used=r["used"])
    if "pair" in args.rows:
        add_pair(args, add)
    if "tiny" in args.rows:
        add_tiny(args, add)
    if "loops" in args.rows:
        add_loops(args, add)
    per_message, per_message_used = measure_messages(peer, add, args.rounds) if "messages" in args.rows else ({}, {})
    return {"rows": rows, "per_message_round": per_message, "per_message_used": per_message_used, "date": datetime.date.today().isoformat(),
            "load": load_start, "load_end": os.getloadavg()[0], "quick": quick, "rounds": args.rounds,
            "cores": os.cpu_count()}


def add_pair(args, add) -> None:
    """The pair rows (module docstring), each side's best of ``--rounds`` rounds."""
    peer, nbytes = args.peer_python, (1 << 14 if args.quick else 1 << 20)
    for shapes in ((16, 32, 64),) if args.quick else ((64, 256, 512), (256, 1024, 2048)):
        rounds = [(simshard_mlp(*shapes, "ray", mesh_shape=(1, 2), per_process=1),
                   run_peer(peer, "torch", {"what": "mlp", "mesh": [1, 2], "shapes": shapes, "world": 2}))
                  for _ in range(args.rounds)]
        r, t = (best_of(side) for side in zip(*rounds))
        add(f"Megatron MLP {'x'.join(map(str, shapes))}, 1x2, inputs on the devices, 2 processes (gloo: 2 ranks)",
            r["resident"], None, t.get("resident", t.get("error")), used=r["used"])
    rounds = [(simshard_collectives(nbytes, "ray", n=2, kinds=("all_reduce",)),
               run_peer(peer, "torch", {"what": "collectives", "nbytes": nbytes, "world": 2})) for _ in range(args.rounds)]
    r, t = (best_of(side) for side in zip(*rounds))
    add(f"{nbytes >> 10} KiB all-reduce, 2 ranks" if nbytes < 1 << 20 else "1 MiB all-reduce, 2 ranks", r["all_reduce"],
        None, t.get("all_reduce", t.get("error")), used=r["used"])


LOOPS = {"Ray's default loop": None, "uvloop hidden": HIDE_UVLOOP}  # the "loops" rows' two sides


def add_loops(args, add) -> None:
    """The pair's rows on each event loop Ray may give the device processes (uvloop's wherever it
    is installed, and asyncio's with it hidden), both in each round, one after the other, each
    side's best kept: issue 33's "with uvloop installed, the same figures as without it" read
    off one run (two runs minutes apart drift more than the difference looked for)."""
    shapes = (16, 32, 64) if args.quick else (64, 256, 512)
    nbytes = 1 << 14 if args.quick else 1 << 20
    rounds = [{loop: ({"hop": simshard_message_hop("ray", 1, runtime_env=env), "hop used": USED.get((2, 1))},
                      simshard_mlp(*shapes, "ray", mesh_shape=(1, 2), per_process=1, runtime_env=env),
                      simshard_collectives(nbytes, "ray", n=2, kinds=("all_reduce",), runtime_env=env))
               for loop, env in LOOPS.items()} for _ in range(args.rounds)]
    for loop in LOOPS:
        hop, step, reduce = (best_of(side) for side in zip(*(r[loop] for r in rounds)))
        add(f"one message in flight (2 devices, time per message), {loop}", hop["hop"], used=hop["hop used"])
        add(f"Megatron MLP {'x'.join(map(str, shapes))}, 1x2, inputs on the devices, 2 processes, {loop}",
            step["resident"], used=step["used"])
        add(f"{nbytes >> 10} KiB all-reduce, 2 ranks, {loop}" if nbytes < 1 << 20 else f"1 MiB all-reduce, 2 ranks, {loop}",
            reduce["all_reduce"], used=reduce["used"])


def add_tiny(args, add) -> None:
    """The tiny MLP step on 64 devices, 8 per process (torch's 64 processes with ``--torch64``)."""
    quick, peer = args.quick, args.peer_python
    tiny = (64, 64, 256) if not quick else (16, 16, 32)
    r = simshard_mlp(*tiny, "ray", mesh_shape=(8, 8), per_process=8)
    loc = simshard_mlp(*tiny, "local", mesh_shape=(8, 8))
    t = run_peer(peer, "torch", {"what": "mlp", "mesh": [8, 8], "shapes": tiny, "world": 64}) if args.torch64 else \
        {"error": "not run (--torch64)"}
    add(f"tiny MLP step {'x'.join(map(str, tiny))}, 64 devices (8x8; Ray: 8 per process)", r["resident"],
        loc["resident"], t.get("resident", t.get("error")), used=r["used"])


def measure_messages(peer: str, add, rounds: int = 1) -> tuple[dict, dict]:
    """The one-message rows (simshard on Ray and torch each run once in each of ``rounds``, one
    after the other, each side's best kept, as the collectives'), and the per-message rounds
    (time per round, and what each ran on)."""
    sides = [({"hop": simshard_message_hop("ray", 1)}, run_peer(peer, "torch", {"what": "hop", "hops": 2000, "world": 2}))
             for _ in range(rounds)]
    r, t = (best_of(side) for side in zip(*sides))
    add("one message in flight (2 devices, time per message)", r["hop"],
        simshard_message_hop("local"), t.get("hop", t.get("error")), used=USED.get((2, 1)))
    add("one message in flight, both devices in one Ray process", simshard_message_hop("ray", 2), used=USED.get((2, 2)))
    per_message = {"ray (1 device per process)": simshard_message_round("ray", 1),
                   "ray (8 devices in 1 process)": simshard_message_round("ray", 8),
                   "local": simshard_message_round("local")}
    per_message_used = {"ray (1 device per process)": USED.get((8, 1)), "ray (8 devices in 1 process)": USED.get((8, 8))}
    return per_message, per_message_used


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes")
    ap.add_argument("--peer-python", default=sys.executable, help="the interpreter with torch / jax installed")
    ap.add_argument("--torch64", action="store_true", help="also run torch with 64 gloo processes (slow to start)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the collectives, Megatron MLP and one-message rows, every side in each (best kept)")
    ap.add_argument("--write", metavar="FILE", help="write the table into FILE between the peers.py markers")
    ap.add_argument("--json", metavar="FILE", help="write the rows as JSON too (benchmarks/goals.py reads them)")
    ap.add_argument("--sizes", nargs="+", choices=("small", "large"), default=["small", "large"],
                    help="the collectives rows' sizes: small (1 MiB; --quick: 16 KiB), large (64 MiB; 64 KiB)")
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS),
                    help="which rows to run (default: all): " + ", ".join(ROWS))
    args = ap.parse_args(argv)
    result = measure(args)
    text = table(result)
    print(text)
    if args.write:
        write_section(Path(args.write), text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
