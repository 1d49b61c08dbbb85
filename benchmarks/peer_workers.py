"""The peers of ``benchmarks/peers.py``, each run in a subprocess of ``--peer-python``:
``python peer_workers.py PEER TASK`` prints PEER's numbers for TASK (JSON) as one JSON line.

PEER is ``torch`` (torch.distributed over gloo, one spawned process per rank) or ``jax`` (8 host
CPU devices). The interpreter may live in its own environment, with torch and JAX but without
simshard: this file imports neither simshard nor anything beside it, and each peer only in its
own worker.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from functools import partial

import numpy as np


def torch_rank(rank: int, world: int, port: int, task: dict, out) -> None:
    """One gloo rank of ``task`` (a spawned process): its trials' spans, put on ``out``. The
    task's function gets ``torch`` and ``torch.distributed`` from here, imported in the worker only."""
    import torch  # a peer, installed or not: only in its worker process
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    work = {"hop": torch_hop, "collectives": torch_collectives}.get(task["what"], torch_mlp)
    out.put(work(torch, dist, rank, world, task, partial(timed_spans, dist)))
    dist.destroy_process_group()


def timed_spans(dist, fn, trials=10, warmup=5) -> list[tuple[float, float]]:
    """Each trial's (start, end) on this rank's wall clock, after ``warmup`` untimed calls (as
    ``peers.best`` does for simshard), the ranks lined up by a barrier before each:
    ``torch_worker`` takes the span from the first rank's start to the last rank's end (the
    ranks leave a barrier at different times, so one rank's own interval between barriers can
    miss work others did before it left)."""
    for _ in range(warmup):
        fn()
    spans = []
    for _ in range(trials):
        dist.barrier()
        t0 = time.time()
        fn()
        spans.append((t0, time.time()))
    dist.barrier()
    return spans


def torch_hop(torch, dist, rank: int, world: int, task: dict, timed) -> dict:
    """Ranks 0 and 1 pass a tiny tensor back and forth: one message in flight."""
    buf, hops = torch.zeros(4), task["hops"]

    def chain():
        for k in range(hops):
            if rank == k % 2:
                dist.send(buf, 1 - rank)
            else:
                dist.recv(buf, 1 - rank)

    return {"hop": timed(chain, 3), "per": {"hop": hops}}


def torch_collectives(torch, dist, rank: int, world: int, task: dict, timed) -> dict:
    """All-gather, all-reduce, reduce-scatter and all-to-all of ``task["nbytes"]`` over the ranks."""
    res = {}
    n = task["nbytes"] // 4
    full = torch.ones(n)
    shard = torch.ones(n // world)
    gathered = [torch.empty(n // world) for _ in range(world)]
    res["all_gather"] = timed(lambda: dist.all_gather(gathered, shard))
    res["all_reduce"] = timed(lambda: dist.all_reduce(full))
    try:
        outs = torch.empty(n // world)
        res["reduce_scatter"] = timed(lambda: dist.reduce_scatter_tensor(outs, full))
    except Exception as e:  # gloo has no reduce-scatter in some releases
        res["reduce_scatter"] = f"unsupported: {str(e).splitlines()[0][:80]}"
    out_a2a = torch.empty(n // world)
    try:
        res["all_to_all"] = timed(lambda: dist.all_to_all_single(out_a2a, shard))
    except Exception as e:
        res["all_to_all"] = f"unsupported: {str(e).splitlines()[0][:80]}"
    return res


def torch_mlp(torch, dist, rank: int, world: int, task: dict, timed) -> dict:
    """The Megatron MLP on a [mx, my] grid: batch over x, d_ff over y, all-reduce over y."""
    mx, my = task["mesh"]
    batch, d, d_ff = task["shapes"]
    groups = [dist.new_group([r * my + c for c in range(my)]) for r in range(mx)]
    group = groups[rank // my]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2, 3, (batch // mx, d), generator=g).float()
    w1 = torch.randint(-2, 3, (d, d_ff // my), generator=g).float()
    w2 = torch.randint(-2, 3, (d_ff // my, d), generator=g).float()

    def step():
        y = torch.relu(x @ w1) @ w2
        dist.all_reduce(y, group=group)
        return y

    return {"resident": timed(step)}


def torch_worker(task: dict) -> dict:
    import torch.multiprocessing as mp  # a peer, installed or not: only in its worker process

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = task.get("world", 8)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=torch_rank, args=(r, world, port, task, q)) for r in range(world)]
    for p in procs:
        p.start()
    ranks = [q.get(timeout=600) for _ in range(world)]
    for p in procs:
        p.join(60)
    return span_times(ranks)


def span_times(ranks: list[dict]) -> dict:
    """Per key, the best trial's span from the first rank's start to the last rank's end (divided
    by ``per[key]`` where a trial is several operations); a text (unsupported) as it is."""
    out = {}
    per = ranks[0].get("per", {})
    for key, first in ranks[0].items():
        if key == "per":
            continue
        if isinstance(first, str):
            out[key] = first
            continue
        trials = zip(*(r[key] for r in ranks))
        out[key] = min(max(e for _, e in t) - min(s for s, _ in t) for t in trials) / per.get(key, 1)
    return out


def jax_worker(task: dict) -> dict:
    import jax  # a peer, installed or not: only in its worker process
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devs = np.array(jax.devices()[:8])
    res = {}

    def timed(fn, *args, trials=10, warmup=5):  # as the other sides: ``timed_spans``, ``peers.best``
        for _ in range(warmup):
            jax.block_until_ready(fn(*args))
        b = float("inf")
        for _ in range(trials):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            b = min(b, time.perf_counter() - t0)
        return b

    if task["what"] == "collectives":
        shard_map = getattr(jax, "shard_map", None)
        no_check = {"check_vma": False}  # the all-gathered result is replicated: say so, not checked
        if shard_map is None:
            from jax.experimental.shard_map import shard_map  # older JAX: shard_map not yet in jax

            no_check = {"check_rep": False}

        mesh = Mesh(devs, ("d",))
        n = task["nbytes"] // 4
        rows = n // 256
        sharded = jax.device_put(jnp.ones((rows, 256)), NamedSharding(mesh, P("d", None)))
        partial = jax.device_put(jnp.ones((8 * rows, 256)), NamedSharding(mesh, P("d", None)))  # a whole [rows, 256] per device
        ops = {
            "all_gather": (lambda a: jax.lax.all_gather(a, "d", tiled=True), sharded, P("d", None), P()),
            "reduce_scatter": (lambda a: jax.lax.psum_scatter(a, "d", tiled=True), partial, P("d", None), P("d", None)),
            "all_reduce": (lambda a: jax.lax.psum(a, "d"), partial, P("d", None), P()),
            "all_to_all": (lambda a: jax.lax.all_to_all(a, "d", 1, 1, tiled=True), sharded, P("d", None), P("d", None)),
        }
        for kind, (body, arr, ins, outs) in ops.items():
            f = jax.jit(shard_map(body, mesh=mesh, in_specs=ins, out_specs=outs, **no_check))
            res[kind] = timed(f, arr)
    else:
        mx, my = task["mesh"]
        batch, d, d_ff = task["shapes"]
        mesh = Mesh(devs[: mx * my].reshape(mx, my), ("x", "y"))
        rng = np.random.default_rng(0)
        put = lambda a, s: jax.device_put(jnp.asarray(a), NamedSharding(mesh, s))  # noqa: E731
        x = put(rng.integers(-2, 3, (batch, d)).astype(np.float32), P("x", None))
        w1 = put(rng.integers(-2, 3, (d, d_ff)).astype(np.float32), P(None, "y"))
        w2 = put(rng.integers(-2, 3, (d_ff, d)).astype(np.float32), P("y", None))
        f = jax.jit(lambda x, w1, w2: jnp.maximum(x @ w1, 0) @ w2, out_shardings=NamedSharding(mesh, P("x", None)))
        res["resident"] = timed(f, x, w1, w2)
    return res


def main(argv=None) -> None:
    peer, task = argv if argv is not None else sys.argv[1:]
    print(json.dumps((torch_worker if peer == "torch" else jax_worker)(json.loads(task))))


if __name__ == "__main__":
    main()
