"""A small reference executor for schedules (tests only).

It runs every device's Schedule in lockstep, following the instruction docstrings of
simshard/partition/schedule.py literally, and counts the bytes each collective moves with
direct algorithms (every byte sent once to the device that needs it; an all-reduce is a
reduce-scatter plus an all-gather). The real executor is simshard.runtime.local; this one lets the
planner be tested by execution independently of it, and cross-checks it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from simshard.ops import get_op
from simshard.spmd import (
    AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Literal, Pad, ReduceScatter, Schedule, Slice,
)
from simshard.sharding.reduce_ops import REDUCE_OPS


@dataclass
class RefRun:
    outputs: dict[int, list[np.ndarray]]
    received: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))  # id -> device -> bytes
    sent: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    kinds: dict[int, str] = field(default_factory=dict)
    peak: dict[int, int] = field(default_factory=dict)

    def total_received(self, ids=None) -> int:
        return sum(sum(v.values()) for k, v in self.received.items() if ids is None or k in ids)


def _split(n: int, g: int) -> list[int]:
    base, extra = divmod(n, g)
    return [base + (1 if i < extra else 0) for i in range(g)]


def run(schedules, inputs: dict[int, list[np.ndarray]]) -> RefRun:
    if hasattr(schedules, "schedules"):
        schedules = schedules.schedules
    scheds: dict[int, Schedule] = {s.device: s for s in schedules}
    devices = sorted(scheds)
    n = len(scheds[devices[0]].instrs)
    for d in devices:
        assert len(scheds[d].instrs) == n, f"device {d} has {len(scheds[d].instrs)} instructions, device {devices[0]} {n}"
    mem: dict[int, dict[int, np.ndarray]] = {d: {} for d in devices}
    for d in devices:
        for b, a in zip(scheds[d].inputs, inputs[d]):
            mem[d][b] = np.asarray(a)
    res = RefRun({})
    peak = {d: 0 for d in devices}
    for pos in range(n):
        instrs = {d: scheds[d].instrs[pos] for d in devices}
        ids = {i.id for i in instrs.values()}
        assert len(ids) == 1, f"position {pos}: ids differ across devices {ids}"
        iid = ids.pop()
        first = instrs[devices[0]]
        if first.is_collective:
            kinds = {type(i) for i in instrs.values()}
            assert len(kinds) == 1, f"instruction {iid}: collective kinds differ {kinds}"
            res.kinds[iid] = first.kind
            _collective(first, instrs, mem, res, iid)
        else:
            for d, ins in instrs.items():
                assert not ins.is_collective
                _local(ins, mem[d])
        for d in devices:
            peak[d] = max(peak[d], sum(a.nbytes for a in mem[d].values()))
    res.outputs = {d: [mem[d][b] for b in scheds[d].outputs] for d in devices}
    res.peak = peak
    return res


def _local(ins, m: dict[int, np.ndarray]) -> None:
    if isinstance(ins, Compute):
        op = get_op(ins.op)
        with np.errstate(all="ignore"):
            outs = op.kernel(*[m[b] for b in ins.inputs], **dict(ins.params))
        assert len(outs) == len(ins.outputs), f"{ins}: {len(outs)} results"
        for b, o in zip(ins.outputs, outs):
            m[b] = np.asarray(o)
    elif isinstance(ins, Literal):
        m[ins.dst] = np.array(ins.value, copy=True) if isinstance(ins.value, np.ndarray) else ins.value
    elif isinstance(ins, Slice):
        src = m[ins.src]
        assert len(ins.index) == src.ndim, f"{ins}: index rank {len(ins.index)} for shape {src.shape}"
        m[ins.dst] = np.array(src[np.ix_(*[np.asarray(i, dtype=np.intp) for i in ins.index])]) if src.ndim else src.copy()
    elif isinstance(ins, Pad):
        src = m[ins.src]
        widths = [(0, t - s) for s, t in zip(src.shape, ins.shape)]
        assert all(w >= 0 for _, w in widths), f"{ins}: cannot pad {src.shape} to {ins.shape}"
        m[ins.dst] = np.pad(src, widths, constant_values=ins.value) if src.ndim else src.copy()
    elif isinstance(ins, Free):
        for b in ins.bufs:
            assert b in m, f"{ins}: buffer {b} is not live"
            del m[b]
    else:  # pragma: no cover
        raise AssertionError(ins)


def _collective(first, instrs, mem, res: RefRun, iid: int) -> None:
    rec, snt = res.received[iid], res.sent[iid]
    for d in instrs:
        rec.setdefault(d, 0)
        snt.setdefault(d, 0)
    if isinstance(first, CollectivePermute):
        pairs = first.pairs
        for d, ins in instrs.items():
            assert ins.pairs == pairs, f"instruction {iid}: pairs differ across devices"
        targets = [t for _, t in pairs]
        assert len(set(targets)) == len(targets), f"instruction {iid}: a device receives twice"
        out = {}
        for s, t in pairs:
            out[t] = np.array(mem[s][instrs[s].src], copy=True)
            if s != t:
                rec[t] += out[t].nbytes
                snt[s] += out[t].nbytes
        for d, ins in instrs.items():
            mem[d][ins.dst] = out[d] if d in out else np.zeros(ins.shape, dtype=ins.dtype)
        return
    # group collectives: every member lists the same group
    done = set()
    for d, ins in instrs.items():
        if d in done:
            continue
        g = ins.group
        assert d in g, f"instruction {iid}: device {d} not in its group {g}"
        for m_ in g:
            assert instrs[m_].group == g, f"instruction {iid}: devices {d} and {m_} disagree on the group"
        done.update(g)
        xs = [mem[m_][instrs[m_].src] for m_ in g]
        if isinstance(ins, AllGather):
            out = np.concatenate(xs, axis=ins.axis)
            for i, m_ in enumerate(g):
                mem[m_][instrs[m_].dst] = out.copy()
                rec[m_] += out.nbytes - xs[i].nbytes
                snt[m_] += xs[i].nbytes * (len(g) - 1)
        elif isinstance(ins, (ReduceScatter, AllReduce)):
            op = REDUCE_OPS[ins.reduce_op]
            shapes = {x.shape for x in xs}
            assert len(shapes) == 1, f"instruction {iid}: reduce over differing shapes {shapes}"
            order = getattr(ins, "reduce_order", ()) or g
            total = op.reduce([mem[m_][instrs[m_].src] for m_ in order])
            item = total.dtype.itemsize
            if isinstance(ins, ReduceScatter):
                for m_ in g:
                    assert instrs[m_].splits == ins.splits and instrs[m_].axis == ins.axis
                assert sum(ins.splits) == total.shape[ins.axis], f"instruction {iid}: splits {ins.splits} for {total.shape}"
                cuts = np.cumsum((0,) + tuple(ins.splits))
                N = total.size
                for i, m_ in enumerate(g):
                    sl = [slice(None)] * total.ndim
                    sl[ins.axis] = slice(cuts[i], cuts[i + 1])
                    chunk = np.array(total[tuple(sl)])
                    mem[m_][instrs[m_].dst] = chunk
                    rec[m_] += chunk.nbytes * (len(g) - 1)
                    snt[m_] += N * item - chunk.nbytes
            else:
                N = total.size
                cs = _split(N, len(g))
                for i, m_ in enumerate(g):
                    mem[m_][instrs[m_].dst] = total.copy()
                    rec[m_] += (cs[i] * (len(g) - 1) + (N - cs[i])) * item
                    snt[m_] += ((N - cs[i]) + cs[i] * (len(g) - 1)) * item
        elif isinstance(ins, AllToAll):
            for m_ in g:
                assert instrs[m_].split_axis == ins.split_axis and instrs[m_].concat_axis == ins.concat_axis
            chunks = []
            for i, m_ in enumerate(g):
                sp = instrs[m_].splits
                x = xs[i]
                assert len(sp) == len(g) and sum(sp) == x.shape[ins.split_axis], f"instruction {iid}: splits {sp} for {x.shape}"
                cuts = np.cumsum((0,) + tuple(sp))
                parts = []
                for j in range(len(g)):
                    sl = [slice(None)] * x.ndim
                    sl[ins.split_axis] = slice(cuts[j], cuts[j + 1])
                    parts.append(np.array(x[tuple(sl)]))
                chunks.append(parts)
            for j, m_ in enumerate(g):
                got = [chunks[i][j] for i in range(len(g))]
                mem[m_][instrs[m_].dst] = np.concatenate(got, axis=ins.concat_axis)
                rec[m_] += sum(c.nbytes for i, c in enumerate(got) if i != j)
                snt[m_] += sum(chunks[j][k].nbytes for k in range(len(g)) if k != j)
        else:  # pragma: no cover
            raise AssertionError(ins)
