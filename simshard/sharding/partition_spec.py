"""JAX's PartitionSpec: ``P("x", ("y", "z"), None)``, and its Python spelling parsed from text.

``P`` entries are ``None`` (replicated), an axis name, a tuple of names (major to minor) or
``P.UNCONSTRAINED`` (an open, empty dimension). Missing trailing entries are replicated.
``unreduced=`` names axes holding pending sums. A ``P`` names no mesh: bound to one, it is a
``NamedSharding`` (``dims``), which converts to and from ``Sharding`` exactly.
"""

from __future__ import annotations

import warnings
from typing import Sequence

from ..errors import ShardingError


class _Unconstrained:
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "P.UNCONSTRAINED"

    def __reduce__(self):
        return (_Unconstrained, ())


UNCONSTRAINED = _Unconstrained()


class P(tuple):
    """A PartitionSpec: one entry per leading tensor dimension."""

    UNCONSTRAINED = UNCONSTRAINED

    def __new__(cls, *entries, unreduced: Sequence[str] = ()):
        norm = []
        for e in entries:
            if e is None or e is UNCONSTRAINED or isinstance(e, str):
                norm.append(e)
            elif isinstance(e, (tuple, list)):
                if not all(isinstance(a, str) for a in e):
                    raise ShardingError("invalid-spec", f"P entry {e!r} must hold axis names only")
                norm.append(tuple(e) if len(e) else None)
            else:
                raise ShardingError("invalid-spec", f"P entry {e!r} must be None, an axis name, a tuple of names or P.UNCONSTRAINED")
        self = super().__new__(cls, norm)
        self.unreduced = tuple(sorted(set(unreduced)))  # a set of axes, as in JAX
        return self

    def __repr__(self) -> str:
        body = ", ".join(repr(e) for e in self)
        if self.unreduced:
            body += (", " if body else "") + "unreduced={" + ", ".join(map(repr, self.unreduced)) + "}"
        return f"P({body})"

    def __eq__(self, other):
        return isinstance(other, P) and tuple(self) == tuple(other) and self.unreduced == other.unreduced

    def __hash__(self):
        return hash((tuple(self), self.unreduced))


MAX_TEXT = 10_000  # characters of PartitionSpec text read at most


def parse_partition_spec(text: str) -> P:
    """A ``P`` from its Python spelling: ``P("x", None)``, ``PartitionSpec(("x", "y"))``,
    ``P("x", P.UNCONSTRAINED, unreduced={"y"})`` (``jax.sharding.`` prefixes allowed).

    Read with ``ast`` (names and literals only, nothing is evaluated), so command-line text can
    be given the way it is written in a program."""
    import ast

    def fail(why: str):
        shown = text if len(text) <= 80 else text[:80] + "..."
        raise ShardingError("parse", f"cannot read a PartitionSpec from {shown!r}: {why}")

    if not isinstance(text, str):
        raise ShardingError("parse", f"expected PartitionSpec text, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        fail(f"{len(text)} characters is longer than any PartitionSpec ({MAX_TEXT} at most)")
    try:
        with warnings.catch_warnings():  # "1x" warns on stderr (invalid decimal literal): refuse it instead
            warnings.simplefilter("error", SyntaxWarning)
            node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        fail(f"{e.msg} at column {e.offset}")
    except (MemoryError, RecursionError):  # Python's parser gives up on deep nesting this way
        fail("brackets nested too deeply")
    except UnicodeEncodeError as e:  # the parser reads UTF-8, which has no lone surrogates
        fail(f"character {e.object[e.start]!r} at column {e.start} is a lone surrogate, which no text holds")
    if not isinstance(node, ast.Call) or _dotted(node.func).split(".")[-1] not in ("P", "PartitionSpec"):
        fail("expected P(...) or PartitionSpec(...)")

    def entry(e):
        if isinstance(e, ast.Constant) and (e.value is None or isinstance(e.value, str)):
            return e.value
        if isinstance(e, (ast.Tuple, ast.List)):
            names = [entry(x) for x in e.elts]
            if not all(isinstance(n, str) for n in names):
                fail("a tuple entry holds axis names only")
            return tuple(names)
        if _dotted(e).split(".")[-1] == "UNCONSTRAINED":
            return UNCONSTRAINED
        fail(f"an entry must be None, an axis name, a tuple of names or P.UNCONSTRAINED, got {ast.unparse(e)!r}")

    unreduced: list[str] = []
    for kw in node.keywords:
        if kw.arg != "unreduced" or not isinstance(kw.value, (ast.Set, ast.Tuple, ast.List)):
            fail("the only keyword is unreduced={...}")
        unreduced = [entry(x) for x in kw.value.elts]
        if not all(isinstance(n, str) for n in unreduced):
            fail("unreduced={...} holds axis names only")
    return P(*(entry(a) for a in node.args), unreduced=unreduced)


def _dotted(node) -> str:
    """``jax.sharding.P`` -> ``"jax.sharding.P"``; anything but names and attributes -> ``""``."""
    import ast

    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""
