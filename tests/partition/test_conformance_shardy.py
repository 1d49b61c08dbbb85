"""Conformance with Shardy's reshard-to-collectives: the ``reshard_to_collectives`` cases of
tests/data/shardy_propagation.json, one test id each.

Shardy's expected collectives are replayed on the layouts to count their bytes (received, summed
over devices): all-slice nothing, all-gather what each device lacks of its new block,
all-to-all ``(g-1)/g`` of the block, collective-permute the block on every device whose block
changes. ``ss.plan_reshard`` must reach the same layout with the same or fewer bytes, and its plan
must move the data bit for bit on the local executor.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import simshard as ss
from casedata import load_cases

from .helpers import check_plan

CASES = [c for c in load_cases("shardy_propagation.json") if c["kind"] == "reshard_to_collectives"]


def _meshes(case):
    return {n: ss.Mesh(axes, name=n) for n, axes in case["meshes"].items()}


def shardy_bytes(case, src: ss.Sharding, shape, itemsize=4) -> int:
    meshes = _meshes(case)
    cur = src
    total = 0
    for c in case["expected"]["collectives"]:
        nxt = ss.Sharding.parse(c["out_sharding"], meshes)
        A, B = ss.layout(cur, shape), ss.layout(nxt, shape)
        for d in A.devices:
            a, b = math.prod(A.local_shape(d)), math.prod(B.local_shape(d))
            if c["op"] == "all_gather":
                total += (b - a) * itemsize
            elif c["op"] == "all_to_all":
                g = math.prod(cur.mesh.axis_size(ss.AxisRef(*_ref(x))) for x in c["axes"])
                total += a * (g - 1) // g * itemsize
            elif c["op"] == "collective_permute":
                same = all(np.array_equal(x, y) for x, y in zip(A.indices(d), B.indices(d)))
                total += 0 if same else b * itemsize
            elif c["op"] == "all_slice":
                pass
            else:  # pragma: no cover
                raise KeyError(c["op"])
        cur = nxt
    return total


def _ref(text: str):
    if ":" not in text:
        return (text,)
    name, rest = text.split(":")
    pre, size = rest[1:].split(")")
    return (name, (int(pre), int(size)))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_shardy_reshard_case(case):
    meshes = _meshes(case)
    inp = case["inputs"][0]
    shape = tuple(inp["shape"])
    src = ss.Sharding.parse(inp["sharding"], meshes)
    dst = ss.Sharding.parse(case["ops"][0]["sharding"], meshes)
    plan = ss.plan_reshard(src, dst, shape, np.float32)
    assert ss.layout(plan.final, shape).same_as(ss.layout(dst, shape))
    check_plan(plan, np.random.default_rng(0))
    theirs = shardy_bytes(case, src, shape)
    assert plan.bytes <= theirs, f"simshard {plan.bytes} B, Shardy {theirs} B\n{plan}"
