"""Fuzz the Shardy text parsers: any text either parses or raises ShardingError.

Inputs are arbitrary unicode text, text over the grammar's own characters, grammatical text with
random content (unknown axes, bad sub-axes, attributes twice, ...), and valid sharding / mesh
texts with random character insertions, deletions, replacements and digit runs. Whenever the grammar
itself rejects the text, the error must be rule ``parse`` with a caret line under the column the
grammar stopped at; whenever a text is accepted, its canonical form must parse back to the same
value.
"""

from __future__ import annotations

import contextlib
import re
import resource
import signal

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st
from lark.exceptions import UnexpectedInput
from test_layout_properties import RANKS, meshes, shardings  # tests/ is on sys.path (rootdir import)

from simshard import Mesh, Sharding, ShardingError
from simshard.sharding.syntax import _parser

FUZZ = settings(max_examples=300, deadline=None)
ALPHABET = '<>@[]{}(),:?"=xyzp0123456789 '
FIXED_MESHES = {
    "mesh": Mesh({"x": 2, "y": 4, "z": 1}),
    "m": Mesh({"x": 4, "y": 2}, device_ids=[7, 6, 5, 4, 3, 2, 1, 0], name="m"),
}
VALID_SHARDINGS = [
    '<@mesh, [{"x"}, {"y", ?}p1], replicated={"z"}>',
    '<@mesh, [{"y":(2)2, "x"}p0, {?}p3, {}], unreduced(max)={"y":(1)2}>',
    'sharding<@m, [{"y"}, {"x":(1)2}], replicated={"x":(2)2}, unreduced={}>',
    "<@mesh, []>",
]
VALID_MESHES = ['@mesh = <["x"=2, "y"=4]>', '@m = <["x"=2, "y"=2], device_ids=[3, 2, 1, 0]>', "@e = <[]>"]


@st.composite
def mutated(draw, base):
    """``base`` (a strategy of texts) with 1..6 random edits: a character inserted, deleted or
    replaced, or a run of digits inserted."""
    text = draw(base)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "digits"]))
        i = draw(st.integers(0, len(text)))
        c = draw(st.sampled_from(ALPHABET))
        if op == "digits":  # a run of digits: big sizes, pre-sizes, priorities, device ids
            text = text[:i] + draw(st.text("0123456789", min_size=2, max_size=6)) + text[i:]
        elif op == "insert":
            text = text[:i] + c + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1 :]
        else:
            text = text[:i] + c + text[i + 1 :]
    return text


@st.composite
def generated_sharding_text(draw):
    """Text of a random valid sharding, with the meshes it may name."""
    mesh = draw(meshes())
    s = draw(shardings(mesh, draw(RANKS)))
    return str(s), {**FIXED_MESHES, mesh.name: mesh}


NAMES = st.sampled_from(["x", "y", "x", "y", "z", "w", ""])
SMALL = st.sampled_from([1, 2, 4, 2, 1, 3, 0, 8])  # st.integers would mostly give 0


@st.composite
def grammatical_sharding_text(draw):
    """Text the grammar accepts but whose content is random: unknown or repeated axes, sub-axes
    with any numbers, priorities anywhere, odd reduce ops, attributes twice."""

    def axis():
        name = f'"{draw(NAMES)}"'
        sub = draw(st.sampled_from(["", "", "sub"]))
        return name + (f":({draw(SMALL)}){draw(SMALL)}" if sub else "")

    def axes(n):
        return ", ".join(axis() for _ in range(n))

    dims = []
    for _ in range(draw(st.integers(0, 3))):
        items = [axes(draw(st.integers(0, 3)))] if draw(st.booleans()) else []
        if draw(st.booleans()):
            items.append("?")
        body = ", ".join(i for i in items if i)
        dims.append("{" + body + "}" + (f"p{draw(SMALL)}" if draw(st.booleans()) else ""))
    attrs = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            attrs.append(f"replicated={{{axes(draw(st.integers(0, 2)))}}}")
        else:
            op = draw(st.sampled_from(["", "(sum)", "(max)", "(min)", "(prod)", "(avg)", "(foo)"]))
            attrs.append(f"unreduced{op}={{{axes(draw(st.integers(0, 2)))}}}")
    name = draw(st.sampled_from(["mesh", "m", "other"]))
    prefix = draw(st.sampled_from(["", "sharding"]))
    return prefix + f"<@{name}, [{', '.join(dims)}]" + "".join(", " + a for a in attrs) + ">"


@st.composite
def sharding_inputs(draw):
    kind = draw(st.sampled_from(["grammatical"] * 3 + ["mutated-generated", "mutated-fixed", "alphabet", "text"]))
    if kind == "grammatical":
        return draw(grammatical_sharding_text()), FIXED_MESHES
    if kind == "mutated-generated":
        text, ms = draw(generated_sharding_text())
        return draw(mutated(st.just(text))), ms
    if kind == "mutated-fixed":
        return draw(mutated(st.sampled_from(VALID_SHARDINGS))), FIXED_MESHES
    if kind == "alphabet":
        return draw(st.text(ALPHABET, max_size=40)), FIXED_MESHES
    return draw(st.text(max_size=40)), FIXED_MESHES


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def bounded(seconds: float, memory: int = 2 << 30):
    """Fail instead of hanging the suite (body longer than ``seconds``) or exhausting the machine
    (body growing the address space by more than ``memory`` bytes: a MemoryError, not the OOM
    killer). The memory bound only applies where /proc and RLIMIT_AS exist."""

    def expire(signum, frame):
        raise AssertionError(f"parsing took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    now = _address_space()
    if now is not None:
        cap = now + memory if hard == resource.RLIM_INFINITY else min(now + memory, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def grammar_error(text: str, start: str) -> UnexpectedInput | None:
    """The grammar's own verdict on ``text``: the error lark raises, or None if it parses."""
    try:
        _parser(start).parse(text)
    except UnexpectedInput as e:
        return e
    return None


def check_caret(err: ShardingError, text: str, syntax: UnexpectedInput) -> None:
    """The message ends with the offending source line and a caret under lark's column."""
    lines = str(err).split("\n")
    assert len(lines) >= 3, f"no caret line in {str(err)!r}"
    src, caret = lines[-2], lines[-1]
    assert caret.strip() == "^" and caret.startswith("  "), f"no caret line in {str(err)!r}"
    assert src.startswith("  ")
    # Lark counts lines by "\n" only; the shown line is that line of the text, and the caret
    # sits under lark's column.
    want_src = text.split("\n")[syntax.line - 1]
    assert src[2:] == want_src, f"caret shows {src[2:]!r}, the error is in line {syntax.line}: {want_src!r}"
    assert len(caret) - 1 - 2 == syntax.column - 1
    assert f"at column {syntax.column}" in str(err)


@FUZZ
@given(sharding_inputs())
def test_sharding_parse_raises_only_sharding_errors(case):
    text, ms = case
    note(repr(text))
    syntax = grammar_error(text, "sharding")
    try:
        with bounded(5):
            s = Sharding.parse(text, ms)
    except ShardingError as e:
        note(str(e))
        event("syntax error" if syntax is not None else f"refused: {e.rule}")
        if syntax is not None:
            assert e.rule == "parse"
            check_caret(e, text, syntax)
        elif e.rule == "unknown-mesh":
            # The caret sits under the unknown mesh name, shown on its own line.
            *_, src, caret = str(e).split("\n")
            name = re.search(r"mesh @(\S+) is not defined", str(e)).group(1)
            assert src[2:] in text.split("\n")
            assert src[len(caret) - 1 :].startswith(name), str(e)
        return
    event("parsed")
    assert syntax is None, "the grammar rejects a text the parser accepted"
    assert isinstance(s, Sharding)
    assert s.mesh.name in ms
    # Whatever is accepted has a canonical text that parses back to it.
    assert Sharding.parse(str(s), ms) == s


@FUZZ
@given(generated_sharding_text())
def test_generated_texts_parse(case):
    """The mutation seeds themselves are valid (otherwise the fuzzing would test little)."""
    text, ms = case
    assert grammar_error(text, "sharding") is None
    assert str(Sharding.parse(text, ms)) == text


@pytest.mark.parametrize("text", VALID_SHARDINGS)
def test_fixed_seeds_parse(text):
    assert isinstance(Sharding.parse(text, FIXED_MESHES), Sharding)


@settings(max_examples=100, deadline=None)
@given(grammatical_sharding_text())
def test_grammatical_texts_pass_the_grammar(text):
    assert grammar_error(text, "sharding") is None


@st.composite
def grammatical_mesh_text(draw):
    """Mesh text the grammar accepts with random content: repeated or empty names, size 0,
    device id lists of any length and content."""
    axes = ", ".join(f'"{draw(NAMES)}"={draw(st.integers(0, 4))}' for _ in range(draw(st.integers(0, 3))))
    ids = ""
    if draw(st.booleans()):
        ids = ", device_ids=[" + ", ".join(str(draw(st.integers(0, 9))) for _ in range(draw(st.integers(0, 8)))) + "]"
    return f"@{draw(st.sampled_from(['mesh', 'm']))} = <[{axes}]{ids}>"


@st.composite
def mesh_inputs(draw):
    kind = draw(st.sampled_from(["grammatical"] * 2 + ["mutated-generated", "mutated-fixed", "alphabet", "text"]))
    if kind == "grammatical":
        return draw(grammatical_mesh_text())
    if kind == "mutated-generated":
        return draw(mutated(meshes().map(str)))
    if kind == "mutated-fixed":
        return draw(mutated(st.sampled_from(VALID_MESHES)))
    if kind == "alphabet":
        return draw(st.text(ALPHABET, max_size=40))
    return draw(st.text(max_size=40))


@FUZZ
@given(mesh_inputs())
def test_mesh_parse_raises_only_sharding_errors(text):
    note(repr(text))
    syntax = grammar_error(text, "mesh")
    try:
        with bounded(5):
            m = Mesh.parse(text)
    except ShardingError as e:
        note(str(e))
        event("syntax error" if syntax is not None else f"refused: {e.rule}")
        if syntax is not None:
            assert e.rule == "parse"
            check_caret(e, text, syntax)
        return
    event("parsed")
    assert syntax is None, "the grammar rejects a text the parser accepted"
    assert isinstance(m, Mesh)
    assert Mesh.parse(str(m)) == m


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10**12), min_size=1, max_size=3), st.booleans())
def test_huge_mesh_sizes_are_refused_quickly(sizes, with_ids):
    """Sizes are unbounded in the grammar: any product must give a Mesh or a ShardingError,
    without materialising billions of device ids first."""
    axes = ", ".join(f'"a{i}"={n}' for i, n in enumerate(sizes))
    text = f"@m = <[{axes}]" + (", device_ids=[0, 1]>" if with_ids else ">")
    try:
        with bounded(5):
            m = Mesh.parse(text)
    except ShardingError as e:
        assert e.rule == "invalid-mesh"
        return
    assert m.axis_sizes == tuple(sizes)


@FUZZ
@given(meshes())
def test_mesh_text_round_trip(mesh):
    assert Mesh.parse(str(mesh)) == mesh


@settings(max_examples=50, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.binary(), st.lists(st.text())))
def test_non_text_is_a_sharding_error(value):
    for parse in (lambda: Sharding.parse(value, FIXED_MESHES), lambda: Mesh.parse(value)):
        try:
            parse()
        except ShardingError as e:
            assert e.rule == "parse"
        else:
            raise AssertionError(f"{value!r} parsed")
