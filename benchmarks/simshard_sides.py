"""simshard's side of ``peers.py``: each measurement a function returning seconds (or a dict of
them) and what the run took (``routes_used``), on Ray or the local backend. ``peers.py`` puts
them in its rows beside torch gloo and JAX; ``hop_path.py`` and ``step_anatomy.py`` run the
same programs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

import simshard as ss
from simshard import P
from simshard.runtime import LocalMesh, run_local
from simshard.spmd import CollectivePermute, Schedule, SpmdProgram

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # imported from elsewhere (the smoke test): collective_programs
    sys.path.insert(0, str(HERE))

from collective_programs import collective_case, collective_seconds  # noqa: E402

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
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
            spmd, inputs = collective_case(kind, ids, nbytes, reps)
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
    text = (f"{execution.describe_routes()}; polling {mesh.polling(mesh.devices[0])}{stepped_aside(mesh)}; "
            f"{len(mesh.groups)} processes on {mesh.event_loop(mesh.devices[0])}")
    if ("ray" in execution.messages or "ray" in execution.routes) and execution.data_plane == "sockets":
        text = "FALLBACK to Ray calls: " + text
        print(f"warning: {text}", file=sys.stderr)
    return text


def stepped_aside(mesh) -> str:
    """How often the mesh's polling processes stopped polling for a while because another task
    wanted their core (``wire/preemption``), in words; nothing where none polls or none did."""
    if mesh.polling(mesh.devices[0]) == "off":
        return ""
    import ray

    times = sum(ray.get([mesh.call(g[0], "stepped_aside") for g in mesh.groups]))
    return f" (stepped aside {times} times over the mesh's runs)" if times else ""


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
