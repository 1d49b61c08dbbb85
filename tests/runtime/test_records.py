"""A device notes only the id each collective ran under (``records.Ran``); its record is made when
read, from the program: ``collective_run_as`` must find, for every id a run can use, the very
instruction the executor ran under it, however deep in loops, branches and whiles."""

from __future__ import annotations

import numpy as np

import simshard as ss
from simshard import P
from simshard.spmd import CONTROL, collective_run_as

MESH = ss.Mesh({"x": 2, "y": 2})


def _nested(ws, x):
    """A scan whose body holds a cond on a traced predicate, a scan of its own and a while."""
    def layer(h, w):
        h = ss.lax.cond(np.sum(h) > 0, lambda h: np.maximum(h @ w, 0), lambda h: h @ w * np.float32(2), h)
        h, _ = ss.lax.scan(lambda c, k: (c @ w + k, None), h, np.arange(2, dtype=np.float32))
        h = ss.lax.while_loop(lambda h: np.sum(np.abs(h)) < 1e4, lambda h: h @ w + 1.0, h)
        return h, np.sum(h)
    return ss.lax.scan(layer, x, ws)


def run_as(ins, while_trips: int = 3):
    """Every collective ``ins`` can run, as the executor runs it (each iteration of a loop, each
    branch of a switch, the first ``while_trips`` iterations of a while)."""
    if ins.is_collective:
        yield ins
    elif ins.kind == "loop":
        for k in range(ins.length):
            for b in ins.iteration(k):
                yield from run_as(b, while_trips)
    elif ins.kind == "switch":
        for k in range(len(ins.branches)):
            for b in ins.chosen(k):
                yield from run_as(b, while_trips)
    elif ins.kind == "while":
        for k in range(while_trips):
            for b in sum(ins.iteration(k), ()):
                yield from run_as(b, while_trips)


def test_every_collective_a_run_can_run_is_found_by_its_id():
    ws, x = ss.exact_inputs([(3, 4, 4), (8, 4)], seed=1, max_abs=1)
    res = ss.run(_nested, ws, x, mesh=MESH, in_shardings=(P(None, None, "y"), P("x", None)), backend="local")
    assert res.verify.bitwise
    schedule = res.spmd.schedule(0)
    assert {i.kind for i in schedule.instrs} & CONTROL
    seen = 0
    for top in schedule.instrs:
        for ins in run_as(top):
            assert collective_run_as(top, ins.id) == ins
            seen += 1
    assert seen > 3 * 4  # collectives in every layer's branch, inner scan and while


def test_records_made_when_read_name_what_each_device_ran():
    ws, x = ss.exact_inputs([(3, 4, 4), (8, 4)], seed=1, max_abs=1)
    res = ss.run(_nested, ws, x, mesh=MESH, in_shardings=(P(None, None, "y"), P("x", None)), backend="local")
    ex = res.execution
    for d in ex.spmd.devices:
        ran = ex.ran[d]
        mine = [r for r in ex.records if r.device == d]
        assert [r.instr for r in mine] == [row[0] for row in ran] and ran
        top = ex.spmd.schedule(d).instrs
        for r, row in zip(mine, ran):
            ins = collective_run_as(top[row[1]], row[0])
            assert (r.kind, r.source, r.position) == (ins.kind, ins.source, row[1])
            assert r.messages_sent == ex.transfers.totals(d, row[0]).messages_sent
