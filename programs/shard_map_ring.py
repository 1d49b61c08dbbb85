"""An all-reduce written by hand in a manual region (``shard_map``) against the built-in ``psum``.

Every device holds one [k, m] block of a [g*k, m] array (``in_specs=P(axes)``) and ends with the
sum of all g blocks (``out_specs=P()``: replicated, which the run checks device by device).

* ``ring``: the bandwidth-optimal ring all-reduce, as NCCL runs it. The block is cut into g
  chunks; g-1 ``ppermute`` steps to the next device on the ring reduce-scatter them (each device
  adds the chunk it receives to its own copy and passes the sum on), then g-1 more all-gather the
  reduced chunks. Each device sends 2(g-1) chunks of N/g bytes: 2(g-1)/g * N, the all-reduce
  minimum.
* ``naive_ring``: the whole block passed around the ring g-1 times, each device adding what
  arrives: (g-1) * N per device, (g/2)x the minimum.
* ``psum``: the built-in collective: one all-reduce instruction, 2(g-1)/g * N per device.

Summation order differs. ``psum`` adds the blocks in ascending mesh coordinate, the order
numpy's ``sum(axis=0)`` uses; the ring adds each chunk starting from a different device; the
naive ring adds on every device in its own order. With integer inputs (``ss.exact_inputs``)
every order gives the same bits. With arbitrary floats the ring is still replicated (each chunk
is reduced once, then copied) but may differ from numpy in the last bit, and the naive ring's
devices disagree, which ``out_specs=P()`` catches as a ``ReplicaMismatchError``.

The ring axis is every mesh axis (a 1-D ring over all devices, in mesh order); the default mesh is
``{x: 8}``. Blocks need k divisible by g: the [64, 16] input serves any power-of-two ring up to 8.
The body calls ``ppermute``, which runs only inside a trace; runs verify against ``block_sum``
for the mesh's device count, the same result in plain numpy (``reference_for``).
"""

from __future__ import annotations

import simshard as ss
from simshard import P
from simshard.manual import axis_index, ppermute, psum
from simshard.programs import ProgramDef, Strategy

ROWS, COLS = 64, 16


def block_sum(a, g):
    """The result in plain numpy: the sum of the g row blocks of ``a``."""
    return a.reshape(g, a.shape[0] // g, a.shape[1]).sum(axis=0)


def reference(a):
    """``block_sum`` on the default mesh's 8 devices (what every strategy computes there)."""
    return block_sum(a, 8)


def _ring(g):
    return [(j, (j + 1) % g) for j in range(g)]


def ring_allreduce(block, axes, g):
    """Reduce-scatter then all-gather around the ring, one chunk per step."""
    k, m = block.shape
    c = k // g
    chunks = block.reshape(g, c, m)
    i = axis_index(axes)

    def at(t):  # chunk t (a traced index) as a [1, c, m] slice
        return ss.lax.dynamic_slice(chunks, (t, 0, 0), (1, c, m))

    for s in range(g - 1):  # after step s, device i holds the sum of s+2 blocks' chunk (i-s-1) mod g
        got = ppermute(at((i + g - s) % g), axes, _ring(g))
        dst = (i + g - s - 1) % g
        chunks = ss.lax.dynamic_update_slice(chunks, at(dst) + got, (dst, 0, 0))
    for s in range(g - 1):  # device i owns the full sum of chunk (i+1) mod g; pass the sums on
        got = ppermute(at((i + 1 + g - s) % g), axes, _ring(g))
        chunks = ss.lax.dynamic_update_slice(chunks, got, ((i + g - s) % g, 0, 0))
    return chunks.reshape(k, m)


def naive_ring_allreduce(block, axes, g):
    """Forward the whole block g-1 times, adding each arrival."""
    total, passing = block, block
    for _ in range(g - 1):
        passing = ppermute(passing, axes, _ring(g))
        total = total + passing
    return total


def psum_allreduce(block, axes, g):
    return psum(block, axes)


def _build(body, check_rep: bool = True):
    """``check_rep=False`` for the rings: their ppermutes replicate the result, which no static rule
    can see (as in JAX); the run still checks it device by device."""

    def build(mesh):
        axes, g = tuple(mesh.axis_names), mesh.size
        f = ss.shard_map(lambda b: body(b, axes, g), mesh=mesh, in_specs=(P(axes, None),), out_specs=P(),
                         check_rep=check_rep)
        return ss.jit(f, in_shardings=(P(axes, None),), mesh=mesh)

    return build


def inputs():
    return (ss.exact_inputs((ROWS, COLS), seed=0),)


PROGRAM = ProgramDef(
    name="shard_map_ring",
    about="all-reduce of per-device blocks in a shard_map: a ppermute ring vs the built-in psum",
    fn=reference,
    inputs=inputs,
    mesh={"x": 8},
    reference_for=lambda mesh: (lambda a: block_sum(a, mesh.size)),
    strategies=(
        Strategy("ring", "bandwidth-optimal ring all-reduce: 2(g-1) ppermute steps of one chunk (N/g)",
                 build=_build(ring_allreduce, check_rep=False)),
        Strategy("naive_ring", "the whole block forwarded g-1 times: (g-1) x N per device",
                 build=_build(naive_ring_allreduce, check_rep=False)),
        Strategy("psum", "the built-in psum: one all-reduce, 2(g-1)/g x N per device", build=_build(psum_allreduce)),
    ),
)
