"""Seed 003's FHE example: a 1x1 convolution sharded over a ciphertext mesh, run bitwise.

    conv2d: input[64, 7, 7] * kernel[16, 64, 1, 1] -> output[16, 7, 7]      (N = 2k, S = 1024 slots)

* mesh {x=1, y=4, z=1}: block ``input[i*16:(i+1)*16]``, ``kernel[16, i*16:(i+1)*16]``,
  ``output[16, 7, 7] @ mesh[y=i]`` -- the input channels are a *reduce shard* over y: every device
  holds a partial sum of the whole output, combined by a reduction over y;
* mesh {x=2, y=8, z=1}: block ``input[j*8:(j+1)*8]``, ``kernel[i*8:(i+1)*8, j*8:(j+1)*8]``,
  ``output[i*8:(i+1)*8] @ mesh[x=i, y=j]`` -- output channels an *element-wise shard* over x,
  input channels a reduce shard over y;
* and the seed's "non-shard input" example, mesh {x=4, y=1, z=1}: input[16, 7, 7] replicated,
  kernel[64, 16, 1, 1] and output[64, 7, 7] split over x -- element-wise only, no reduction.

In the seed's ArraySharding form (``ss.fhe_spec``: per dim the mesh axis that splits it, -1 for
none). ``ss.nn.conv2d`` is NCHW by OIHW, so the arrays carry a batch dim of 1.

Run ``python programs/fhe_conv.py``: per mesh, the verification, which factors are element-wise
and which are reduce shards (read from the propagated program's factor rules), the collectives the
partitioned schedules run, and ciphertext-slot utilization.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import simshard as ss  # noqa: E402
from simshard.ops.factors import REDUCTION  # noqa: E402
from simshard.ops.registry import get_op  # noqa: E402


def _runtime_from_this_checkout() -> None:
    """``simshard.runtime`` is the top-level ``runtime/`` folder (an install maps it); from a
    checkout, load this checkout's copy (as tests/conftest.py does)."""
    init = ROOT / "runtime" / "__init__.py"
    if "simshard.runtime" in sys.modules or Path(ss.__file__).resolve().parent != ROOT / "simshard":
        return
    found = importlib.util.find_spec("simshard.runtime")
    if found is not None and found.origin and Path(found.origin).resolve() == init.resolve():
        return
    spec = importlib.util.spec_from_file_location("simshard.runtime", init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["simshard.runtime"] = module
    spec.loader.exec_module(module)
    ss.runtime = module


SLOTS = 1024  # N = 2k: 1k slots per ciphertext


@dataclass(frozen=True)
class Case:
    name: str
    mesh: dict
    x_shape: tuple  # NCHW
    w_shape: tuple  # OIHW
    x_spec: tuple  # ArraySharding of the input, per dim: axis or -1
    w_spec: tuple
    out_spec: tuple
    slots: tuple = (SLOTS,)


CASES = {
    "y4": Case("mesh {x=1, y=4, z=1}", {"x": 1, "y": 4, "z": 1}, (1, 64, 7, 7), (16, 64, 1, 1),
               (-1, "y", -1, -1), (-1, "y", -1, -1), (-1, -1, -1, -1)),
    "x2y8": Case("mesh {x=2, y=8, z=1}", {"x": 2, "y": 8, "z": 1}, (1, 64, 7, 7), (16, 64, 1, 1),
                 (-1, "y", -1, -1), ("x", "y", -1, -1), (-1, "x", -1, -1), slots=(SLOTS, 512)),
    "x4": Case("mesh {x=4, y=1, z=1} (input not sharded)", {"x": 4, "y": 1, "z": 1}, (1, 16, 7, 7), (64, 16, 1, 1),
               (-1, -1, -1, -1), ("x", -1, -1, -1), (-1, "x", -1, -1)),
}

REDUCING = ("all_reduce", "reduce_scatter")


def conv(x, w):
    return ss.nn.conv2d(x, w)


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


def run_case(key: str):
    """Run one case with ``ss.run``; returns (case, RunResult)."""
    _runtime_from_this_checkout()
    c = CASES[key]
    mesh = ss.Mesh(c.mesh)
    x, w = ss.exact_inputs([c.x_shape, c.w_shape], seed=0)
    spec = lambda s: ss.fhe_spec(mesh, s)  # noqa: E731
    res = ss.run(conv, x, w, mesh=mesh, in_shardings=(spec(c.x_spec), spec(c.w_spec)), out_shardings=spec(c.out_spec))
    return c, res


def reductions(res) -> list[tuple[str, tuple[str, ...]]]:
    """The reducing collectives of the partitioned schedules: (kind, mesh axes), once per instruction."""
    seen = {}
    for r in res.comm.records:
        if r.kind in REDUCING:
            seen[r.instr] = (r.kind, r.axes)
    return list(seen.values())


def utilization_rows(c: Case, res) -> list[tuple[str, int, int, float, bool]]:
    """(array, slots, filled per ciphertext, overall ratio, fits) for input, kernel, output."""
    mesh = res.spmd.mesh if hasattr(res.spmd, "mesh") else ss.Mesh(c.mesh)
    out_shape = res.program.outputs[0].aval.shape
    rows = []
    for slots in c.slots:
        for name, shape, s in (("input", c.x_shape, c.x_spec), ("kernel", c.w_shape, c.w_spec), ("output", out_shape, c.out_spec)):
            u = ss.utilization(ss.fhe_spec(mesh, s), shape, slots=slots)
            rows.append((name, slots, max(u.filled.values()), u.ratio, u.fits))
    return rows


def report(key: str, console=None):
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    c, res = run_case(key)
    console.rule(f"[bold]conv2d x{list(c.x_shape)} * w{list(c.w_shape)} on {c.name}")
    console.print(res.program.pretty())
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
    console.print(res.comm.table("axis"))

    u = Table(title="ciphertext slot utilization (filled slots per ciphertext)", title_justify="left")
    for col in ("array", "slots", "filled", "utilization", "fits"):
        u.add_column(col, justify="right")
    for name, slots, filled, ratio, fits in utilization_rows(c, res):
        u.add_row(name, str(slots), str(filled), f"{ratio:.1%}", "yes" if fits else "NO")
    console.print(u)
    return res


def main(argv=None) -> int:
    keys = list(argv) if argv else list(CASES)
    ok = True
    for key in keys:
        ok &= bool(report(key).verify.bitwise)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
