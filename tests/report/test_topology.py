"""Topologies (simshard/report/topology.py): link classes by name, and nodes, under which a
collective spanning nodes is costed, with ``library="direct"``, as the hierarchical algorithm
(hand-derived formulas; the default library's algorithms are tests/report/test_algorithms.py's)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import simshard as ss
from simshard import P
from simshard.report.comm import CommRecord
from simshard.report.topology import LINK_CLASSES, Link, Nodes, Topology

NV, IB = LINK_CLASSES["nvlink"], LINK_CLASSES["infiniband"]


def record(kind: str, group, min_bytes: int, sent: int, messages: int) -> CommRecord:
    return CommRecord(device=group[0], instr=0, position=0, source="op", kind=kind, axes=("x",), group=tuple(group),
                      bytes_sent=sent, bytes_received=sent, messages_sent=messages, messages_received=messages,
                      min_bytes=min_bytes)


def test_links_by_class_name_and_unknown_names_refused():
    t = Topology({"x": "infiniband"}, "nvlink")
    assert t.link(("x",)) == IB and t.link(("y",)) == NV
    assert t.link(("x:(2)2",)) == IB  # a sub-axis uses its axis's link
    assert Topology({"x": "infiniband"}).link(("x:(1)2", "x:(2)4")) == IB
    with pytest.raises(ValueError, match="unknown link class 'warp-drive'"):
        Topology({"x": "warp-drive"})


def test_a_group_inside_one_node_keeps_the_flat_formula():
    r = record("all_reduce", range(8), 2 * 7 * 64, 2 * 7 * 64, 14)
    flat = Topology({}, "nvlink", library="direct")
    assert Topology({}, "nvlink", Nodes(8, "infiniband"), library="direct").seconds(r) == flat.seconds(r) == \
        14 * NV.latency + 896 / NV.bandwidth


def test_hierarchical_collectives_across_nodes_by_hand():
    g, a, b = 16, 8, 2
    t = Topology({}, "nvlink", Nodes(8, "infiniband"), library="direct")
    n = 1 << 20  # an all-reduce of 1 MiB: its analytic minimum is 2(g-1)/g N
    ar = record("all_reduce", range(g), 2 * (g - 1) * n // g, 2 * (g - 1) * n // g, 2 * (g - 1))
    want = 2 * (a - 1) * (NV.latency + n / a / NV.bandwidth) + 2 * (b - 1) * (IB.latency + n / g / IB.bandwidth)
    assert t.seconds(ar) == pytest.approx(want, rel=1e-12)
    ag = record("all_gather", range(g), (g - 1) * n // g, (g - 1) * n // g, g - 1)  # N the gathered result
    want = (b - 1) * (IB.latency + n / g / IB.bandwidth) + (a - 1) * (NV.latency + n / a / NV.bandwidth)
    assert t.seconds(ag) == pytest.approx(want, rel=1e-12)
    a2a = record("all_to_all", range(g), (g - 1) * n // g, (g - 1) * n // g, g - 1)  # each device holds N
    want = (a - 1) * (NV.latency + n / g / NV.bandwidth) + (g - a) * (IB.latency + n / g / IB.bandwidth)
    assert t.seconds(a2a) == pytest.approx(want, rel=1e-12)
    # fewer messages: at 1 MiB the hierarchical all-reduce even beats a flat one on NVLink alone
    # (14 + 2 messages against 30); at 1 GiB bandwidth decides: it lies between flat NVLink and
    # flat InfiniBand
    assert t.seconds(ar) < Topology({}, "nvlink", library="direct").seconds(ar)
    big = 1 << 30
    ar = record("all_reduce", range(g), 2 * (g - 1) * big // g, 2 * (g - 1) * big // g, 2 * (g - 1))
    assert Topology({}, "nvlink", library="direct").seconds(ar) < t.seconds(ar) < \
        Topology({}, "infiniband", library="direct").seconds(ar)


def test_a_run_across_two_nodes_and_the_topology_round_trips_through_json(tmp_path):
    def f(x, w):
        return x @ w

    args = ss.exact_inputs([(4, 64), (64, 8)], seed=0)
    res = ss.run(f, *args, mesh=ss.Mesh({"x": 2, "y": 8}), in_shardings=(P(None, ("x", "y")), P(("x", "y"), None)),
                 backend="local")
    t = Topology({"y": "nvlink"}, "infiniband", Nodes(8, "infiniband"), library="direct")
    (r,) = {r.instr: r for r in res.comm.records}.values()  # one all-reduce of the [4, 8] partial over 16 devices
    n = 4 * 8 * 4
    want = 2 * 7 * (IB.latency + n / 8 / IB.bandwidth) + 2 * (IB.latency + n / 16 / IB.bandwidth)  # axes x,y: default
    assert res.comm.estimate(t).total == pytest.approx(want, rel=1e-12)
    back = Topology.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t and back.nodes == Nodes(8, Link(IB.bandwidth, IB.latency))
