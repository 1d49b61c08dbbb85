"""programs/mlp.py: the communication of each strategy, derived from the shapes.

float32 throughout (4 bytes); an all-reduce of N bytes over g devices makes each device receive
2(g-1)/g * N, an all-gather (g-1)/g of the gathered array; totals are over all devices."""

from simshard.programs.mlp import BATCH, D, D_FF

F32 = 4


def collectives(res):
    """{(kind, mesh axes): (collectives, bytes sent over all devices)}, from the report's summary."""
    return {(row["kind"], tuple(row["axis"].split(","))): (row["collectives"], row["sent"])
            for row in res.comm.summary(("kind", "axis"))}


def test_dp_moves_nothing(run_strategy):
    res = run_strategy("mlp", "dp")
    assert res.comm.records == () and res.comm.total_bytes == 0


def test_megatron_is_one_all_reduce_of_batch_by_d_over_every_device(run_strategy):
    res = run_strategy("mlp", "megatron")
    g, n = 8, BATCH * D * F32  # the [16, 32] output, partial over all 8 devices
    assert collectives(res) == {("all_reduce", ("x", "y")): (1, g * 2 * (g - 1) * n // g)}  # 28672 B


def test_2d_all_reduces_the_local_batch_over_y_only(run_strategy):
    res = run_strategy("mlp", "2d")
    g, n = 4, (BATCH // 2) * D * F32  # each x half of the batch, partial over the 4 devices of y
    assert collectives(res) == {("all_reduce", ("y",)): (1, 8 * 2 * (g - 1) * n // g)}  # 12288 B


def test_fsdp_stores_weights_split_and_all_gathers_each_once(run_strategy):
    res = run_strategy("mlp", "fsdp")
    p = res.program
    # FSDPShardingRule splits each weight along its larger dim (64) over all 8 devices
    assert [p.type_string(v) for v in p.inputs] == ["f32[32,64@(x,y)]", "f32[64@(x,y),32]", "f32[16@(x,y),32]"]
    g, w = 8, D * D_FF * F32  # both weights have d * d_ff elements
    assert collectives(res) == {("all_gather", ("x", "y")): (2, 2 * g * (g - 1) * w // g)}  # 114688 B
    # each device starts with 1/8 of the weights and of the batch: (2 * 8192 + 2048) / 8 bytes
    assert {m.input_bytes for m in res.memory.devices} == {(2 * w + BATCH * D * F32) // g}


# -- training steps (mode="sgd" / "adam"): the backward pass's collectives, derived the same way --
import pytest  # noqa: E402

from simshard import programs  # noqa: E402
from simshard.programs.mlp import TRAIN_BATCH  # noqa: E402


@pytest.mark.parametrize("mode", ["sgd", "adam"])
def test_training_steps_verify_and_pay_for_their_gradients(mode):
    prog = programs.load("mlp")
    n, grads = 8, D * D_FF * F32 * 2  # devices; both weight gradients
    ring = 2 * (n - 1) / n  # an all-reduce sends this times its bytes per device
    runs = {s: prog.run(s, mode=mode, backend="local") for s in ("dp", "fsdp", "megatron")}
    assert all(r.verify.bitwise for r in runs.values())
    dp, fsdp, megatron = (collectives(runs[s]) for s in ("dp", "fsdp", "megatron"))
    loss = ring * F32 * n  # the scalar loss, all-reduced
    assert dp == {("all_reduce", ("x", "y")): (3, ring * grads * n + loss)}
    # FSDP: each weight gathered once (kept for the backward matmuls), each gradient reduce-scattered
    assert fsdp[("all_gather", ("x", "y"))] == (2, (n - 1) / n * grads * n)
    assert fsdp[("reduce_scatter", ("x", "y"))] == (2, (n - 1) / n * grads * n)
    # Megatron: the forward all-reduce of batch x d only; its gradients need no communication
    assert megatron == {("all_reduce", ("x", "y")): (1, ring * TRAIN_BATCH * D * F32 * n)}
