"""What the library's transformers verify bitwise in which mode (docs/programs.md's table,
programs/gpt.py's docstring), by running: the forward passes are bitwise under every strategy
(tests/programs/test_library.py); the training steps as below."""

from __future__ import annotations

import pytest

from simshard import programs


def _outputs(res) -> dict[str, bool]:
    return {c.what: c.bitwise for c in res.verify.checks}


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


def test_transformer_data_parallel_step_is_bitwise_and_megatron_reassociates():
    """One sequence per device: dp's cross-device sum of the weight gradients adds them in numpy's
    order; Megatron splits the heads' sums."""
    prog = programs.load("transformer")
    assert prog.run("dp", mode="sgd", backend="local").verify.bitwise
    mega = prog.run("megatron", mode="sgd", backend="local").verify
    assert mega.ok and not mega.bitwise
