"""JAX's explicit-mode reshape rule.

Size-1 dims carry no sharding and may come and go. Otherwise a reshape is typed only when it is
a *split* (one operand dim becomes several adjacent result dims) or a *merge* (several adjacent
operand dims become one), every other dim staying as it is:

* split: the dim's axes go to the result dims major to minor, each result dim taking axes while
  its size is still > 1, and each axis must divide what is left (``8@X -> (2@X, 4)``,
  ``8@(X,Y) -> (2@X, 4@Y)``, ``16@Y -> (2, 8)`` is an error);
* merge: the merged dims' axes join major to minor, allowed only when no unsharded dim sits
  before a sharded one (``(8@X,16) -> 128@X``, ``(8@X,16@Y) -> 128@(X,Y)``, ``(8,16@Y)`` is an
  error);
* anything else with a sharded operand is an error asking for ``out_sharding``.

The split / merge detection follows JAX's walk over the two shapes (including which odd shapes
it refuses), so the same reshapes are accepted and refused.
"""

from __future__ import annotations

import math
from typing import Sequence

from .types import Spec


class _Unsupported(Exception):
    pass


def reshape_error(call, x, new_sizes):
    return call.err(
        "This reshape is not supported. Please specify the sharding of the output via the `out_sharding` "
        f"argument of ss.lax.reshape. Got operand type: {x.long()}, new sizes: {tuple(new_sizes)}"
    )


def _group(src: Sequence[int], dst: Sequence[int]):
    """Match ``src`` dims to ``dst`` dims where exactly one src dim becomes several dst dims.

    Returns, per src dim, its size (kept as is) or the list of dst sizes it becomes; None when the
    shapes are not such a split. Raises _Unsupported where JAX refuses outright (two split dims)."""
    if len(dst) <= len(src):
        return None
    trailing = 0
    while src and dst and src[-1] == 1 and dst[-1] == 1:
        trailing += 1
        src, dst = src[:-1], dst[:-1]
    out: list = []
    i = j = 0
    splits = 0
    while j < len(dst):
        if i >= len(src):
            raise _Unsupported
        if src[i] == dst[j]:
            out.append(src[i])
        else:
            splits += 1
            if splits > 1:
                raise _Unsupported
            group = [dst[j]]
            # grow the group until it multiplies to src[i] (and swallows following size-1 dims,
            # unless the next dst dim already matches the next src dim)
            while math.prod(group) != src[i] or (j + 1 < len(dst) and dst[j + 1] == 1):
                if math.prod(group) > src[i]:
                    return None
                if math.prod(group) == src[i] and i + 1 < len(src) and dst[j + 1] == src[i + 1]:
                    break
                j += 1
                if j >= len(dst):
                    return None
                group.append(dst[j])
            out.append(group)
        i += 1
        j += 1
    out.extend([1] * trailing)
    if len(out) != len(src) + trailing:
        raise _Unsupported
    return out


def _assign(mesh, axes: Sequence[str], sizes: Sequence[int]) -> list[tuple[str, ...]]:
    """Hand ``axes`` (major to minor) to dims of ``sizes``: a dim takes axes while it is > 1."""
    it = iter(axes)
    out = []
    for size in sizes:
        got = []
        while size > 1:
            a = next(it, None)
            if a is None:
                break
            size, rem = divmod(size, mesh.axis_size(a))
            if rem:
                raise _Unsupported
            got.append(a)
        out.append(tuple(got))
    if next(it, None) is not None:
        raise _Unsupported
    return out


def reshape_spec(call, x, new_sizes: tuple[int, ...]) -> Spec:
    spec = x.spec
    shape = tuple(x.shape)
    if not any(spec):
        return ((),) * len(new_sizes)
    mesh = call.mesh
    if [n for n in shape if n != 1] == [n for n in new_sizes if n != 1]:
        kept = iter(s for n, s in zip(shape, spec) if n != 1)
        return tuple(() if n == 1 else next(kept) for n in new_sizes)
    try:
        split = _group(shape, new_sizes)
        if split is not None:
            out: list[tuple[str, ...]] = []
            for g, s in zip(split, spec):
                if isinstance(g, list):
                    out.extend(_assign(mesh, s, g) if s else [()] * len(g))
                else:
                    out.append(s)
            return tuple(out)
        merge = _group(new_sizes, shape)
        if merge is not None:
            out = []
            it = iter(spec)
            for n, g in zip(new_sizes, merge):
                if isinstance(g, list):
                    parts = [next(it) for _ in g]
                    if not any(parts):
                        out.append(())
                        continue
                    while parts and not parts[-1]:
                        parts.pop()
                    if any(not p for p in parts):
                        raise _Unsupported
                    out.extend(_assign(mesh, [a for p in parts for a in p], [n]))
                else:
                    out.append(next(it))
            return tuple(out)
    except (_Unsupported, IndexError):
        pass
    raise reshape_error(call, x, new_sizes)
