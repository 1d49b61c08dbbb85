"""What a machine charges for the things a message between device processes is made of: a system
call, a round trip on a raw Unix socket between two processes, a turn of an event loop, and a
unit of Python. Read beside ``peers.py``: the same simshard hop costs a few system calls and some
tens of microseconds of Python, so a machine whose system calls are dear (a sandboxed kernel such
as gVisor's) shows it there first, and gloo (C++) pays for far fewer.

``--polling`` also runs simshard's one-message hop and the Megatron MLP steps with busy polling
forced on and off (alternated), to check the per-machine default (``polling.should_spin``), and
the driver's share of the small step (``driver_share``); ``--beside N`` runs N busy processes
beside the mesh meanwhile (another job on the machine: ``wire/preemption``).

    python benchmarks/machine_costs.py [--polling [--beside N]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path


def per_call(fn, n: int, trials: int = 3) -> float:
    """Seconds per call of ``fn`` (best of ``trials`` runs of ``n`` calls)."""
    best = float("inf")
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / n


def socket_hop(hops: int = 20000) -> float:
    """Seconds per one-way message between two processes on a Unix socket pair, one byte at a time
    in flight (blocking reads: the receiver sleeps in the kernel between messages)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the echoing side
        a.close()
        for _ in range(hops):
            b.sendall(b.recv(1))
        os._exit(0)
    b.close()
    t = time.perf_counter()
    for _ in range(hops):
        a.sendall(b"x")
        a.recv(1)
    dt = time.perf_counter() - t
    os.waitpid(pid, 0)
    a.close()
    return dt / (2 * hops)


def loop_turn(kind: str, turns: int = 100000) -> float | None:
    """Seconds per turn of an event loop of ``kind`` (a chain of call_soon callbacks); None where
    that loop is not installed."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            return None
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    done = loop.create_future()
    left = [turns]

    def step():
        left[0] -= 1
        if left[0]:
            loop.call_soon(step)
        else:
            done.set_result(None)

    loop.call_soon(step)
    t = time.perf_counter()
    loop.run_until_complete(done)
    dt = time.perf_counter() - t
    loop.close()
    return dt / turns


def python_unit(n: int = 2_000_000) -> float:
    """Seconds per iteration of a plain Python loop (one add, one compare): the machine's speed at
    the interpreter's work."""
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return (time.perf_counter() - t) / n


def costs() -> dict:
    ep = select.epoll()
    r, w = os.pipe()
    ep.register(r, select.EPOLLIN)
    out = {"getppid (a system call that does nothing)": per_call(os.getppid, 200000),
           "epoll_wait, nothing ready, no wait": per_call(lambda: ep.poll(0), 100000),
           "Unix socket, one message one way between two processes": socket_hop(),
           "asyncio event loop, one turn": loop_turn("asyncio"),
           "uvloop event loop, one turn": loop_turn("uvloop"),
           "plain Python loop, one iteration": python_unit()}
    ep.close()
    os.close(r)
    os.close(w)
    return out


def polling_ab(rounds: int = 3, beside: int = 0) -> list[str]:
    """simshard's hop, the MLP pair step (64x256x512, 2 processes) and the Megatron MLP steps of
    the peers' goals (128x256x1024 and 512x1024x4096 on 2x4, this machine's devices per process:
    ``auto_per_process``, the default the peers' rows measure), polling forced on and off,
    alternated ``rounds`` times; the best of each, and how often the polling processes stepped
    aside (``wire/preemption``). ``beside``: that many busy processes (a Python loop each) run
    beside the mesh throughout, as another job on the machine would."""
    sys.path.insert(0, str(Path(__file__).parent))
    import peers  # noqa: E402  (beside this file)

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(beside)]
    best: dict[tuple[str, bool], float] = {}
    used: dict[str, str] = {}
    try:
        for _ in range(rounds):
            for poll in (True, False):
                pair = peers.simshard_mlp(64, 256, 512, "ray", mesh_shape=(1, 2), per_process=1, busy_poll=poll)
                small = peers.simshard_mlp(128, 256, 1024, "ray", busy_poll=poll)
                large = peers.simshard_mlp(512, 1024, 4096, "ray", busy_poll=poll)
                got = {"one message in flight": (peers.simshard_message_hop("ray", 1, busy_poll=poll),
                                                 peers.USED.get((2, 1))),
                       "MLP 64x256x512 pair step": (pair["resident"], pair["used"]),
                       "MLP 128x256x1024 2x4 step": (small["resident"], small["used"]),
                       "MLP 512x1024x4096 2x4 step": (large["resident"], large["used"])}
                for key, (v, how) in got.items():
                    best[(key, poll)] = min(best.get((key, poll), float("inf")), v)
                    if poll:
                        used[key] = how.split("; ", 2)[-1]  # how the processes polled, and stepped aside
    finally:
        for p in busy:
            p.kill()
    return [f"{key}: polling on {best[(key, True)] * 1e6:.1f} us, off {best[(key, False)] * 1e6:.1f} us "
            f"(polling on: {used[key]})" for key in dict.fromkeys(k for k, _ in best)]


def driver_share(steps: int = 1000) -> str:
    """The pair's small MLP step (64x256x512, 2 processes, inputs on the devices): wall time per
    step and the driver's own CPU per step (its process's time: its Python, pickling, the system
    calls that send each call and read each answer), the part of a step that gloo's ranks lack."""
    sys.path.insert(0, str(Path(__file__).parent))
    import peers  # noqa: E402  (beside this file)
    import simshard as ss  # noqa: E402
    from simshard.runtime.ray.driver.mesh import RayMesh  # noqa: E402

    args, specs = peers.mlp_inputs(64, 256, 512)
    with RayMesh(ss.Mesh({"x": 1, "y": 2}), devices_per_process=1) as devices:
        step = devices.compile(peers.mlp, *args, in_shardings=specs, timeout=120.0)
        resident = devices.put(args, specs)
        for _ in range(50):
            step(*resident).arrays
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(steps):
            step(*resident).arrays
        cpu, wall = (time.process_time() - cpu) / steps, (time.perf_counter() - wall) / steps
    return f"MLP 64x256x512 pair step: {wall * 1e6:.0f} us a step, the driver's CPU {cpu * 1e6:.0f} us of it"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polling", action="store_true", help="also simshard's hop and MLP pair step, polling on and off")
    ap.add_argument("--beside", type=int, default=0, metavar="N",
                    help="with --polling: N busy processes beside the mesh throughout (another job on the machine)")
    args = ap.parse_args(argv)
    print(f"{os.cpu_count()} cores, {sys.version.split()[0]}, {os.uname().release}", flush=True)
    for what, seconds in costs().items():
        print(f"{what}: " + ("not installed" if seconds is None else f"{seconds * 1e6:.3f} us"), flush=True)
    if args.polling:
        print(f"{args.beside} busy processes beside the mesh", flush=True)
        for line in polling_ab(beside=args.beside):
            print(line, flush=True)
        print(driver_share(), flush=True)


if __name__ == "__main__":
    main()
