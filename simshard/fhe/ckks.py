"""A convolution or matmul layer on a ciphertext mesh, priced in CKKS operations.

The mesh is the seed's three axes: ``x`` splits the output channels (each ciphertext computes
its own output block: an element-wise shard), ``y`` the input channels (each computes a partial
sum, added across ``y``: a reduce shard), ``z`` the rows (spatial). Every ciphertext gets the same
block shape, so one kernel plan (kernels.py) prices every device; the layer's total is that plan
on every device, plus the ciphertext additions of the reduction over ``y``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..errors import ShardingError
from .kernels import KernelPlan, best_plan
from .opcount import OpCount
from .packing import ChannelPacking
from .params import CKKS

AXES = ("x", "y", "z")


@dataclass(frozen=True)
class ConvLayer:
    """A convolution ``input[C, H, W] * kernel[F, C, k, k]`` (stride 1, same padding; a 1x1 kernel
    is a per-pixel matmul)."""

    channels_in: int
    height: int
    width: int
    channels_out: int
    kernel: int = 1

    @classmethod
    def from_shapes(cls, input_shape, kernel_shape) -> "ConvLayer":
        """From ``[C, H, W]`` (or NCHW with N=1) and ``[F, C, k, k]``."""
        x = tuple(input_shape)[-3:]
        f, c, kh, kw = tuple(kernel_shape)
        if c != x[0]:
            raise ValueError(f"kernel {list(kernel_shape)} expects {c} input channels, the input has {x[0]}")
        if kh != kw:
            raise ValueError(f"only square kernels are modelled, got {kh}x{kw}")
        return cls(x[0], x[1], x[2], f, kh)

    @classmethod
    def matmul(cls, rows: int, k: int, n: int) -> "ConvLayer":
        """``X[rows, k] @ W[k, n]`` with ``X`` encrypted: a 1x1 convolution with ``rows`` pixels."""
        return cls(k, rows, 1, n, 1)

    def __str__(self) -> str:
        return (f"input[{self.channels_in},{self.height},{self.width}] x "
                f"kernel[{self.channels_out},{self.channels_in},{self.kernel},{self.kernel}]")


@dataclass(frozen=True)
class CipherMesh:
    """The seed's DIM3 mesh of ciphertexts: ``x`` output channels, ``y`` input channels, ``z`` rows."""

    x: int = 1
    y: int = 1
    z: int = 1

    def __post_init__(self):
        for a in AXES:
            n = getattr(self, a)
            if not isinstance(n, int) or n < 1:
                raise ShardingError("invalid-mesh", f"ciphertext mesh axis {a} must be a positive size, got {n!r}",
                                    axis=a)

    @classmethod
    def of(cls, mesh) -> "CipherMesh":
        """From a ``CipherMesh``, a mapping ``{"x": 2, "y": 8}`` or an ``ss.Mesh`` with axes x, y, z."""
        if isinstance(mesh, CipherMesh):
            return mesh
        shape = dict(mesh.shape) if hasattr(mesh, "shape") and not isinstance(mesh, Mapping) else dict(mesh)
        extra = set(shape) - set(AXES)
        if extra:
            raise ShardingError("invalid-mesh", f"a ciphertext mesh has axes x, y, z; got {sorted(extra)}")
        return cls(**{a: int(shape.get(a, 1)) for a in AXES})

    @property
    def size(self) -> int:
        return self.x * self.y * self.z

    def as_dict(self) -> dict:
        return {a: getattr(self, a) for a in AXES}

    def __str__(self) -> str:
        return "{" + ",".join(str(getattr(self, a)) for a in AXES) + "}"


@dataclass(frozen=True)
class Block:
    """What one ciphertext holds and computes: channel counts and rows of its input and output."""

    channels_in: int
    channels_out: int
    rows: int
    width: int

    @property
    def pixels(self) -> int:
        return self.rows * self.width


def block(layer: ConvLayer, mesh: CipherMesh) -> Block:
    """The block of ``layer`` on every ciphertext of ``mesh``; a ShardingError when an axis does
    not divide its dim evenly (the ciphertexts would hold different blocks)."""
    for axis, dim, size in (("x", "output channels", layer.channels_out), ("y", "input channels", layer.channels_in),
                            ("z", "rows", layer.height)):
        n = getattr(mesh, axis)
        if size % n:
            raise ShardingError("uneven", f"mesh axis {axis}={n} does not divide the {size} {dim} of {layer}", axis=axis)
    return Block(layer.channels_in // mesh.y, layer.channels_out // mesh.x, layer.height // mesh.z, layer.width)


@dataclass(frozen=True)
class LayerCost:
    """A layer on a ciphertext mesh: the plan every ciphertext runs, per-ciphertext and total counts."""

    layer: ConvLayer
    mesh: CipherMesh
    ckks: CKKS
    block: Block
    input: ChannelPacking  # one ciphertext's input block
    output: ChannelPacking  # one ciphertext's output block
    plan: KernelPlan
    per_device: OpCount
    total: OpCount

    @property
    def devices(self) -> int:
        return self.mesh.size

    @property
    def utilization(self) -> float:
        """Input data slots over the slots of every ciphertext."""
        return self.input.utilization

    def formula(self) -> str:
        """Total rotations as the seed writes them: ``devices*(per-device formula)``."""
        return f"{self.devices}*({self.plan.formula()})"


def conv_cost(layer: ConvLayer, mesh, ckks: CKKS) -> LayerCost:
    """Price ``layer`` on ``mesh`` (a CipherMesh, a mapping or an ss.Mesh) under ``ckks``.

    Every ciphertext packs its input block by channels (packing.py) and runs the cheapest kernel
    plan within the level budget (kernels.py); the partial outputs are added across ``y``. A
    k x k kernel (stride 1, same padding) runs the plan once per tap, on whole rows (``z=1``).
    """
    m = CipherMesh.of(mesh)
    if layer.kernel != 1 and m.z != 1:
        raise ShardingError("halo-not-modelled", f"{layer} on mesh {m}: a {layer.kernel}x{layer.kernel} kernel on rows "
                            "split over z reads its neighbours' rows (a halo between ciphertexts), which the CKKS "
                            "count does not model; keep z=1", axis="z")
    b = block(layer, m)
    inp = ChannelPacking(b.channels_in, b.pixels, ckks.slots)
    out = ChannelPacking(b.channels_out, b.pixels, ckks.slots)
    width = max(inp.width, out.width)
    if width > ckks.slots:
        raise ShardingError("does-not-fit", f"{layer} on mesh {m}: a block of {max(b.channels_in, b.channels_out)} "
                            f"channels x {b.pixels} pixels packs into {width} slots, more than the {ckks.slots} "
                            f"of a ciphertext ({ckks}); shard it over more ciphertexts")
    plan = best_plan(inp.channel_slots, out.channel_slots, width, ckks.slots, ckks, taps=layer.kernel ** 2)
    per = plan.cost
    reduce_adds = OpCount(ct_adds=(m.y - 1) * m.x * m.z)
    return LayerCost(layer, m, ckks, b, inp, out, plan, per, per.times(m.size).beside(reduce_adds))
