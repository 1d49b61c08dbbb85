"""A transformer block in JAX (causal attention, layer norm, GELU MLP, softmax cross-entropy),
trained one SGD step with ``jax.value_and_grad`` under ``jax.jit`` with NamedShardings: batch
over ``dp``, Megatron tensor parallelism over ``tp``. Everything above the ``simshard`` lines is
plain JAX; simshard reads its jaxpr (docs/import.md).

    simshard run docs/examples/jax_transformer.py     # 8 devices, verified against numpy and JAX
    python -c "import jax_transformer as t; print(t.estimate().comm)"   # 1,024 devices, from shapes
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # 8 JAX CPU devices

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

SMALL = dict(batch=4, seq=8, d=32, heads=4, ff=64, vocab=64)
LARGE = dict(batch=256, seq=1024, d=2048, heads=16, ff=8192, vocab=32768)
LR = 0.125


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + eps) * g + b


def attention(x, p, heads):
    b, s, d = x.shape
    q, k, v = ((x @ p[w]).reshape(b, s, heads, d // heads) for w in ("wq", "wk", "wv"))
    scores = jnp.einsum("bshd,bthd->bhst", q, k) / np.sqrt(d // heads).astype(np.float32)
    scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -1e9)
    out = jnp.einsum("bhst,bthd->bshd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(b, s, d) @ p["wo"]


def block(p, x, heads):
    h = x + attention(layer_norm(x, p["ln1_g"], p["ln1_b"]), p, heads)
    return h + jax.nn.gelu(layer_norm(h, p["ln2_g"], p["ln2_b"]) @ p["w1"]) @ p["w2"]


def loss(p, x, labels, heads):
    logits = block(p, x, heads) @ p["head"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, logits.shape[-1]) * logp, axis=-1))


def train_step(p, x, labels, heads):
    value, grads = jax.value_and_grad(loss)(p, x, labels, heads)
    return value, jax.tree.map(lambda w, g: w - LR * g, p, grads)


def param_specs():
    """Megatron: Q, K, V and the first MLP matmul by columns, the output projections by rows."""
    cols, rows, rep = P(None, "tp"), P("tp", None), P()
    return {"wq": cols, "wk": cols, "wv": cols, "wo": rows, "w1": cols, "w2": rows, "head": cols,
            "ln1_g": rep, "ln1_b": rep, "ln2_g": rep, "ln2_b": rep}


def jitted_step(mesh, heads):
    """``train_step`` under ``jax.jit`` with its NamedShardings on ``mesh``."""
    params = {k: NamedSharding(mesh, s) for k, s in param_specs().items()}
    batch = NamedSharding(mesh, P("dp", None, None))
    step = jax.jit(lambda p, x, y: train_step(p, x, y, heads),
                   in_shardings=(params, batch, NamedSharding(mesh, P("dp", None))),
                   out_shardings=(NamedSharding(mesh, P()), params))
    step.__name__ = "train_step"
    return step


def shapes(batch, seq, d, heads, ff, vocab):
    """The arguments' shapes and dtypes: ``(params, x, labels)``."""
    params = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, ff), "w2": (ff, d),
              "head": (d, vocab), "ln1_g": (d,), "ln1_b": (d,), "ln2_g": (d,), "ln2_b": (d,)}
    return params, (batch, seq, d), (batch, seq)


def arguments(size=SMALL, seed=0):
    """Small Gaussian weights (layer norm gains 1, biases 0), inputs, integer labels."""
    rng = np.random.default_rng(seed)
    params, x, labels = shapes(**size)
    p = {k: (np.ones(s, np.float32) if k.endswith("_g") else np.zeros(s, np.float32) if k.endswith("_b")
             else (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)) for k, s in params.items()}
    return p, rng.standard_normal(x).astype(np.float32), rng.integers(0, size["vocab"], labels).astype(np.int32)


# -- simshard -------------------------------------------------------------------------------------
import simshard as ss  # noqa: E402
from simshard.programs import ProgramDef, Strategy  # noqa: E402


def run(size=SMALL, backend="local"):
    """The step on 8 devices (dp=2, tp=4): ``ss.run`` verifies it bit for bit and against JAX."""
    mesh = jax.make_mesh((2, 4), ("dp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    return ss.run(ss.from_jax(jitted_step(mesh, size["heads"])), *arguments(size), backend=backend)


def estimate(size=LARGE, dp=128, tp=8):
    """What the step costs on dp × tp devices (1,024 by default), from shapes alone."""
    mesh = jax.sharding.AbstractMesh((dp, tp), ("dp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    params, x, labels = shapes(**size)
    abstract = ({k: ss.ShapeDtype(s) for k, s in params.items()}, ss.ShapeDtype(x), ss.ShapeDtype(labels, np.int32))
    return ss.estimate(ss.from_jax(jitted_step(mesh, size["heads"])), *abstract)


def _build(mesh):
    """The step on a JAX mesh of ``mesh``'s shape: of devices where JAX has that many (so it runs
    and is compared with JAX), else abstract (``simshard estimate --mesh dp=128,tp=8``)."""
    auto = (jax.sharding.AxisType.Auto,) * len(mesh.axis_names)
    if mesh.size <= len(jax.devices()):
        jax_mesh = jax.make_mesh(mesh.axis_sizes, mesh.axis_names, axis_types=auto)
    else:
        jax_mesh = jax.sharding.AbstractMesh(mesh.axis_sizes, mesh.axis_names, axis_types=auto)
    return ss.from_jax(jitted_step(jax_mesh, SMALL["heads"]))


PROGRAM = ProgramDef(
    name="jax_transformer", about="a JAX transformer block's training step, imported with ss.from_jax",
    fn=_build(ss.Mesh({"dp": 2, "tp": 4})), inputs=arguments, mesh={"dp": 2, "tp": 4},
    strategies=(Strategy("megatron", "the NamedShardings of the JAX code: batch over dp, Megatron over tp",
                         build=_build),),
)
