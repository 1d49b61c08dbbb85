"""A GPT training run estimated from numbers (``estimate_step``): the per-op costs of the kernel
model (``report/kernels.py``) and the collective records and link formulas of the communication
report, assembled per layer, so a 3,072-device step costs what one layer does. ``tune`` picks what
a tuned run would (the fastest options that fit in memory); ``clusters`` names real clusters'
topologies. docs/estimate.md#a-training-run-from-numbers derives each term."""

from .clusters import CLUSTERS, cluster
from .model import Options, Parallel, Schedule, Transformer, megatron_flops, model_flops
from .step import StepEstimate, estimate_step

__all__ = ["CLUSTERS", "Options", "Parallel", "Schedule", "StepEstimate", "Transformer", "cluster", "estimate_step",
           "megatron_flops", "model_flops"]
