"""Generate tests/data/jax_explicit_extra.json: random explicit-sharding cases recorded from real JAX.

Needs JAX (``pip install jax==0.10.2 jaxlib==0.10.2`` in a separate venv; simshard does not depend on
it). Run: ``python tests/tools/gen_jax_explicit_extra.py N SEED OUT.json``. Each case has the same
shape as tests/data/jax_explicit.json's (op, inputs with shape/dtype/spec, mesh) and a result that is
either ``{"type_str": ...}`` (``str(jax.typeof(result))`` while tracing under jit) or
``{"error": first line, "error_type": class name}``. Ops drawn: reshapes, broadcasting binary ops,
matmul / lax.dot_general / einsum, reductions, cumsum, sort/argsort, transpose, concatenate, where,
slicing, pad, gather, dynamic_slice / dynamic_update_slice, .at[].set/add, reshard, creation with
out_sharding, auto_axes, softmax, on meshes {X:2,Y:4}, {X:2,Y:2,Z:2} and {X:8}, all axes Explicit.
"""
import itertools, json, random, sys
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import PartitionSpec as P, AxisType, NamedSharding
jax.config.update('jax_num_cpu_devices', 8)
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
MESHES = [{"X": 2, "Y": 4}, {"X": 2, "Y": 2, "Z": 2}, {"X": 8}]

def rand_spec(shape, names):
    spec, used = [], set()
    for n in shape:
        opts = [None]
        for k in (1, 2):
            for combo in itertools.permutations(names, k):
                if used & set(combo): continue
                opts.append(combo)
        e = rng.choice(opts + [None] * 2)
        spec.append(e)
        if e: used |= set(e)
    return [None if e is None else (list(e) if len(e) > 1 else e[0]) for e in spec]

def factorizations(n):
    return [d for d in range(1, n + 1) if n % d == 0]

def rand_shape(max_rank=3):
    return [rng.choice([1, 2, 4, 8, 16]) for _ in range(rng.randint(1, max_rank))]

def rand_reshape(shape):
    size = int(np.prod(shape))
    out, rest = [], size
    while rest > 1 and len(out) < 4:
        d = rng.choice(factorizations(rest))
        out.append(d); rest //= d
    if rest > 1: out.append(rest)
    if rng.random() < 0.3: out.insert(rng.randint(0, len(out)), 1)
    return out or [1]

def case(op, inputs, mesh):
    names = tuple(mesh)
    m = jax.make_mesh(tuple(mesh.values()), names, axis_types=(AxisType.Explicit,) * len(names))
    c = {"id": None, "op": op, "inputs": inputs, "mesh": mesh}
    with jax.set_mesh(m):
        try:
            args = [jax.device_put(np.zeros(i["shape"], np.float32), NamedSharding(m, P(*[tuple(e) if isinstance(e, list) else e for e in i["spec"]]))) for i in inputs]
        except Exception:
            return None
        body = eval(f"lambda {', '.join('abc'[:len(inputs)])}: {op}", {"jnp": jnp, "jax": jax, "lax": jax.lax, "P": P, "reshard": jax.sharding.reshard})
        try:
            traced = {}
            def f(*a):
                r = body(*a); traced["t"] = str(jax.typeof(r)); return r
            jax.jit(f).trace(*args)
            c["result"] = {"type_str": traced["t"]}
        except Exception as e:
            c["result"] = {"error": (str(e).splitlines() or [""])[0], "error_type": type(e).__name__}
    return c

cases = []
N = int(sys.argv[1])
while len(cases) < N:
    mesh = rng.choice(MESHES); names = list(mesh)
    kind = rng.choice(["reshape", "binary", "dot", "reduce", "transpose", "concat", "where", "slice", "bcast",
                       "lax_dot", "bmm", "einsum", "reshape_out", "zeros_out", "reshard", "cumsum_none", "take",
                       "pad", "dyn", "dus", "argsort", "at_set", "auto", "iota", "softmax"])
    sh = rand_shape()
    a = {"shape": sh, "dtype": "float32", "spec": rand_spec(sh, names)}
    if kind == "reshape":
        c = case(f"a.reshape({tuple(rand_reshape(sh))})", [a], mesh)
    elif kind == "binary":
        sh2 = [rng.choice([1, n]) for n in sh][rng.randint(0, len(sh) - 1):]
        b = {"shape": sh2, "dtype": "float32", "spec": rand_spec(sh2, names)}
        c = case(rng.choice(["a + b", "a * b", "jnp.maximum(a, b)"]), [a, b], mesh)
    elif kind == "dot":
        sh = [rng.choice([2, 4, 8]) for _ in range(2)]; sh2 = [sh[1], rng.choice([2, 4, 8])]
        a = {"shape": sh, "dtype": "float32", "spec": rand_spec(sh, names)}
        b = {"shape": sh2, "dtype": "float32", "spec": rand_spec(sh2, names)}
        c = case("a @ b", [a, b], mesh)
    elif kind == "reduce":
        ax = rng.randrange(len(sh))
        c = case(rng.choice([f"jnp.sum(a, axis={ax})", f"jnp.max(a, axis={ax}, keepdims=True)", f"jnp.argmax(a, axis={ax})", f"jnp.cumsum(a, axis={ax})", f"jnp.sort(a, axis={ax})"]), [a], mesh)
    elif kind == "transpose":
        c = case("a.T", [a], mesh)
    elif kind == "concat":
        b = {"shape": sh, "dtype": "float32", "spec": rng.choice([a["spec"], rand_spec(sh, names)])}
        c = case(f"jnp.concatenate([a, b], axis={rng.randrange(len(sh))})", [a, b], mesh)
    elif kind == "where":
        b = {"shape": sh, "dtype": "float32", "spec": rand_spec(sh, names)}
        c = case(rng.choice(["jnp.where(a > 0, b, 0.0)", "jnp.where(a > 0, a, b)", "jnp.where(b > 0, 1.0, a)"]), [a, b], mesh)
    elif kind == "slice":
        d = rng.randrange(len(sh)); lo = rng.randrange(sh[d]); hi = rng.randint(lo + 1, sh[d])
        idx = ", ".join(":" if k != d else f"{lo}:{hi}" for k in range(len(sh)))
        c = case(f"a[{idx}]", [a], mesh)
    elif kind == "lax_dot":
        bsz, m, k, n = (rng.choice([2, 4, 8]) for _ in range(4))
        a = {"shape": [bsz, m, k], "dtype": "float32", "spec": rand_spec([bsz, m, k], names)}
        b = {"shape": [bsz, k, n], "dtype": "float32", "spec": rand_spec([bsz, k, n], names)}
        c = case("lax.dot_general(a, b, (((2,),(1,)),((0,),(0,))))", [a, b], mesh)
    elif kind == "bmm":
        bsz, m, k, n = (rng.choice([2, 4, 8]) for _ in range(4))
        sa, sb = [rng.choice([1, bsz]), m, k], [rng.choice([1, bsz]), k, n]
        a = {"shape": sa, "dtype": "float32", "spec": rand_spec(sa, names)}
        b = {"shape": sb, "dtype": "float32", "spec": rand_spec(sb, names)}
        c = case("a @ b", [a, b], mesh)
    elif kind == "einsum":
        bsz, s_, f, d = (rng.choice([2, 4, 8]) for _ in range(4))
        a = {"shape": [bsz, s_, f], "dtype": "float32", "spec": rand_spec([bsz, s_, f], names)}
        b = {"shape": [f, d], "dtype": "float32", "spec": rand_spec([f, d], names)}
        out = rand_spec([bsz, s_, d], names)
        outs = [tuple(e) if isinstance(e, list) else e for e in out]
        c = case(rng.choice(["jnp.einsum('bsf,fd->bsd', a, b)", f"jnp.einsum('bsf,fd->bds', a, b, out_sharding=P(*{outs}))", "jnp.einsum('bsf,fd->dbs', a, b)"]), [a, b], mesh)
    elif kind == "reshape_out":
        new = rand_reshape(sh); out = [tuple(e) if isinstance(e, list) else e for e in rand_spec(new, names)]
        c = case(f"jnp.reshape(a, {tuple(new)}, out_sharding=P(*{out}))", [a], mesh)
    elif kind == "zeros_out":
        new = [rng.choice([2, 4, 6, 8]) for _ in range(rng.randint(1, 3))]
        out = [tuple(e) if isinstance(e, list) else e for e in rand_spec(new, names)]
        if rng.random() < 0.2 and out: out[-1] = out[0] or names[0]; 
        c = case(f"jnp.zeros({tuple(new)}, out_sharding=P(*{out}))", [], mesh)
    elif kind == "reshard":
        out = [tuple(e) if isinstance(e, list) else e for e in rand_spec(sh, names)][: rng.randint(0, len(sh))]
        c = case(f"reshard(a, P(*{out}))", [a], mesh)
    elif kind == "cumsum_none":
        c = case("jnp.cumsum(a)", [a], mesh)
    elif kind == "take":
        idx = [rng.randrange(sh[0]) for _ in range(rng.choice([2, 4]))]
        if rng.random() < 0.5:
            c = case(f"a[jnp.array({idx})]", [a], mesh)
        else:
            out = [tuple(e) if isinstance(e, list) else e for e in rand_spec([len(idx)] + sh[1:], names)]
            c = case(f"a.at[jnp.array({idx})].get(out_sharding=P(*{out}))", [a], mesh)
    elif kind == "pad":
        w = tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in sh)
        c = case(f"jnp.pad(a, {w})", [a], mesh)
    elif kind == "dyn":
        sizes = tuple(rng.choice(factorizations(n)) for n in sh); starts = tuple(rng.randrange(n) for n in sh)
        c = case(f"lax.dynamic_slice(a, {starts}, {sizes})", [a], mesh)
    elif kind == "dus":
        sizes = [rng.choice(factorizations(n)) for n in sh]; starts = tuple(rng.randrange(n) for n in sh)
        b = {"shape": sizes, "dtype": "float32", "spec": rand_spec(sizes, names)}
        c = case(f"lax.dynamic_update_slice(a, b, {starts})", [a, b], mesh)
    elif kind == "argsort":
        c = case(f"jnp.argsort(a, axis={rng.randrange(len(sh))})", [a], mesh)
    elif kind == "at_set":
        d = rng.randrange(len(sh)); k = rng.randrange(sh[d])
        idx = ", ".join(":" if j != d else str(k) for j in range(len(sh)))
        c = case(rng.choice([f"a.at[{idx}].set(1.0)", f"a.at[{idx}].add(2.0)"]), [a], mesh)
    elif kind == "auto":
        out = [tuple(e) if isinstance(e, list) else e for e in rand_spec([int(np.prod(sh))], names)]
        c = case(f"jax.sharding.auto_axes(lambda x: x.reshape(-1) * 2, out_sharding=P(*{out}))(a)", [a], mesh)
    elif kind == "iota":
        new = [rng.choice([2, 4, 8]) for _ in range(2)]
        out = [tuple(e) if isinstance(e, list) else e for e in rand_spec(new, names)]
        c = case(rng.choice([f"lax.broadcasted_iota(jnp.int32, {tuple(new)}, 1, out_sharding=P(*{out}))", f"jnp.arange({new[0]}, out_sharding=P(*{out[:1]}))"]), [], mesh)
    elif kind == "softmax":
        c = case(f"jax.nn.softmax(a, axis={rng.randrange(len(sh))})", [a], mesh)
    else:
        new = [rng.choice([2, 4]) ] + sh
        spec = rand_spec(new, names)
        c = case(f"jnp.broadcast_to(a, {tuple(new)}, out_sharding=P(*{[tuple(e) if isinstance(e, list) else e for e in spec]}))", [a], mesh)
    if c is None: continue
    c["id"] = f"rand_{len(cases):03d}_{kind}"
    cases.append(c)
json.dump({"jax_version": jax.__version__, "generator": "tests/tools/gen_jax_explicit_extra.py " + " ".join(sys.argv[1:3]),
           "num_cases": len(cases), "cases": cases}, open(sys.argv[3], "w"), indent=0)
print(len(cases), sum("error" in c["result"] for c in cases))
