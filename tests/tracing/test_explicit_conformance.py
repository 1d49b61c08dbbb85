"""Conformance: every recorded JAX explicit-sharding case (tests/data/jax_explicit.json), one test id each.

Each case's ``op`` is evaluated as the body of ``lambda a, b, c: ...`` with ``jnp`` -> simshard.numpy,
``jax.lax`` / ``lax`` -> ss.lax, ``P``, ``reshard``, ``jax.sharding.auto_axes``, under ``ss.jit`` on the
recorded mesh (every axis Explicit) with inputs of the recorded shapes and specs. A success must give
the same spec and type string (JAX's long dtype spelling, ``float32[8@X,16]``) both from the traced
program and from ``ss.typeof`` while tracing; an error must be raised at trace time with JAX's
exception kind and JAX's message (up to the abstract mesh's device fields, which simshard does not
have, and ``jax.lax`` -> ``ss.lax``).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import simshard as ss
import simshard.numpy as snp
from simshard import P
from simshard.tracing.explicit.types import entry, spec_of, type_str, unreduced_of

from casedata import load_cases

CASES = load_cases("jax_explicit.json")


def _softmax(x, axis=-1):
    unnormalized = snp.exp(x - snp.max(x, axis, keepdims=True))
    return unnormalized / snp.sum(unnormalized, axis, keepdims=True)


JAX = SimpleNamespace(
    nn=SimpleNamespace(softmax=_softmax),
    lax=ss.lax,
    numpy=snp,
    typeof=ss.typeof,
    sharding=SimpleNamespace(
        auto_axes=ss.auto_axes, explicit_axes=ss.explicit_axes, reshard=ss.reshard, PartitionSpec=P,
        get_abstract_mesh=ss.get_abstract_mesh,
    ),
)
NAMESPACE = {"jnp": snp, "jax": JAX, "lax": ss.lax, "P": P, "reshard": ss.reshard, "np": snp}

ERROR_KINDS = {
    "ShardingTypeError": ss.ShardingTypeError,
    "DuplicateSpecError": ss.DuplicateSpecError,
    "ValueError": ValueError,
}


def _p(spec) -> P:
    return P(*[tuple(e) if isinstance(e, list) else e for e in spec])


def _json_spec(spec) -> list:
    out = []
    for d in spec:
        e = entry(d)
        out.append(list(e) if isinstance(e, tuple) else e)
    return out


def _jax_message(text: str) -> str:
    return text.replace(", device_kind=cpu, num_cores=None, platform=cpu", "").replace("jax.lax.reshape", "ss.lax.reshape")


def _run(case):
    mesh = ss.make_mesh(tuple(case["mesh"].values()), tuple(case["mesh"]), axis_types=ss.AxisType.Explicit)
    inputs = [ss.ShapeDtype(i["shape"], i["dtype"], sharding=_p(i["spec"])) for i in case["inputs"]]
    names = "abc"[: len(inputs)]
    body = eval(f"lambda {', '.join(names)}: {case['op']}", dict(NAMESPACE))
    seen = {}

    def fn(*args):
        out = body(*args)
        seen["type"] = ss.typeof(out)
        return out

    with ss.use_mesh(mesh):
        return ss.jit(fn).trace(*inputs), seen


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_jax_explicit_case(case):
    result = case["result"]
    if "error" in result:
        kind = ERROR_KINDS[result["error_type"]]
        with pytest.raises(Exception) as info:
            _run(case)
        err = info.value
        assert isinstance(err, kind), f"{type(err).__name__}: {err}"
        if kind is ValueError:
            assert not isinstance(err, ss.ShardingTypeError)
        assert str(err).splitlines()[0] == _jax_message(result["error"])
        return
    program, seen = _run(case)
    (out,) = program.outputs
    sharding = program.shardings[out]
    rank = out.aval.ndim
    assert list(out.aval.shape) == result["shape"]
    assert out.aval.dtype.name == result["dtype"]
    assert _json_spec(spec_of(sharding, rank)) == result["spec"]
    assert sorted(unreduced_of(sharding)) == sorted(result.get("unreduced", []))
    assert type_str(out.aval.shape, out.aval.dtype, spec_of(sharding, rank), unreduced_of(sharding)) == result["type_str"]
    assert str(seen["type"]) == result["traced_type"]
    assert seen["type"].type_string(long=False) == program.type_string(out)
