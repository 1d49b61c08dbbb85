"""Seed 003's convolutions sharded over a 3-D ciphertext mesh ``{x, y, z}``, run bitwise.

A device is a ciphertext with a fixed number of slots. Sharding the input channels (the
convolution's contraction) is a *reduce shard*: each ciphertext computes a partial sum of the
output, combined by a reduction over that axis. Sharding the output channels is an *element-wise
shard*: each ciphertext computes its own output block, no reduction. The seed's cases, one
strategy each (every strategy carries its own mesh and, where the layer differs, its own inputs):

* ``y4``: input[64,7,7] * kernel[16,64,1,1] on mesh {x=1, y=4, z=1}, N=2k (1024 slots): block
  ``input[i*16:(i+1)*16]``, ``kernel[16, i*16:(i+1)*16]``, ``output[16,7,7] @ mesh[y=i]``: input
  channels a reduce shard over y, the output all-reduced over y.
* ``x2y8``: the same layer on {x=2, y=8, z=1}, a block of 512 slots: ``input[j*8:(j+1)*8]``,
  ``kernel[i*8:(i+1)*8, j*8:(j+1)*8]``, ``output[i*8:(i+1)*8] @ mesh[x=i, y=j]``: output channels
  element-wise over x, input channels reduced over y.
* ``x4``: the seed's "non-shard input" case, input[16,7,7] * kernel[64,16,1,1] on {x=4, y=1, z=1}:
  the input replicated, output channels element-wise over x: no communication.
* ``resnet50_y4`` / ``resnet50_x2y8``: ResNet-50's 1x1 layer input[2048,7,7] * kernel[512,2048,1,1]
  (N = 64k) on {1,4,1} with blocks of 32k slots and on {2,8,1} with 16k, sharded like ``y4`` / ``x2y8``.
* ``z4_3x3`` / ``z4_3x3_s2``: a 3x3 layer input[16,28,28] * kernel[16,16,3,3] (padding 1, stride 1
  or 2) with its rows split over z=4, as the seed's indexer loop runs ``z``: each ciphertext
  computes its output rows from its input rows plus the halo rows its windows read, received from
  its neighbours (collective-permutes; docs/planner.md, "Halo exchange"). ``z4_3x3_gather`` runs
  the stride-1 layer with the input gathered whole on every ciphertext first, the path before
  halo exchange: ``simshard compare conv`` shows both byte counts side by side.

Specs are written in the seed's ArraySharding form (per dim the mesh axis that splits it, -1 for
none) and passed as its text, ``{-1, y, -1, -1}``. ``ss.nn.conv2d`` is NCHW by OIHW, so the arrays carry a batch dim of 1. ``report()``
prints, per strategy, the verification, which factors are element-wise and which reduce shards
(read from the propagated program's factor rules), the collectives the schedules ran, and the
slot utilization of the ciphertext arrays (input and output; the kernel is plaintext), and the
layer's CKKS cost on the strategy's ciphertext mesh (``simshard.fhe.conv_cost``, docs/fhe.md):
``PROGRAM.cost`` ranks the strategies of one layer by CKKS rotations in ``simshard compare conv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from rich.console import Console
from rich.table import Table

import simshard as ss
from simshard.errors import ShardingError
from simshard.fhe import CKKS, ConvLayer, LayerCost, conv_cost
from simshard.ops.factors import REDUCTION
from simshard.ops.registry import get_op
from simshard.programs import ProgramCost, ProgramDef, Strategy

REDUCING = ("all_reduce", "reduce_scatter")


def conv(x, w):
    return ss.nn.conv2d(x, w)


@dataclass(frozen=True)
class Case:
    """One seed layer on one ciphertext mesh: shapes (NCHW, OIHW), ArraySharding specs, CKKS ring
    degree, and for a k x k kernel its stride and zero padding; ``gather`` makes every ciphertext
    take the whole input first (the path before halo exchange, for comparison)."""

    name: str
    about: str
    mesh: dict
    x_shape: tuple
    w_shape: tuple
    x_spec: tuple  # per dim: a mesh axis or -1
    w_spec: tuple
    out_spec: tuple
    ring_degree: int  # CKKS N: a ciphertext holds N/2 slots
    stride: tuple = (1, 1)
    padding: tuple = ((0, 0), (0, 0))
    gather: bool = False

    @property
    def slots(self) -> int:
        return self.ring_degree // 2

    @property
    def out_shape(self) -> tuple:
        (n, _, h, w), (o, _, kh, kw) = self.x_shape, self.w_shape
        (sh, sw), ((t, b), (l, r)) = self.stride, self.padding
        return (n, o, (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1)


SEED = ((1, 64, 7, 7), (16, 64, 1, 1))  # with N = 2k: 1024 slots
RESNET50 = ((1, 2048, 7, 7), (512, 2048, 1, 1))  # with N = 64k: 32k slots
Y, XY = ((-1, "y", -1, -1), (-1, "y", -1, -1), (-1, -1, -1, -1)), ((-1, "y", -1, -1), ("x", "y", -1, -1), (-1, "x", -1, -1))
# a 3x3 layer with its rows (H) split over z: input, kernel (whole) and output specs
CONV3 = ((1, 16, 28, 28), (16, 16, 3, 3))
Z = ((-1, -1, "z", -1), (-1, -1, -1, -1), (-1, -1, "z", -1))
Z4 = {"x": 1, "y": 1, "z": 4}

CASES = (
    Case("y4", "input channels a reduce shard over y: partial outputs all-reduced over y",
         {"x": 1, "y": 4, "z": 1}, *SEED, *Y, ring_degree=2048),
    Case("x2y8", "output channels element-wise over x, input channels a reduce shard over y",
         {"x": 2, "y": 8, "z": 1}, *SEED, *XY, ring_degree=2048),
    Case("x4", "input replicated (not sharded), output channels element-wise over x: no reduction",
         {"x": 4, "y": 1, "z": 1}, (1, 16, 7, 7), (64, 16, 1, 1),
         (-1, -1, -1, -1), ("x", -1, -1, -1), (-1, "x", -1, -1), ring_degree=2048),
    Case("resnet50_y4", "ResNet-50 1x1 layer, input channels a reduce shard over y",
         {"x": 1, "y": 4, "z": 1}, *RESNET50, *Y, ring_degree=65536),
    Case("resnet50_x2y8", "ResNet-50 1x1 layer, output channels element-wise over x, input channels reduced over y",
         {"x": 2, "y": 8, "z": 1}, *RESNET50, *XY, ring_degree=65536),
    Case("z4_3x3", "3x3 conv (padding 1), rows over z computed blockwise: each ciphertext receives the halo "
         "rows its block reads from its neighbours (collective-permutes)",
         Z4, *CONV3, *Z, ring_degree=8192, padding=((1, 1), (1, 1))),
    Case("z4_3x3_s2", "the same conv with stride 2: output blocks of 4 rows read input rows 8k-1..8k+7 of "
         "blocks of 7, so each ciphertext's halo differs (1, 2, 3, 0 rows)",
         Z4, *CONV3, *Z, ring_degree=8192, stride=(2, 2), padding=((1, 1), (1, 1))),
    Case("z4_3x3_gather", "the z4_3x3 conv with the input gathered whole on every ciphertext first (the path "
         "before halo exchange), for comparison", Z4, *CONV3, *Z, ring_degree=8192, padding=((1, 1), (1, 1)),
         gather=True),
)


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def spec_text(spec) -> str:
    """The seed's ArraySharding as its text, ``{-1, y, -1, -1}``, which in/out_shardings accept
    (``Sharding.from_text``) on the strategy's mesh."""
    return "{" + ", ".join(str(a) for a in spec) + "}"


def case_inputs(c: Case) -> tuple:
    return tuple(ss.exact_inputs([c.x_shape, c.w_shape], seed=0))


def layer(c: Case, x, w):
    """Case ``c``'s convolution (its stride and padding) of ``x`` by ``w``."""
    return ss.nn.conv2d(x, w, stride=c.stride, padding=c.padding)


def _gathered(c: Case, x, w):
    """``layer`` with the input constrained whole (replicated) on every ciphertext first."""
    return layer(c, ss.with_sharding_constraint(x, ss.P()), w)


def _build(c: Case, mesh):
    """Case ``c``'s layer (stride, padding, gathered input) jitted with its specs on ``mesh``."""
    return ss.jit(partial(_gathered if c.gather else layer, c), in_shardings=(spec_text(c.x_spec), spec_text(c.w_spec)),
                  out_shardings=spec_text(c.out_spec), mesh=mesh)


def _strategy(c: Case) -> Strategy:
    if c.stride == (1, 1) and c.padding == ((0, 0), (0, 0)) and not c.gather:  # the program's own conv
        return Strategy(c.name, c.about, in_shardings=(spec_text(c.x_spec), spec_text(c.w_spec)),
                        out_shardings=spec_text(c.out_spec), mesh=c.mesh, inputs=partial(case_inputs, c))
    return Strategy(c.name, c.about, mesh=c.mesh, inputs=partial(case_inputs, c), build=partial(_build, c),
                    reference=partial(layer, c))


# -- what a run shows --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShardKind:
    """One sharded factor of one op: element-wise (pass-through) or reduce, and its mesh axes."""

    op: str
    factor: str
    size: int
    kind: str  # "element-wise" or "reduce"
    axes: tuple[str, ...]
    dims: str  # where the factor lives, e.g. "x[1], w[1]"


def shard_kinds(program) -> list[ShardKind]:
    """Per op of a propagated program, its sharded factors: a pass-through factor split over mesh
    axes is an element-wise shard (each device computes its own block), a reduction factor split
    over axes is a reduce shard (devices hold partial sums to combine over those axes)."""
    out = []
    for e in program.eqns:
        ins = [v.aval for v in e.inputs]
        outs = [v.aval for v in e.outputs]
        rule = get_op(e.op).factor_rule(ins, outs, **e.kw)
        names = [(program.label(v) if hasattr(v, "id") else None) or repr(v) for v in e.inputs + e.outputs]
        found: dict[str, list] = {}
        for t, (v, dims) in enumerate(zip(e.inputs + e.outputs, rule.tensors)):
            s = program.shardings.get(v) if hasattr(v, "id") else None
            if s is None:
                continue
            for d, fs in enumerate(dims):
                axes = tuple(a.short() for a in s.dims[d].axes) if d < len(s.dims) else ()
                if len(fs) == 1 and axes:
                    entry = found.setdefault(fs[0], [axes, []])
                    entry[1].append(f"{names[t]}[{d}]")
        for f, (axes, where) in found.items():
            kind = "reduce" if rule.kind(f) == REDUCTION else "element-wise"
            out.append(ShardKind(e.op, f, rule.sizes[f], kind, axes, ", ".join(where)))
    return out


def reductions(res) -> list[tuple[str, tuple[str, ...]]]:
    """The reducing collectives of the partitioned schedules: (kind, mesh axes), once per instruction."""
    seen = {}
    for r in res.comm.records:
        if r.kind in REDUCING:
            seen[r.instr] = (r.kind, r.axes)
    return list(seen.values())


def halo_bytes(res) -> int:
    """Bytes the run received in collective-permutes: a row split's halo exchange."""
    return sum(r.bytes_received for r in res.comm.records if r.kind == "collective_permute")


@dataclass(frozen=True)
class SlotUse:
    """How full one ciphertext array's ciphertexts are."""

    array: str
    shape: tuple
    slots: int
    filled: int  # the most slots any one ciphertext fills
    ratio: float  # filled slots over the slots of every ciphertext
    fits: bool


def utilization(c: Case) -> list[SlotUse]:
    """Slot utilization of the input and output ciphertexts of case ``c`` on its own mesh."""
    mesh = ss.Mesh(c.mesh)
    rows = []
    for name, shape, spec in (("input", c.x_shape, c.x_spec), ("output", c.out_shape, c.out_spec)):
        u = ss.utilization(ss.fhe_spec(mesh, spec), shape, slots=c.slots)
        rows.append(SlotUse(name, shape, c.slots, max(u.filled.values()), u.ratio, u.fits))
    return rows


def ckks_cost(c: Case, mesh=None) -> LayerCost:
    """The CKKS operations of case ``c``'s layer on ``mesh`` (None: its own ciphertext mesh;
    docs/fhe.md)."""
    return conv_cost(ConvLayer.from_shapes(c.x_shape, c.w_shape), c.mesh if mesh is None else mesh,
                     CKKS(c.ring_degree))


def program_cost(strategy: Strategy, mesh) -> ProgramCost | None:
    """``PROGRAM.cost``: rank a strategy among those of the same layer and N by total rotations,
    then levels, plaintext multiplies and rescales; None on a mesh that is no ciphertext mesh for
    the layer (axes other than x, y, z, or blocks that do not fit) and for a k x k kernel on rows
    split over z, whose halo the CKKS model does not price (docs/fhe.md)."""
    try:
        cost = ckks_cost(case(strategy.name), mesh)
    except (ShardingError, ValueError):
        return None
    t = cost.total
    return ProgramCost(
        model="CKKS", group=f"{cost.layer}, {cost.ckks}",
        key=(t.rotations, t.levels, t.pt_mults, t.rescales),
        values=(("rotations", t.rotations), ("per ciphertext", cost.plan.formula()), ("levels", t.levels),
                ("pt mults", t.pt_mults), ("slot use", f"{cost.utilization:.0%}")))


def report(strategies=None, console=None, backend=None) -> dict:
    """Run each strategy (all by default) and print its verification, element-wise vs reduce
    shards, communication and slot utilization; returns strategy -> RunResult."""
    console = console or Console()
    results = {}
    for name in strategies or PROGRAM.strategy_names:
        c = case(name)
        res = PROGRAM.run(name, backend=backend)
        results[name] = res
        console.rule(f"[bold]{name}: conv2d x{list(c.x_shape)} * w{list(c.w_shape)} on mesh {c.mesh}")
        verdict = "bitwise identical to plain numpy" if res.verify.bitwise else f"DIFFERS\n{res.verify}"
        console.print(f"verification: {verdict}")
        t = Table(title="element-wise vs reduce shards (factor rule of each op)", title_justify="left")
        for col in ("op", "factor", "size", "shard", "mesh axes", "in"):
            t.add_column(col)
        for k in shard_kinds(res.program):
            t.add_row(k.op, k.factor, str(k.size), k.kind, ",".join(k.axes), k.dims)
        console.print(t)
        red = reductions(res)
        console.print("reductions in the schedules: " + (", ".join(f"{k} over {','.join(a)}" for k, a in red) or "none"))
        console.print(res.comm.table("kind"))
        u = Table(title=f"ciphertext slot utilization ({c.slots} slots per ciphertext)", title_justify="left")
        for col in ("array", "shape", "filled", "utilization", "fits"):
            u.add_column(col, justify="right")
        for r in utilization(c):
            u.add_row(r.array, str(list(r.shape)), str(r.filled), f"{r.ratio:.1%}", "yes" if r.fits else "NO")
        console.print(u)
        halo = halo_bytes(res)
        if halo:
            console.print(f"halo exchange: {halo} B received in collective-permutes")
        try:
            k = ckks_cost(c)
        except ValueError as e:  # a k x k kernel on rows split over z: its halo is not priced
            console.print(f"CKKS: not priced ({e})")
            continue
        console.print(f"CKKS ({k.ckks}): {k.plan.describe()}; rotations {k.formula()} = {k.total.rotations}, "
                      f"{k.per_device.levels} level(s), {k.total.pt_mults} plaintext multiplies, "
                      f"{k.total.rescales} rescales")
    return results


PROGRAM = ProgramDef(
    name="conv",
    about="seed 003's convolutions on ciphertext meshes: element-wise vs reduce shards, halo exchange of split rows, slot utilization",
    fn=conv,
    inputs=partial(case_inputs, CASES[0]),
    mesh=CASES[0].mesh,
    strategies=tuple(_strategy(c) for c in CASES),
    extras={"cases": CASES, "report": report, "utilization": utilization, "shard_kinds": shard_kinds,
            "reductions": reductions, "ckks_cost": ckks_cost, "halo_bytes": halo_bytes},
    cost=program_cost,
)


if __name__ == "__main__":
    report()
