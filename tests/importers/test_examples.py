"""The examples of docs/import.md: a JAX transformer block's training step and a PyTorch
nn.TransformerEncoderLayer model with a tensor-parallel plan, each run on 8 devices (small shapes),
compared with its framework, and estimated on 1,024 devices."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent.parent / "docs" / "examples"
# big enough to split over dp=128, tp=8, small enough for a quick estimate
MEDIUM = dict(batch=256, seq=16, d=64, heads=8, ff=128, vocab=64)


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_jax_transformer_step_on_8_devices_matches_jax(jax):
    example = load("jax_transformer")
    res = example.run()
    assert res.verify.ok, res.verify.render()
    assert len(res.verify.framework) == 12  # the loss and the 11 updated parameters
    assert all(c.ok for c in res.verify.framework)
    assert max(c.scaled_ulp for c in res.verify.framework) <= 16  # measured: about 4


def test_jax_transformer_step_estimated_on_1024_devices(jax):
    est = load("jax_transformer").estimate(MEDIUM, dp=128, tp=8)
    assert est.program.in_shardings[0].mesh.size == 1024
    axes = {r.axes for r in est.comm.records}
    assert any("tp" in a for a in axes) and any("dp" in a for a in axes)  # Megatron's and the gradients' reductions


def test_torch_transformer_on_8_devices_matches_torch(torch):
    res = load("torch_transformer").run()
    assert res.verify.ok, res.verify.render()  # (the loss's sum over a batch pending over tp: report/opcheck)
    assert res.verify.framework and all(c.ok for c in res.verify.framework), res.verify.render()
    assert any(r.kind == "all_reduce" for r in res.comm.records)


def test_torch_transformer_estimated_on_1024_devices_from_the_meta_device(torch):
    est = load("torch_transformer").estimate(MEDIUM, dp=128, tp=8)
    assert {s.mesh.size for s in est.program.in_shardings if s is not None} == {1024}
    assert est.comm.records
