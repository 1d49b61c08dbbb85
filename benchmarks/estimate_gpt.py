"""The GPT training step from numbers (simshard/report/training) against Megatron-LM's weak-scaling
table (Narayanan et al., SC'21, Table 1), and how long it takes to estimate and to tune.

    python benchmarks/estimate_gpt.py

Per row: the published TFLOP/s per GPU, the estimate with the row's layout and what those runs
did (tests/report/test_training.py's MEGATRON_2021), its error, the time one estimate takes, and
what a tuned run would reach on the same devices, in model FLOP/s without recomputation (MFU's
numerator: Megatron's 96-count would credit a run for recomputation it does not do), the
tuner's choice and the time to choose.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from simshard.report.devices import device_of
from simshard.report.training import Options, Parallel, Transformer, cluster, estimate_step, model_flops
from simshard.report.training.tune import tune

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "report"))
from test_training import MEGATRON_2021, TABLE_1  # noqa: E402  (the table lives once, with its test)


def main() -> None:
    a100, dgx = device_of("a100"), cluster("dgx-a100")
    print("| model | GPUs | published | estimated | error | estimate took | tuned (MFU) | tuned choice | tuning took |")
    print("|---|---|---|---|---|---|---|---|---|")
    for params, heads, hidden, layers, tp, pp, gpus, batch, published in TABLE_1:
        model, par = Transformer(layers, hidden, heads, 51200, 2048), Parallel(tp, pp, gpus // (tp * pp))
        start = time.perf_counter()
        est = estimate_step(model, par, Options(batch, **MEGATRON_2021), a100, dgx)
        took = time.perf_counter() - start
        start = time.perf_counter()
        tuned = tune(model, par, {"batch": batch}, a100, dgx)
        tuning = time.perf_counter() - start
        got = est.megatron_flops_per_device / 1e12
        best = model_flops(model, batch) / (tuned.step.step_seconds * par.devices) / 1e12
        o = tuned.step.options
        choice = f"b={o.microbatch} {o.schedule} recompute={o.recompute} zero={o.zero} sp={o.sequence_parallel}"
        print(f"| {params:,}B | {gpus:,} | {published} | {got:.1f} | {100 * (got / published - 1):+.1f}% | "
              f"{took * 1e3:.1f} ms | {best:.1f} | {choice} | {tuning:.2f} s |")


if __name__ == "__main__":
    main()
