"""Generate tests/data/jax_explicit_matmul.json: ``jnp.matmul`` in explicit mode, recorded from real JAX.

Needs JAX (``pip install jax==0.10.2``; simshard does not depend on it). Run:
``python tests/tools/gen_jax_explicit_matmul.py N SEED OUT.json``. Each case has the format of
tests/data/jax_explicit_extra.json's (op, inputs with shape/dtype/spec, mesh, and the result's
``type_str`` or the error JAX raised). The cases are matmuls whose operands differ in rank or
in batch extent: a batch dim only one operand has (a weight shared by a batch, from either
side), extent-1 batch dims sharded or not, vectors, and ``out_sharding`` where jnp.matmul's
dot_general result needs a transpose into numpy's order (``out_sharding`` types the dot_general).
"""
import itertools, json, random, sys
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import PartitionSpec as P, AxisType, NamedSharding
jax.config.update('jax_num_cpu_devices', 8)
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
MESHES = [{"X": 2, "Y": 4}, {"X": 2, "Y": 2, "Z": 2}]


def spec_for(shape, names):
    """A random spec: each dim unsharded or on one or two unused axes that divide it."""
    out, used = [], set()
    for n in shape:
        opts = [None, None]
        for k in (1, 2):
            for combo in itertools.permutations(names, k):
                if not used & set(combo):
                    opts.append(list(combo) if k > 1 else combo[0])
        e = rng.choice(opts)
        out.append(e)
        used |= set([e] if isinstance(e, str) else e or [])
    return out


def as_p(spec):
    return P(*[tuple(e) if isinstance(e, list) else e for e in spec])


def record(op, inputs, mesh):
    names = tuple(mesh)
    m = jax.make_mesh(tuple(mesh.values()), names, axis_types=(AxisType.Explicit,) * len(names))
    c = {"id": None, "op": op, "inputs": inputs, "mesh": mesh}
    with jax.set_mesh(m):
        try:
            args = [jax.device_put(np.zeros(i["shape"], np.float32), NamedSharding(m, as_p(i["spec"]))) for i in inputs]
        except Exception:
            return None  # a spec that does not divide its dim: not a case
        body = eval(f"lambda a, b: {op}", {"jnp": jnp, "P": P})
        seen = {}
        def f(a, b):
            r = body(a, b); seen["t"] = str(jax.typeof(r)); return r
        try:
            jax.jit(f).trace(*args)
            c["result"] = {"type_str": seen["t"]}
        except Exception as e:
            c["result"] = {"error": (str(e).splitlines() or [""])[0], "error_type": type(e).__name__}
    return c


def shapes():
    """Operand shapes of ranks 1 to 4 whose batch dims broadcast (extent 1 or missing on one side)."""
    ra, rb = rng.randint(1, 4), rng.randint(1, 4)
    if ra < 3 and rb < 3:
        ra = 3
    m, k, n = (rng.choice([2, 4, 8]) for _ in range(3))
    nb = max(ra - 2, rb - 2)
    batch = [rng.choice([2, 4, 8]) for _ in range(nb)]
    ab = [rng.choice([b, b, 1]) for b in batch[nb - max(ra - 2, 0):]]
    bb = [rng.choice([b, b, 1]) for b in batch[nb - max(rb - 2, 0):]]
    return ([k] if ra == 1 else ab + [m, k]), ([k] if rb == 1 else bb + [k, n])


cases = []
N = int(sys.argv[1])
while len(cases) < N:
    mesh = rng.choice(MESHES); names = list(mesh)
    sa, sb = shapes()
    a = {"shape": sa, "dtype": "float32", "spec": spec_for(sa, names)}
    b = {"shape": sb, "dtype": "float32", "spec": spec_for(sb, names)}
    op = "a @ b"
    if rng.random() < 0.3:
        out_rank = len(np.broadcast_shapes(tuple(sa[:-2]) if len(sa) > 1 else (), tuple(sb[:-2]) if len(sb) > 1 else ())) \
            + (len(sa) > 1) + (len(sb) > 1)
        spec = [rng.choice([None, None] + names) for _ in range(out_rank)]
        spec = [e if e not in spec[:i] else None for i, e in enumerate(spec)]
        op = f"jnp.matmul(a, b, out_sharding=P(*{spec}))"
    c = record(op, [a, b], mesh)
    if c is None:
        continue
    c["id"] = f"matmul_{len(cases):03d}"
    cases.append(c)
json.dump({"jax_version": jax.__version__, "generator": "tests/tools/gen_jax_explicit_matmul.py " + " ".join(sys.argv[1:3]),
           "num_cases": len(cases), "cases": cases}, open(sys.argv[3], "w"), indent=0)
print(len(cases), sum("error" in c["result"] for c in cases))
