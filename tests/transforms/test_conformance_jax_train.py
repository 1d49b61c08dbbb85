"""JAX training steps (tests/data/jax_train.json): value_and_grad of a squared-error loss and an
SGD update under a strategy, run through ``ss.run`` with the case's shardings. simshard must give
JAX's bits (integer-valued inputs: every value is exact in float32) and send no more bytes per
device than XLA did (XLA's figure is its analytic mean, so ours is the mean over devices)."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from casedata import load_cases

CASES = load_cases("jax_train.json")
P = ss.P


def _inputs(case):
    """The recorder's inputs: numpy default_rng(seed), integer-valued float32, drawn x, y, then
    the parameters (recovered from the case: the drawn parameters round its new ones)."""
    s = case["sizes"]
    rng = np.random.default_rng(case["inputs_seed"])
    x = rng.integers(-1, 2, (s["B"], s["DIN"])).astype(np.float32)
    y = rng.integers(-2, 3, (s["B"], s["DOUT"])).astype(np.float32)
    params = {"w1": rng.integers(-1, 2, (s["DIN"], s["F"])).astype(np.float32),
              "w2": rng.integers(-1, 2, (s["F"], s["DOUT"])).astype(np.float32)}
    return params, x, y


def mlp_step(sizes):
    scale = sizes["B"] * sizes["DOUT"]

    def loss(p, x, y):
        z = x @ p["w1"]
        out = np.where(z > 0, z, 0) @ p["w2"]
        return np.sum((out - y) ** 2) / scale

    def step(p, x, y):
        value, g = ss.value_and_grad(loss)(p, x, y)
        return value, {k: p[k] - sizes["LR"] * g[k] for k in p}

    return step


def _mean_sent(res) -> float:
    return sum(r.bytes_sent for r in res.comm.records) / len(res.spmd.devices)


@pytest.mark.parametrize("case", [c for c in CASES if c["program"] == "mlp_step"], ids=lambda c: c["id"])
def test_training_step_matches_jax(case):
    params, x, y = _inputs(case)
    assert all(np.array_equal(params[k], np.round(np.asarray(case["new_params"][k], np.float32))) for k in params)
    psh = {k: P(*v) for k, v in case["param_specs"].items()}
    res = ss.run(mlp_step(case["sizes"]), params, x, y, mesh=ss.Mesh(case["mesh"]),
                 in_shardings=(psh, P(*case["x_spec"]), P(*case["y_spec"])), out_shardings=(P(), psh))
    loss, new = res.outputs
    assert res.verify.bitwise
    assert float(loss) == case["loss"]
    for k, v in case["new_params"].items():
        assert new[k].tobytes() == np.asarray(v, np.float32).tobytes(), k
    sent = _mean_sent(res)
    assert sent <= case["xla_sent_bytes_per_device"], (sent, case["xla_sent_bytes_per_device"])
    if any(s for s in case["param_specs"].values()):  # FSDP: gradients reduce-scattered, fewer bytes than XLA
        assert any(r.kind == "reduce_scatter" for r in res.comm.records)
        assert sent < case["xla_sent_bytes_per_device"]
