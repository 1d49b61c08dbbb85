"""Collectives timed as an NCCL-like library runs them (simshard/report/algorithms.py): each
algorithm's alpha-beta time against its derivation in docs/estimate.md, the fastest chosen per
size and group, and the choice named in the time estimate."""

from __future__ import annotations

import math

import pytest

from simshard.report import algorithms as al
from simshard.report.algorithms import Span, fastest, payload
from simshard.report.comm import CommRecord, CommReport
from simshard.report.topology import LINK_CLASSES, Nodes, Topology

NV, IB = LINK_CLASSES["nvlink"], LINK_CLASSES["infiniband"]


def record(kind: str, group, min_bytes: int, device: int | None = None, instr: int = 0) -> CommRecord:
    group = tuple(group)
    return CommRecord(device=group[0] if device is None else device, instr=instr, position=0, source="op", kind=kind,
                      axes=("x",), group=group, bytes_sent=min_bytes, bytes_received=min_bytes, messages_sent=1,
                      messages_received=1, min_bytes=min_bytes)


def test_ring_tree_and_hierarchical_all_reduce_by_hand():
    # 64 nodes of 8: a = 8, b = 64, g = 512; N = 1 GiB and 64 KiB
    s = Span(8, 64, NV.latency, NV.bandwidth, IB.latency, IB.bandwidth)
    for n in (float(1 << 30), float(1 << 16)):
        ring = 2 * (512 - 64) * NV.latency + 2 * 63 * IB.latency + 2 * 511 / 512 * n / IB.bandwidth
        tree = 2 * (7 * NV.latency + 6 * IB.latency) + 2 * n / IB.bandwidth
        hier = 2 * 7 * (NV.latency + n / (8 * NV.bandwidth)) + 2 * 63 * (IB.latency + n / (512 * IB.bandwidth))
        assert al.ring_all_reduce(s, n) == pytest.approx(ring, rel=1e-12)
        assert al.tree_all_reduce(s, n) == pytest.approx(tree, rel=1e-12)
        assert al.hierarchical_all_reduce(s, n) == pytest.approx(hier, rel=1e-12)
        best = fastest("all_reduce", s, n)
        assert best.seconds == min(ring, tree, hier)
        assert best.algorithm == {ring: "ring", tree: "tree", hier: "hierarchical"}[min(ring, tree, hier)]
    # large: the hierarchical all-reduce moves N/8 across nodes per device, the others about 2N
    assert fastest("all_reduce", s, float(1 << 30)).algorithm == "hierarchical"
    # small: latency decides; the tree's log2(64) = 6 steps across nodes beat 63 and 126
    assert fastest("all_reduce", s, 1024.0).algorithm == "tree"


def test_one_node_rings_and_gathers_by_hand():
    s = Span(8, 1, NV.latency, NV.bandwidth, IB.latency, IB.bandwidth)
    n = float(1 << 20)
    assert fastest("all_reduce", s, n) == ("ring", 14 * NV.latency + 14 / 8 * n / NV.bandwidth)
    assert fastest("all_gather", s, n) == ("ring", 7 * NV.latency + 7 / 8 * n / NV.bandwidth)
    # across nodes: the gather's hierarchical form sends N/g per node step, N/a per node
    s = Span(8, 4, NV.latency, NV.bandwidth, IB.latency, IB.bandwidth)
    hier = 3 * (IB.latency + n / (32 * IB.bandwidth)) + 7 * (NV.latency + n / (8 * NV.bandwidth))
    ring = 24 * NV.latency + 3 * IB.latency + 31 / 32 * n / IB.bandwidth
    assert fastest("reduce_scatter", s, n).seconds == pytest.approx(min(hier, ring), rel=1e-12)
    a2a = 7 * (NV.latency + n / (32 * NV.bandwidth)) + 24 * (IB.latency + n / (32 * IB.bandwidth))
    assert fastest("all_to_all", s, n) == ("pairwise", pytest.approx(a2a, rel=1e-12))


def test_payload_from_the_analytic_minimum():
    assert payload("all_reduce", 4, 2 * 3 * 256) == 1024  # 2(g-1)/g N received at least
    assert payload("all_gather", 4, 3 * 256) == 1024
    assert payload("all_reduce", 1, 0) == 0.0


def test_the_topology_chooses_per_group_and_the_estimate_names_the_choice():
    topo = Topology({}, "nvlink", Nodes(8, "infiniband"))
    n = 1 << 10
    small = record("all_reduce", range(512), 2 * 511 * n // 512, instr=0)
    big_n = 1 << 30
    big = record("all_reduce", range(512), 2 * 511 * big_n // 512, instr=1)
    inside = record("all_reduce", range(8), 2 * 7 * n // 8, instr=2)
    est = CommReport([small, big, inside]).estimate(topo)
    assert est.algorithms == {0: "tree", 1: "hierarchical", 2: "ring"}
    assert est.total == pytest.approx(sum(topo.seconds(r) for r in (small, big, inside)), rel=1e-12)
    assert est.by_algorithm()[("all_reduce", "tree")] == pytest.approx(topo.seconds(small), rel=1e-12)
    # the direct algorithms simshard executes, as before: alpha m + b / beta
    direct = Topology({}, "nvlink", library="direct")
    assert direct.seconds(inside) == NV.latency * 1 + inside.bytes_sent / NV.bandwidth
    assert Topology.from_dict(direct.to_dict()) == direct


def test_without_nodes_every_device_is_reached_over_its_axes_link():
    topo = Topology({"x": "infiniband"})
    g, n = 8192, float(1 << 20)
    r = record("all_reduce", range(g), int(2 * (g - 1) * n / g))
    tree = 2 * math.ceil(math.log2(g)) * IB.latency + 2 * payload("all_reduce", g, r.min_bytes) / IB.bandwidth
    assert topo.choice(r) == ("tree", pytest.approx(tree, rel=1e-12))
    # the direct algorithm's 2(g-1) messages would take 2 * 8191 * 5 us of latency alone
    assert topo.seconds(r) < 2 * (g - 1) * IB.latency / 10
    with pytest.raises(ValueError, match="topology library 'mpi'"):
        Topology({}, "nvlink", library="mpi")
