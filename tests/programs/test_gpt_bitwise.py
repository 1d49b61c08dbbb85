"""What the library's transformers verify bitwise in which mode (docs/programs.md's table,
programs/gpt.py's docstring), by running: the forward passes are bitwise under every strategy
(tests/programs/test_library.py); the training steps as below."""

from __future__ import annotations

import pytest

from simshard import programs


def _outputs(res) -> dict[str, bool]:
    return _outputs_of(res.verify)


def _outputs_of(verify) -> dict[str, bool]:
    return {c.what: c.bitwise for c in verify.checks}


@pytest.mark.parametrize("strategy", ["dp", "megatron"])
def test_gpt_training_step_verifies_up_to_reassociation_even_data_parallel(strategy):
    """gpt's tiny step: the loss (output 0) and the unembedding's update (output 1) bitwise, the
    stacked layers' updates equal only up to reassociation, under dp too: each device sums its 8
    sequences' weight gradients before the all-reduce adds the 8 partial sums."""
    res = programs.load("gpt").run(strategy, mode="sgd", backend="local")
    assert res.verify.ok and not res.verify.bitwise
    got = _outputs(res)
    assert got["output 0"] and got["output 1"]
    layers = [w for w, bitwise in got.items() if w not in ("output 0", "output 1")]
    assert layers and not any(got[w] for w in layers)
    assert res.verify.reassociations  # named: the sums the partition split


def test_transformer_data_parallel_step_reassociates_only_its_weight_gradients():
    """One sequence per device. A weight's gradient is one contraction over batch and sequence
    (``x @ w`` traced as jnp.matmul traces it: the weight is not broadcast to the batch, so its
    gradient is no per-sequence sum of broadcast copies), which dp splits over the devices: each
    device contracts its sequence, the all-reduce adds the 8 partial sums. So the loss is
    bitwise and the weights' updates equal up to that reassociation, named as the backward
    scan's over x and y; Megatron splits the heads' sums."""
    prog = programs.load("transformer")
    dp = prog.run("dp", mode="sgd", backend="local").verify
    assert dp.ok and not dp.wrong_ops and not dp.bitwise
    assert _outputs_of(dp)["output 0"]  # the loss
    assert dp.reassociations and all(c.reassociated == ("x", "y") for c in dp.reassociations)
    mega = prog.run("megatron", mode="sgd", backend="local").verify
    assert mega.ok and not mega.bitwise
