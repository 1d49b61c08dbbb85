"""Run a traced program partitioned, on the local executor, and check it bitwise (tests only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import simshard as ss
from simshard.runtime.local.backend import run_local
from simshard.runtime.core.placement import shard_inputs
from simshard.report.opcheck import check_ops


@dataclass
class Ran:
    spmd: object
    execution: object
    outputs: tuple

    def received(self, device: int) -> int:
        return sum(r.bytes_received for r in self.execution.records if r.device == device)

    @property
    def max_received(self) -> int:
        return max((self.received(d) for d in self.spmd.devices), default=0)

    @property
    def total_received(self) -> int:
        return sum(r.bytes_received for r in self.execution.records)

    def kinds(self) -> list[str]:
        seen = {}
        for r in self.execution.records:
            seen.setdefault(r.instr, r.kind)
        return [seen[k] for k in sorted(seen)]


def bits(a: np.ndarray) -> np.ndarray:
    """Per element, its bit pattern as one integer (so -0.0 and NaN payloads count)."""
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.dtype(f"u{a.dtype.itemsize}")).reshape(a.shape)


def run_partitioned(program, args, expected=None) -> Ran:
    """Partition ``program``, run it on ``args`` with run_local; outputs must equal ``expected``
    (default: the program evaluated whole) bit for bit, every op checks bitwise op by op
    (``simshard.report.opcheck``), and every collective must move exactly its analytic minimum."""
    spmd = ss.partition(program)
    for s in spmd.schedules:  # plain data: the msgpack round trip is exact
        assert type(s).from_bytes(s.to_bytes()).to_bytes() == s.to_bytes()
    ex = run_local(spmd, shard_inputs(spmd, *args), trace_values=True)
    # op by op too: exact inputs, so every op's assembled result equals the op run whole on the
    # assembled inputs bit for bit (pending reductions combined in canonical order)
    for c in check_ops(spmd, ex.values, args):
        assert c.bitwise, c.describe()
    outs = ex.assemble()
    if expected is None:
        expected = ss.evaluate(program, *args)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert len(outs) == len(expected)
    for k, (got, want) in enumerate(zip(outs, expected)):
        want = np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype, (k, got.shape, got.dtype, want.shape, want.dtype)
        same = bits(got) == bits(want)
        if not same.all():
            bad = tuple(np.argwhere(~same)[0]) if got.ndim else ()
            raise AssertionError(f"output {k} differs at {tuple(bad)}: {got[tuple(bad)]!r} vs {want[tuple(bad)]!r}")
    for r in ex.records:
        assert r.bytes_received == r.min_bytes, f"{r.kind} [{r.instr}] on {r.device}: {r.bytes_received} B, minimum {r.min_bytes}"
    return Ran(spmd, ex, outs)
