"""The collective library, written once: async functions from one device's point of view over a
``Channel`` (a transport, the device's id and the instruction's message key and tag).

Every backend runs these same functions; only the transport differs (in-memory queues for the
local backend, Ray object transfers between actors for the Ray backend).

Canonical reduction order. Every reduction combines the contributions left to right in group
order (``reduce_in_order``); the group is listed in ascending mesh coordinate, so results are the
same bits whichever algorithm, backend or run produced them. Another algorithm must compute the
same association ``((x[g0] op x[g1]) op x[g2]) ...`` for every element (float addition commutes,
so ``acc op x`` and ``x op acc`` agree, but it does not associate).

Three algorithms (``ALGORITHMS``, chosen by ``run_collective(..., algorithm=...)``):

* ``direct``: each member sends each piece straight to the member that needs it, in one step
  (two for all-reduce); per device the bytes equal the analytic minimum
  (``simshard.report.analytic_min_bytes``): all-gather, reduce-scatter and all-to-all move
  ``(g-1)/g`` of the group's data, all-reduce ``2(g-1)/g`` (a reduce-scatter then an all-gather).
* ``ring``: every message goes to the next member of the ring. A textbook ring reduce-scatter
  starts chunk ``c``'s sum at member ``c+1`` and so breaks the canonical order; the ring here
  is order-keeping instead: every chunk's running partial travels ``g0 -> g1 -> ... -> g[-1]``
  (a pipelined chain, each member combining its contribution on the right), then
  - all-reduce: ``g[-1]`` holds the whole result and pipelines it on round the ring
    (``g[-1] -> g0 -> ... -> g[-2]``), chunk by chunk: ``2(g-1)N`` bytes over the group, the
    same total as direct, but uneven per device;
  - reduce-scatter: ``g[-1]`` sends each finished chunk to its owner, the one non-neighbour
    message: ``(g-1)N (1 + 1/g)`` bytes over the group (direct: ``(g-1)N``);
  - all-gather has no arithmetic: a plain ring, ``g-1`` steps, each forwarding the block it got
    last, the same bytes as direct.
  All-to-all and collective-permute send personalised pieces, which a ring could only forward at
  a cost in bytes: they run direct under either algorithm.
* ``oneshot`` (all-reduce only; every other collective runs direct): each member sends its whole
  buffer to every other member in one step and reduces all of them itself, in group order. Half
  the messages and one step instead of two, for ``(g-1)N`` bytes per device instead of
  ``2(g-1)N/g``: the usual choice for small, latency-bound all-reduces (the report shows the
  extra bytes against the analytic minimum).

Protocol rules every algorithm follows (the local transport's deadlock detection relies on them):
a device finishes the sends of a step before it receives; it receives one message at a time; a
message is keyed ``(instruction id, step)`` and carries the sender's tag, which the receiver
checks against its own (two devices running different collectives under one id is an error, not
garbage). A message whose size both sides know to be zero (an empty reduce-scatter or all-reduce
chunk) is not sent; all-gather and all-to-all blocks always are (their receivers learn the sizes
from them).
"""

from .blocks import reduce_in_order
from .channel import ALGORITHMS, Channel, check_algorithm
from .direct import all_gather, all_reduce, all_to_all, broadcast, collective_permute, reduce_scatter
from .ring import oneshot_all_reduce, ring_all_gather, ring_all_reduce, ring_reduce_scatter
from .run import RUNS, SIGNATURES, run_collective, signature

__all__ = [
    "ALGORITHMS", "Channel", "RUNS", "SIGNATURES", "all_gather", "all_reduce", "all_to_all", "broadcast",
    "check_algorithm", "collective_permute", "oneshot_all_reduce", "reduce_in_order", "reduce_scatter",
    "ring_all_gather", "ring_all_reduce", "ring_reduce_scatter", "run_collective", "signature",
]
