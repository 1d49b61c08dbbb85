"""The planner's per-object caches: a value computed once per live object, dropped when the object
goes (no module-level dict keeps every array or layout ever planned alive), and identity keys
that hold their object."""

import gc
import weakref

import numpy as np

import simshard as ss
from simshard.partition.reshard.identity_cache import ByIdentity, IdentityCache
from simshard.partition.reshard.plan import local_shapes, span
from simshard.sharding.layout import layout


def test_computed_once_per_object_and_forgotten_with_it():
    calls = []
    cache = IdentityCache(lambda a: calls.append(1) or int(a.sum()))
    a = np.arange(5)
    assert cache(a) == 10 and cache(a) == 10 and len(calls) == 1
    assert cache(np.arange(5)) == 10 and len(calls) == 2  # another object: computed again
    gc.collect()
    assert len(cache) == 1  # the temporary's entry went with it
    del a
    gc.collect()
    assert len(cache) == 0


def test_objects_without_weak_references_are_computed_each_time():
    cache = IdentityCache(len)
    assert cache((1, 2, 3)) == 3 and len(cache) == 0


def test_the_planner_keeps_no_layout_or_array_alive():
    mesh = ss.make_mesh((2, 2), ("x", "y"), devices=4)
    L = layout(ss.NamedSharding(mesh, ss.P("x", "y")), (8, 6))
    alive = weakref.ref(L)
    assert dict(local_shapes(L)) == {d: (4, 3) for d in mesh.device_ids}
    ix = np.array([3, 4, 5])
    assert tuple(span(ix)) == (3, 5, True)
    arr = weakref.ref(ix)
    del L, ix
    gc.collect()
    assert alive() is None and arr() is None


def test_identity_keys_hold_their_object():
    a, b = np.zeros(2), np.zeros(2)
    memo = {ByIdentity(a): 1}
    assert ByIdentity(a) in memo and ByIdentity(b) not in memo
    del a
    gc.collect()
    assert next(iter(memo)).obj is not None  # the key keeps it: its id names no other object
