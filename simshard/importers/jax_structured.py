"""The primitives with programs or shardings inside: calls (``jit``/``pjit``, ``closed_call``,
``checkpoint``, custom derivative rules: their primal), control flow (``scan``, ``while``,
``cond``), shardings (``sharding_constraint``, ``reshard``, ``device_put``) and ``shard_map`` with
its collectives. Each body is interpreted by ``jaxpr.interpret`` inside simshard's own
construct (``transforms.control``, ``manual.shard_map``), so it is traced and partitioned once.
"""

from __future__ import annotations

from ..ir.program import Aval
from ..manual import all_gather, all_to_all, axis_index, pmax, pmin, ppermute, psum, psum_scatter, shard_map
from ..tracing.explicit import mode as explicit_mode
from ..tracing.state import as_tracer, bind
from ..tracing.tracer import resolve_sharding
from ..transforms.control import scan, switch, while_loop
from .common import unsupported
from .jax_sharding import convert_mesh, convert_sharding, convert_spec, is_jax_unspecified


def place(x, jax_sharding, where: str, hard: bool = False):
    """``x`` with the sharding JAX states (none: ``x``): a reshard in explicit mode or where
    ``hard`` (JAX's ``reshard``, ``device_put``), else a sharding constraint seeding propagation."""
    x = as_tracer(x)
    s = stated_sharding(x, jax_sharding, where)
    if s is None:
        return x
    op = "reshard" if hard or explicit_mode.is_explicit() else "sharding_constraint"
    return bind(op, x, sharding=s, shardings=(s,))


def stated_sharding(x, jax_sharding, where: str):
    """The simshard Sharding of value ``x`` that a JAX sharding states (None where it states none)."""
    named = convert_sharding(jax_sharding, where)
    if named is None:
        return None
    return resolve_sharding(named, Aval(tuple(x.shape), x.dtype), where, named.mesh)


def _call(jaxpr_param: str):
    def rule(eqn, *args):
        return eqn.interpret(eqn.params[jaxpr_param], list(args))

    return rule


def _jit(eqn, *args):
    """A nested ``jax.jit``: its body inline, its in/out shardings as constraints (JAX's meaning)."""
    p = eqn.params
    ins = [place(a, s, f"jit {p.get('name', '')} in_shardings[{i}]") for i, (a, s) in
           enumerate(zip(args, p.get("in_shardings", (None,) * len(args))))]
    outs = eqn.interpret(p["jaxpr"], ins)
    return [place(o, s, f"jit {p.get('name', '')} out_shardings[{i}]") for i, (o, s) in
            enumerate(zip(outs, p.get("out_shardings", (None,) * len(outs))))]


def _custom_vjp(eqn, *args):
    jaxpr = eqn.params.get("call_jaxpr") or eqn.params.get("fun_jaxpr")
    return eqn.interpret(jaxpr, list(args))


def _scan(eqn, *args):
    p = eqn.params
    nc, ncarry = int(p["num_consts"]), int(p["num_carry"])
    consts, init, xs = list(args[:nc]), list(args[nc:nc + ncarry]), list(args[nc + ncarry:])

    def body(carry, x):
        outs = eqn.interpret(p["jaxpr"], consts + list(carry) + list(x or []))
        return outs[:ncarry], outs[ncarry:]

    carry, ys = scan(body, init, xs or None, length=int(p["length"]), reverse=bool(p["reverse"]))
    return list(carry) + list(ys or [])


def _while(eqn, *args):
    p = eqn.params
    cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
    cond_consts, body_consts, init = list(args[:cn]), list(args[cn:cn + bn]), list(args[cn + bn:])
    out = while_loop(lambda c: eqn.interpret(p["cond_jaxpr"], cond_consts + list(c))[0],
                     lambda c: eqn.interpret(p["body_jaxpr"], body_consts + list(c)), init)
    return list(out)


def _cond(eqn, index, *operands):
    branches = [lambda *ops, b=b: eqn.interpret(b, list(ops)) for b in eqn.params["branches"]]
    return list(switch(index, branches, *operands))


def _sharding_constraint(eqn, x):
    return place(x, eqn.params["sharding"], "with_sharding_constraint")


def _reshard(eqn, x):
    return place(x, eqn.params.get("dst_sharding", eqn.params.get("sharding")), "reshard", hard=True)


def _device_put(eqn, *xs):
    devices = eqn.params.get("devices", (None,) * len(xs))
    return [place(x, d, f"device_put[{i}]", hard=True) if hasattr(d, "spec") else x
            for i, (x, d) in enumerate(zip(xs, devices))]


def _shard_map(eqn, *args):
    """A ``shard_map`` region: the body per device, its specs as simshard's."""
    p = eqn.params
    mesh = convert_mesh(p["mesh"])
    manual = set(p.get("manual_axes", p.get("newly_manual_axes", mesh.axis_names)))
    if manual != set(mesh.axis_names):
        raise unsupported("JAX", "shard_map", f"manual over {sorted(manual)} only, the others auto: simshard's "
                          "manual regions take the whole mesh", eqn.where)
    in_specs = tuple(convert_spec(s) for s in p["in_specs"])
    out_specs = tuple(convert_spec(s) for s in p["out_specs"])
    body = shard_map(lambda *xs: tuple(eqn.interpret(p["jaxpr"], list(xs))), mesh=mesh, in_specs=in_specs,
                     out_specs=out_specs, check_rep=False)
    return list(body(*args))


def _axes(eqn, key: str = "axes"):
    if eqn.params.get("axis_index_groups") is not None:
        raise unsupported("JAX", eqn.name, "axis_index_groups have no simshard collective", eqn.where)
    axes = eqn.params[key]
    axes = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    if not all(isinstance(a, str) for a in axes):
        raise unsupported("JAX", eqn.name, f"positional axes {axes} (pmap's); name mesh axes", eqn.where)
    return axes[0] if len(axes) == 1 else axes


def _reduction(fn):
    return lambda eqn, *xs: [fn(x, _axes(eqn)) for x in xs]


STRUCTURED = {
    "jit": _jit, "pjit": _jit, "closed_call": _call("call_jaxpr"), "core_call": _call("call_jaxpr"),
    "checkpoint": _call("jaxpr"), "remat": _call("jaxpr"), "remat2": _call("jaxpr"), "call": _call("call_jaxpr"), "custom_jvp_call": _call("call_jaxpr"),
    "custom_vjp_call": _custom_vjp, "custom_vjp_call_jaxpr": _custom_vjp,
    "scan": _scan, "while": _while, "cond": _cond,
    "sharding_constraint": _sharding_constraint, "reshard": _reshard, "mesh_cast": _reshard, "device_put": _device_put,
    "shard_map": _shard_map,
    "psum": _reduction(psum), "psum_invariant": _reduction(psum), "psum2": _reduction(psum),
    "pmax": _reduction(pmax), "pmin": _reduction(pmin), "pbroadcast": lambda eqn, *xs: list(xs),
    "all_gather": lambda eqn, x: all_gather(x, _axes(eqn, "axis_name"), axis=int(eqn.params["all_gather_dimension"]),
                                            tiled=bool(eqn.params["tiled"])),
    "reduce_scatter": lambda eqn, x: psum_scatter(x, _axes(eqn, "axis_name"),
                                                  scatter_dimension=int(eqn.params["scatter_dimension"]),
                                                  tiled=bool(eqn.params["tiled"])),
    "ppermute": lambda eqn, x: ppermute(x, _axes(eqn, "axis_name"), tuple(map(tuple, eqn.params["perm"]))),
    "all_to_all": lambda eqn, x: all_to_all(x, _axes(eqn, "axis_name"), int(eqn.params["split_axis"]),
                                            int(eqn.params["concat_axis"]), tiled=bool(eqn.params.get("tiled", False))),
    "axis_index": lambda eqn: axis_index(_axes(eqn, "axis_name")),
}
__all__ = ["STRUCTURED", "is_jax_unspecified", "place", "stated_sharding"]
