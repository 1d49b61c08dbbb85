"""FSDP both ways, named as PyTorch's FSDP names them: ``fsdp`` (ZeRO-3, reshard_after_forward=True)
gathers each layer's weights again in the backward pass; ``fsdp-no-reshard`` keeps the forward
pass's gathered copies. The trade, by hand: (g-1)/g of the layers' parameter bytes more per
device for the first, the kept copies' bytes less at its peak."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import simshard as ss
from simshard.programs import gpt


def _received(est, device: int) -> Counter:
    got = Counter()
    for r in est.comm.records:
        if r.device == device:
            got[r.kind] += r.bytes_received
    return got


@pytest.mark.parametrize("name,mesh", [("tiny", None), ("gpt2-small", {"x": 2, "y": 2})])
def test_fsdp_regathers_in_the_backward_pass_and_saves_the_kept_copies(name, mesh):
    cfg = gpt.CONFIGS[name]
    prog = gpt.program(name)
    regather, keep = (prog.estimate(s, mode="sgd", mesh=mesh) for s in ("fsdp", "fsdp-no-reshard"))
    g = len(regather.spmd.devices)
    layers = sum(n * a * b for n, a, b in cfg.layer_params.values()) * 4
    unembed = cfg.d * cfg.vocab * 4
    spec = gpt.layout(cfg, "fsdp", _mesh(prog, mesh))[0]["unembed"]
    own = ss.layout(ss.NamedSharding(_mesh(prog, mesh), spec), (cfg.d, cfg.vocab))
    for d in range(g):
        r, k = _received(regather, d), _received(keep, d)
        # the forward pass gathers every weight once (a device receives what it does not hold:
        # GPT-2's 50,257-word vocabulary leaves one device a column more); ZeRO-3 gathers the
        # layers' again for the backward pass (the unembedding, used last, keeps its copy, as
        # FSDP's root module does)
        unembed_in = unembed - int(np.prod(own.local_shape(d))) * 4
        assert k["all_gather"] == (g - 1) * layers // g + unembed_in
        assert r["all_gather"] == 2 * (g - 1) * layers // g + unembed_in
        assert r["reduce_scatter"] == k["reduce_scatter"] > 0  # gradients reduce-scattered either way
    # what keeping costs at the peak: each layer's gathered weights, as its matmuls read them (a
    # [d, e] weight, never broadcast to the sequences), held from the forward to the backward
    # pass: 4 L (4 d^2 + 2 d f) bytes, 339,738,624 B for GPT-2 small on 2 x 2, where both steps
    # peak in the backward scan (40.5 GiB, b/g = 128 times that, while each matmul broadcast its
    # weight to the device's sequences). The tiny step keeping its weights peaks in its forward
    # scan instead (every residual stack made, a layer's gathered weights in use): more than that.
    kept = 4 * cfg.layers * (4 * cfg.d**2 + 2 * cfg.d * cfg.d_ff)
    if name == "tiny":
        assert keep.memory.max_peak - regather.memory.max_peak >= kept
    else:
        assert keep.memory.max_peak - regather.memory.max_peak == kept


def _mesh(prog, mesh):
    return prog.mesh_for("fsdp", mesh)


def test_both_fsdp_strategies_are_offered_and_said_apart():
    prog = gpt.program("tiny")
    assert {"fsdp", "fsdp-no-reshard"} <= set(prog.strategy_names)
    assert "reshard_after_forward=True" in prog.strategy("fsdp").about
    assert "reshard_after_forward=False" in prog.strategy("fsdp-no-reshard").about
    # the same layout: only what the backward pass keeps differs
    assert prog.strategy("fsdp").in_shardings == prog.strategy("fsdp-no-reshard").in_shardings


def test_zero3_step_runs_and_verifies():
    res = gpt.program("tiny").run("fsdp", mode="sgd", backend="local")
    assert res.verify.ok
    assert {r.kind for r in res.comm.records} == {"all_gather", "reduce_scatter", "all_reduce"}
