"""The one-shot all-reduce: bit for bit the direct one (the canonical order kept), one message per
peer in one step, ``(g-1)N`` bytes per device."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import simshard as ss
from runtime_helpers import floats, fold, run_devices, same_bits
from simshard.sharding.reduce_ops import REDUCE_OPS
from simshard.runtime.core.collectives import all_reduce, oneshot_all_reduce


@settings(max_examples=60, deadline=None)
@given(g=st.integers(1, 6), ids=st.permutations(range(8)), op=st.sampled_from(sorted(REDUCE_OPS)),
       ndim=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_oneshot_all_reduce_equals_direct(g, ids, op, ndim, seed):
    group = tuple(ids[:g])
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(0, 5, size=ndim))
    xs = {d: floats(rng, shape) for d in group}
    direct, _ = run_devices(group, lambda ch: all_reduce(ch, xs[ch.me], group, op))
    one, t = run_devices(group, lambda ch: oneshot_all_reduce(ch, xs[ch.me], group, op))
    ref = fold([xs[p] for p in group], op)
    n = xs[group[0]].nbytes
    for d in group:
        assert same_bits(one[d], direct[d]) and same_bits(one[d], ref), (d, op)
        totals = t.log.totals(d, 0)
        assert totals.sent == (g - 1) * n  # the whole buffer to every peer
        assert totals.messages_sent == ((g - 1) if n else 0)  # one step, one message per peer


def test_ss_run_oneshot_reports_its_extra_bytes():
    mesh = ss.Mesh({"x": 4})
    x = ss.exact_inputs((4, 8), seed=0)
    res = ss.run(lambda x: x.sum(axis=0), x, mesh=mesh, in_shardings=(ss.P("x", None),), backend="local",
                 algorithm="oneshot")
    assert res.verify.bitwise
    # each device sends its whole [8] float32 partial to 3 peers: 96 B, against a minimum of 48 B
    assert [(r.bytes_sent, r.min_bytes) for r in res.comm.records] == [(96, 48)] * 4
    assert res.comm.ratio == 2.0
