"""JAX training steps (tests/data/jax_train.json): value_and_grad of a squared-error loss and an
SGD update under a strategy, run through ``ss.run`` with the case's shardings. simshard must give
JAX's bits (integer-valued inputs: every value is exact in float32) and send no more bytes per
device than XLA did (XLA's figure is its analytic mean, so ours is the mean over devices)."""

from __future__ import annotations

import math

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


def _sent_per_device(res) -> list[int]:
    return [res.comm.bytes_sent(d) for d in res.spmd.devices]


def xla_whole_elements(case) -> int:
    """What XLA's collectives send from the busiest device when their chunks hold whole float32
    elements: a collective of ``n`` elements over ``g`` devices sends at most ``ceil(n / g)``
    elements per chunk (an all-reduce 2 (g-1) chunks, an all-gather or a reduce-scatter g-1).
    XLA's recorded figure, ``2 (g-1)/g x operand`` for an all-reduce, is the mean over devices: a
    4,097-float all-reduce (the gradients and the loss's scalar) cannot send 28,679 B from every
    device when each device sends its own whole-float chunks (one chunk is 513 floats, its holder
    sends it 7 times: 28,700 B; the mean is 28,679). Only relaying bytes of other devices' chunks
    could level that, which neither XLA's collectives nor simshard's direct ones do."""
    total = 0
    for c in case["collectives"]:
        g = c["group_size"]
        if c["kind"] == "all-reduce":
            total += 2 * (g - 1) * math.ceil(c["operand_bytes"] // 4 / g) * 4
        elif c["kind"] == "all-gather":
            total += (g - 1) * math.ceil(c["result_bytes"] // 4 / g) * 4
        else:
            raise AssertionError(f"a collective this bound does not know: {c['kind']}")
    return total


def _mesh_2d(case):
    """The case's 8 devices as a 2 x 4 mesh, the batch (and FSDP's parameter dims) over both axes:
    the same group of 8 for every collective, so XLA's figures stand."""
    def two_d(spec):
        return P(*[("x", "y") if a == "x" else a for a in spec])

    return (ss.Mesh({"x": 2, "y": 4}), {k: two_d(v) for k, v in case["param_specs"].items()}, two_d(case["x_spec"]),
            two_d(case["y_spec"]))


@pytest.mark.parametrize("two_d", [False, True], ids=["1d", "2d"])
@pytest.mark.parametrize("case", [c for c in CASES if c["program"] == "mlp_step"], ids=lambda c: c["id"])
def test_no_device_sends_more_than_xla(case, two_d):
    """Every device, on the case's mesh and on a 2-D mesh of the same 8 devices: no more than the
    mean XLA records (on average) and no more than XLA's collectives send from their busiest device
    (``xla_whole_elements``)."""
    params, x, y = _inputs(case)
    if two_d:
        mesh, psh, xs, ys = _mesh_2d(case)
    else:
        mesh, psh = ss.Mesh(case["mesh"]), {k: P(*v) for k, v in case["param_specs"].items()}
        xs, ys = P(*case["x_spec"]), P(*case["y_spec"])
    res = ss.run(mlp_step(case["sizes"]), params, x, y, mesh=mesh, in_shardings=(psh, xs, ys), out_shardings=(P(), psh))
    assert res.verify.bitwise and float(res.outputs[0]) == case["loss"]
    sent = _sent_per_device(res)
    assert sum(sent) / len(sent) <= case["xla_sent_bytes_per_device"]
    assert max(sent) <= xla_whole_elements(case), (sent, xla_whole_elements(case))


def deep_step(sizes, scanned: bool):
    """4 stacked relu layers (in ``ss.lax.scan`` or unrolled) and a head, as the recorder's deep_step."""
    scale = sizes["B"] * sizes["DOUT"]

    def layer(h, w):
        z = h @ w
        return np.where(z > 0, z, 0), None

    def forward(p, x):
        if scanned:
            return ss.lax.scan(layer, x, p["ws"])[0] @ p["head"]
        h = x
        for k in range(sizes["LAYERS"]):
            h, _ = layer(h, p["ws"][k])
        return h @ p["head"]

    def step(p, x, y):
        value, g = ss.value_and_grad(lambda p: np.sum((forward(p, x) - y) ** 2) / scale)(p)
        return value, {k: p[k] - sizes["LR"] * g[k] for k in p}

    return step


DEEP = [c for c in CASES if c["program"] in ("deep_step", "deep_step_unrolled")]


@pytest.mark.parametrize("case", DEEP, ids=lambda c: c["id"])
def test_deep_training_step_moves_no_more_than_xla_unrolled(case):
    """The layer-stack cases. Their recorder drew the sparse stacked weights with a generator the
    file does not give, so the values are checked against simshard's own numpy reference (on
    integer inputs of the same shapes); the bytes, which do not depend on values, against XLA's:
    no more than its unrolled case (XLA counts a while body once, so its scan figure is one
    layer's). A scan moves its unrolled form's bytes plus one more all-gather of each layer's
    weight: its backward pass reads a layer's weight from the stacked (sharded) operand and
    gathers it again, as ZeRO-3 does, where the unrolled step keeps the gathered copy alive from
    its forward pass (a scan saves no copy of its xs)."""
    s = case["sizes"]
    rng = np.random.default_rng(case["inputs_seed"])
    x = rng.integers(-1, 2, (s["B"], s["DEEP"])).astype(np.float32)
    y = rng.integers(-2, 3, (s["B"], s["DOUT"])).astype(np.float32)
    params = {"ws": (rng.integers(-1, 2, (s["LAYERS"], s["DEEP"], s["DEEP"])) * (rng.random((s["LAYERS"], s["DEEP"], s["DEEP"])) < 0.1)).astype(np.float32),
              "head": rng.integers(-1, 2, (s["DEEP"], s["DOUT"])).astype(np.float32)}
    psh = {k: P(*v) for k, v in case["param_specs"].items()}
    kw = dict(mesh=ss.Mesh(case["mesh"]), in_shardings=(psh, P(*case["x_spec"]), P(*case["y_spec"])), out_shardings=(P(), psh))
    res = ss.run(deep_step(s, case["program"] == "deep_step"), params, x, y, **kw)
    assert res.verify.bitwise
    unrolled = next(c for c in DEEP if c["program"] == "deep_step_unrolled" and c["param_specs"] == case["param_specs"])
    sent = _mean_sent(res)
    assert sent <= unrolled["xla_sent_bytes_per_device"], (sent, unrolled["xla_sent_bytes_per_device"])
    assert max(_sent_per_device(res)) <= xla_whole_elements(unrolled)
    assert any(r.kind == "reduce_scatter" for r in res.comm.records)  # FSDP: gradients reduce-scattered
    if case["program"] == "deep_step":
        twin = ss.run(deep_step(s, False), params, x, y, **kw)
        g, (layers, rows, cols) = case["mesh"]["x"], params["ws"].shape
        regather = layers * (g - 1) * rows * cols * 4 / g  # each layer's weight block gathered again, per device
        assert psh["ws"] == P(None, "x", None) and sent == _mean_sent(twin) + regather
        assert [o.tobytes() for o in twin.outputs[1].values()] == [o.tobytes() for o in res.outputs[1].values()]
