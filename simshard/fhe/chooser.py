"""Choosing the ciphertext mesh of a layer: every mesh whose blocks fit, ranked by a policy.

The default is the seed's own ranking: of its channel strategies (``split_rows=False``), the one
with fewer rotations in total (``"rotations"``). It keeps utilisation-first's full blocks where
they win (the seed's 1x1 layer at N=2k: {1,4,1}, 128 rotations against 144 on {2,8,1}) and
takes the replication-driven half-full blocks where those win (ResNet-50's at N=64k: {2,8,1},
784 against 4096).

``"utilization"`` is the seed's utilisation-first partitioning: blocks as close to the slot count
as possible (the fewest ciphertexts for the input), ties to fewer rotations, then fewer
ciphertexts. It fills ciphertexts, and so pays two-rotation rolls (the "rotation flush").
``"rotations"`` takes the fewest rotations in total, ties to higher utilisation, then fewer
ciphertexts. ``max_ciphertexts`` bounds the mesh and ``split_rows=False`` keeps ``z`` at 1 (the
seed's strategies split channels only), under either policy.
"""

from __future__ import annotations

from ..errors import ShardingError
from .ckks import CipherMesh, ConvLayer, LayerCost, conv_cost
from .params import CKKS

POLICIES = ("utilization", "rotations")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _key(policy: str, c: LayerCost) -> tuple:
    t = c.total
    if policy == "utilization":
        return (-c.utilization, t.rotations, c.devices, t.levels, t.pt_mults)
    return (t.rotations, -c.utilization, c.devices, t.levels, t.pt_mults)


def rank_meshes(layer: ConvLayer, ckks: CKKS, policy: str = "rotations",
                max_ciphertexts: int | None = None, split_rows: bool = False) -> tuple[LayerCost, ...]:
    """Every mesh ``{x | F, y | C, z | H}`` on which ``layer`` fits ``ckks``'s ciphertexts within
    the level budget, cheapest first under ``policy``."""
    if policy not in POLICIES:
        raise ValueError(f"unknown mesh policy {policy!r}; choose one of {', '.join(POLICIES)}")
    found = []
    for x in _divisors(layer.channels_out):
        for y in _divisors(layer.channels_in):
            for z in _divisors(layer.height) if split_rows else [1]:
                m = CipherMesh(x, y, z)
                if max_ciphertexts is not None and m.size > max_ciphertexts:
                    continue
                try:
                    found.append(conv_cost(layer, m, ckks))
                except (ShardingError, ValueError):
                    continue  # does not fit, or needs more levels than the budget
    return tuple(sorted(found, key=lambda c: _key(policy, c)))


def choose_mesh(layer: ConvLayer, ckks: CKKS, policy: str = "rotations",
                max_ciphertexts: int | None = None, split_rows: bool = False) -> LayerCost:
    """The mesh ``policy`` ranks first for ``layer`` under ``ckks`` (its cost, mesh included)."""
    ranked = rank_meshes(layer, ckks, policy, max_ciphertexts, split_rows)
    if not ranked:
        bound = "" if max_ciphertexts is None else f" of at most {max_ciphertexts} ciphertexts"
        raise ShardingError("does-not-fit", f"{layer} fits no ciphertext mesh{bound} under {ckks} "
                            f"with a level budget of {ckks.level_budget}")
    return ranked[0]
