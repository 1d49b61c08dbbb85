"""A program's cost without data: every device's schedule walked on shapes and dtypes alone.

``estimate`` traces, propagates and partitions ``f`` as ``ss.run`` does (its arguments may be
``ShapeDtype``s), then ``estimate_spmd`` walks the schedules in SPMD lockstep (``walk``), a buffer
being only its ``Block`` (shape, dtype): a compute instruction's result comes from its op's
``abstract_eval`` on the local operands (``local``), a collective's from its members' blocks
(``collectives``). What it records is what an executed run records, field for field: the
communication records of the direct collective algorithms (``report/collective_cost.py``, which
``runtime/collectives.py`` sends by) and each device's live bytes and peak (``report/ledger.py``,
the executor's accounting too). ``tests/report/test_estimate.py`` holds the two equal over the
programs library. What the walk computes once and looks up again is kept by value (``memo``).

With a ``Topology`` it adds the alpha-beta time (``CommReport.estimate``). A ``while_loop`` (its
trip count is data) and a ``cond`` / ``switch`` (its branch is data) cannot be walked without
data: they are refused, naming the op.
"""

from .api import Estimate, estimate, estimate_spmd
from .blocks import Block, EstimateError

__all__ = ["Block", "Estimate", "EstimateError", "estimate", "estimate_spmd"]
