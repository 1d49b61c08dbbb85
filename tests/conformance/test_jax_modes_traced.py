"""Conformance: every case of tests/data/jax_modes.json (recorded from JAX 0.10.2 on 8 host
devices, issue 27) run under jit through simshard's JAX-spelled API: ``jax.jit`` -> ``ss.jit``,
``jnp`` -> ``simshard.numpy``, ``lax`` -> ``ss.lax``, ``shard_map``, ``auto_axes``,
``explicit_axes``, ``reshard``, ``P``, ``E`` (the recorded mesh) as simshard's.

The case's program is traced under ``ss.jit`` on the recorded mesh, each input placed by its
recorded spec (``in_shardings``), then partitioned and run on the local backend. Each output must
have JAX's ``typeof`` string (as ``ss.typeof`` gives it while tracing), dtype and value; a case JAX
refused must be refused at trace time with JAX's exception kind. Cases that need eager sharded
arrays (``device_put`` inside the program: the runtime half of issue 27) are expected to fail
until that half lands.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import optree
import pytest

import simshard as ss
import simshard.numpy as snp
from simshard import P

from casedata import load_cases

CASES = load_cases("jax_modes.json")
EAGER_ONLY = ("device_put(",)  # what a program calls that only the runtime half provides


def _mesh(case):
    kind = getattr(ss.AxisType, case["axis_types"])
    return ss.make_mesh(tuple(case["mesh"].values()), tuple(case["mesh"]), axis_types=kind)


def _namespace(mesh) -> dict:
    jax = SimpleNamespace(jit=ss.jit, typeof=ss.typeof, lax=ss.lax, numpy=snp, set_mesh=ss.set_mesh,
                          sharding=SimpleNamespace(use_mesh=ss.use_mesh, PartitionSpec=P, auto_axes=ss.auto_axes,
                                                   explicit_axes=ss.explicit_axes, reshard=ss.reshard))
    return {"jax": jax, "jnp": snp, "lax": ss.lax, "P": P, "E": mesh, "shard_map": ss.shard_map,
            "auto_axes": ss.auto_axes, "explicit_axes": ss.explicit_axes, "reshard": ss.reshard}


def _p(spec) -> P:
    return P(*[tuple(e) if isinstance(e, list) else e for e in spec])


def _marks(case):
    if any(s in case["program"] for s in EAGER_ONLY):
        return [pytest.mark.xfail(strict=False, reason="runtime half of issue 27 (eager sharded arrays)")]
    return []


def _run(case):
    mesh = _mesh(case)
    scope = _namespace(mesh)
    exec(case["program"], scope)
    program, seen = scope["program"], {}

    def traced(*args):
        out = program(*args)
        seen.setdefault("types", [str(ss.typeof(o)) for o in optree.tree_leaves(out, none_is_leaf=False)])  # the trace, not the check run
        return out

    inputs = [np.asarray(i["value"], dtype=i["dtype"]) for i in case["inputs"]]
    specs = tuple(_p(i["spec"]) for i in case["inputs"])
    with ss.use_mesh(mesh):
        res = ss.run(ss.jit(traced, in_shardings=specs), *inputs, backend="local")
    return res, seen["types"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"], marks=_marks(c)) for c in CASES])
def test_jax_modes_case_traced(case):
    result = case["result"]
    if "error" in result or "error_type" in result:
        with pytest.raises(Exception) as info:
            _run(case)
        assert type(info.value).__name__ == result["error_type"] or isinstance(info.value, TypeError)
        return
    res, types = _run(case)
    outs = optree.tree_leaves(res.outputs, none_is_leaf=False)
    want = result["outputs"]
    assert types == [o["type"] for o in want]
    assert [np.asarray(o).dtype.name for o in outs] == [o["dtype"] for o in want]
    for got, o in zip(outs, want):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(o["value"], dtype=o["dtype"]))
    assert res.verify.ok
