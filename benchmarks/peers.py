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
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # imported from elsewhere (the smoke test): simshard_sides, peer_workers
    sys.path.insert(0, str(HERE))

from simshard.runtime.ray.driver.groups import auto_per_process  # noqa: E402  (no ray until a mesh starts)

from peer_workers import span_times  # noqa: E402,F401  (a worker's spans to one figure; the smoke test reads it here)
from peer_table import row_line, table, write_section  # noqa: E402  (the smoke test reads them here too)
# simshard's measurements (the smoke tests, hop_path.py and step_anatomy.py read them here too)
from simshard_sides import (HIDE_UVLOOP, KINDS, USED, best, hop_pairs, mlp, mlp_inputs, permute_chain,  # noqa: E402,F401
                            routes_used, simshard_collectives, simshard_message_hop, simshard_message_round,
                            simshard_mlp)

PEER_WORKERS = HERE / "peer_workers.py"  # what a peer runs, in a subprocess of --peer-python
ROWS = ("collectives", "mlp", "pair", "tiny", "messages", "loops")  # the groups of rows, each run or not (--rows)
SIDES = ("ray", "local", "torch", "jax")  # who is measured in the collectives and Megatron rows (--sides)


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
    peer = args.peer_python
    rows = []

    def add(work, ray=None, local=None, torch=None, jax=None, used=None):
        rows.append({"work": work, "simshard ray": ray, "simshard local": local, "torch gloo": torch, "jax": jax,
                     "ray ran on": used})
        # each row as it is measured (stderr): a run cut off by a time limit still says what it had
        print(row_line(rows[-1]), file=sys.stderr, flush=True)

    sides = Sides(args.sides, peer)
    if "collectives" in args.rows:
        add_collectives(args, add, sides)
    if "mlp" in args.rows:
        add_mlp(args, add, sides)
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


def add_collectives(args, add, sides: "Sides") -> None:
    """The collectives rows: each kind over 8 ranks at each size asked for. The machine's speed
    drifts by up to 2x over minutes: every side runs in each of several rounds, one after
    another, and keeps its best (the Megatron rows likewise)."""
    small, large = (1 << 14, 1 << 16) if args.quick else (1 << 20, 64 << 20)
    for nbytes in [{"small": small, "large": large}[k] for k in args.sizes]:
        label = f"{nbytes / (1 << 20):g} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
        task = {"what": "collectives", "nbytes": nbytes}
        rounds = [(sides.simshard("ray", simshard_collectives, nbytes, "ray"),
                   sides.simshard("local", simshard_collectives, nbytes, "local"),
                   sides.peer("torch", task), sides.peer("jax", task)) for _ in range(args.rounds)]
        r, loc, t, j = (best_of(side) for side in zip(*rounds))
        for kind in KINDS:
            add(f"{label} {kind.replace('_', '-')}, 8 ranks", r.get(kind), loc.get(kind), t.get(kind, t.get("error")),
                j.get(kind, j.get("error")), r.get("used"))


def add_mlp(args, add, sides: "Sides") -> None:
    """The Megatron MLP rows on 2x4, small and large. One device per process is this machine's
    default where it has the cores (``auto_per_process``): then the two Ray rows are one
    configuration, measured once."""
    default_is_one = auto_per_process(8) == 1
    for scale in ("small", "large"):
        shapes = mlp_shapes(scale, args.quick)
        task = {"what": "mlp", "mesh": [2, 4], "shapes": shapes}
        rounds = [(sides.peer("torch", task), sides.simshard("ray", simshard_mlp, *shapes, "ray", per_process=1),
                   {} if default_is_one else sides.simshard("ray", simshard_mlp, *shapes, "ray"),
                   sides.simshard("local", simshard_mlp, *shapes, "local"), sides.peer("jax", task))
                  for _ in range(args.rounds)]
        t, r1, r, loc, j = (best_of(side) for side in zip(*rounds))
        r = r1 if default_is_one else r
        name, torch, jax = "x".join(map(str, shapes)), t.get("resident", t.get("error")), j.get("resident", j.get("error"))
        add(f"Megatron MLP {name}, 2x4, inputs on the devices, Ray as this machine's defaults give it", r.get("resident"),
            loc.get("resident"), torch, jax, r.get("used"))
        add(f"Megatron MLP {name}, 2x4, inputs on the devices, Ray with 1 device per process", r1.get("resident"), None,
            torch, jax, r1.get("used"))
        add(f"Megatron MLP {name}, 2x4, end to end (put, run, gather)", r.get("end_to_end"), loc.get("end_to_end"),
            used=r.get("used"))


class Sides:
    """Who is measured (``--sides``): a side left out gives no figure (simshard's) or says it was
    not run (a peer's), so that a lease of a many-core machine spends its minutes on the goals'
    sides (simshard on Ray, torch gloo) in more rounds."""

    def __init__(self, chosen, peer_python: str):
        self.chosen, self.peer_python = frozenset(chosen), peer_python

    def simshard(self, side: str, measure_fn, *args, **kwargs) -> dict:
        return measure_fn(*args, **kwargs) if side in self.chosen else {}

    def peer(self, side: str, task: dict) -> dict:
        return run_peer(self.peer_python, side, task) if side in self.chosen else {"error": "not run (--sides)"}


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
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES),
                    help="who the collectives and Megatron rows measure (default: all): " + ", ".join(SIDES))
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
