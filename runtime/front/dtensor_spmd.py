"""``run_per_rank``: torch's per-rank DTensor code, run for every rank by one controller.

A PyTorch user writes DTensor code once and every rank runs it: ``DTensor.from_local(my_shard,
mesh, [Shard(0)])`` takes this rank's shard, ``d.to_local()`` gives it back. ``run_per_rank(fn,
mesh)`` runs ``fn`` once per rank, each in its own thread inside ``with rank(r):``; the threads
meet at every ``from_local`` (every rank's shard makes one DTensor) and at every op on DTensors
(run once on the devices, its result shared: ``eager/rendezvous``), as torch's ranks meet at
their collectives. A rank that raises, or makes other calls than the others, ends every rank's
wait with an error naming it, within ``timeout`` seconds of the last meeting.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from simshard.sharding.mesh import MeshView

from ..eager.hosts import host_of
from ..eager.rendezvous import Member, Rendezvous, RendezvousError, join, leave
from .dtensor_build import rank


def run_per_rank(fn: Callable[..., Any], device_mesh, *args, timeout: float = 60.0, **kwargs) -> list:
    """``fn(*args, **kwargs)`` run as every rank of ``device_mesh`` runs it; each rank's result, in rank order."""
    host = host_of(device_mesh.parent if isinstance(device_mesh, MeshView) else device_mesh)
    ranks = list(host.devices)
    meeting = Rendezvous(ranks, timeout)
    results: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}

    def play(r: int) -> None:
        token = join(Member(meeting, r))
        try:
            with rank(r):
                results[r] = fn(*args, **kwargs)
            meeting.finish(r)
        except BaseException as e:  # noqa: BLE001 -- re-raised below, in the caller's thread
            errors[r] = e
            meeting.fail(RendezvousError(f"rank {r} raised {type(e).__name__}: {e}"))
        finally:
            leave(token)

    threads = [threading.Thread(target=play, args=(r,), name=f"simshard-rank-{r}", daemon=True) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        own = [r for r in ranks if r in errors and not isinstance(errors[r], RendezvousError)]
        first = own[0] if own else min(errors)
        raise errors[first]
    return [results[r] for r in ranks]


__all__ = ["run_per_rank"]
