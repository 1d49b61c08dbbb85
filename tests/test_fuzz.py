"""Fuzzing across the pipeline, at a size CI affords: whatever a user types or writes, simshard
either answers (bit for bit) or raises one of its own errors, naming the problem.

* text: PartitionSpec spellings, placement lists and Shardy shardings, from arbitrary text and
  from valid text with random edits (tests/sharding/test_syntax_fuzz.py goes deeper on Shardy's);
* the FHE compiler's ArraySharding text (``ss.fhe_spec``), likewise a ``ShardingError``;
* report JSON read back (``CommReport.from_json``, ``MemoryReport.from_json``): read, or refused
  with a ``ReportFormatError`` naming what and where, in under 100 ms;
* the command line's values (sizes, bandwidths, latencies, meshes, shapes) and ``--topology``
  files: each is read or refused with a ``UsageError`` (exit 2, one line), in under 100 ms;
* programs: random chains of element-wise ops, matmul / einsum, reductions, reshape, transpose and
  broadcasting, on meshes with size-1 and uneven (3) axes, with random P shardings on inputs and
  outputs, run on the local backend and verified against numpy with exact inputs.
"""

from __future__ import annotations

import gc
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.cli import options
from simshard.cli.errors import UsageError
from simshard.report.memory import DeviceMemory
from simshard.report.reading import ReportFormatError
from simshard.tracing.explicit.errors import ShardingTypeError

OWN_ERRORS = (ss.ShardingError, ss.TraceError, ShardingTypeError)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROGRAMS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
VALID_TEXT = {
    "spec": ['P("x", None)', 'P(("x", "y"), P.UNCONSTRAINED)', 'PartitionSpec("y", unreduced={"x"})', "P()"],
    "placements": ["[Shard(0), Replicate()]", "[S(1), P(max)]", "(_StridedShard(0, split_factor=2), R)", "[R, R]"],
    "shardy": ['<@mesh, [{"x"}, {"y", ?}p1]>', '<@mesh, [{"y":(1)2}, {}], replicated={"x"}>'],
    "fhe": ["{y, x, -1}", "{-1, 0}", "{1}", "{}"],
}
PARSERS = {
    "spec": ss.parse_partition_spec,
    "placements": ss.parse_placements,
    "shardy": lambda t: ss.Sharding.parse(t, ss.Mesh({"x": 2, "y": 4})),
    "fhe": lambda t: ss.fhe_spec(ss.Mesh({"x": 2, "y": 4}), t),
}


@st.composite
def edited(draw, kind: str) -> str:
    """A valid text with a few random insertions, deletions and replacements."""
    text = list(draw(st.sampled_from(VALID_TEXT[kind])))
    alphabet = st.sampled_from(list('()[]{}<>"=,.:?@ xyzPRS0123456789_') + ["999999999999999999999", "\x00", "é", "\ud800", "\udcff"])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        how = draw(st.sampled_from(["insert", "delete", "replace"]))
        if how == "insert":
            text.insert(at, draw(alphabet))
        elif text and at < len(text):
            if how == "delete":
                del text[at]
            else:
                text[at] = draw(alphabet)
    return "".join(text)


@pytest.mark.parametrize("kind", sorted(PARSERS))
@FUZZ
@given(data=st.data())
def test_any_text_parses_or_is_a_sharding_error(kind, data):
    text = data.draw(st.one_of(st.text(st.characters(exclude_categories=()), max_size=60), edited(kind)))
    try:
        PARSERS[kind](text)
    except ss.ShardingError:
        pass


# -- the command line's values and topology files ------------------------------------------------------
CLI = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLI_PARSERS = {
    "size": options.parse_size, "bandwidth": options.parse_bandwidth, "latency": options.parse_latency,
    "mesh": options.parse_mesh, "shape": options.parse_shape,
}
VALID_VALUES = ["8KiB", "1.5MB", "25GB/s", "32 GiB/s", "5us", "0.5ms", "5e-6", "x=2,y=4", "8,16", "(8,)"]
PIECES = ["9" * 5000, "8" * 8000 + "x", "1e999999", "1e-999999", "²", "٣", "\ud800", "e", ".", "-", "+", "x", "=", ",",
          "inf", "nan", "0", "TB", "ms", "/s", " ",
          # found by benchmarks/fuzz_all.py: an exponent beyond Decimal's (InvalidOperation), a
          # line break in an axis name quoted into a message, "1x" (a SyntaxWarning on stderr)
          "e9999999999999999999999", "e-9999999999999999999999", "\n", "1x"]


def _no_warnings():
    """A block in which any warning is an error (a parser must not print to stderr)."""
    import warnings

    class Strict(warnings.catch_warnings):
        def __enter__(self):
            out = super().__enter__()
            warnings.simplefilter("error")
            return out

    return Strict()


def quickly(read, *args):
    """``read(*args)``, which must answer or refuse with a UsageError, in under 100 ms of this
    thread's CPU (not wall time: the machine running the suite is shared), the garbage collector
    held off meanwhile (a full collection of what the worker's earlier tests left, half a second
    in one CI run, would be charged to whichever call it fell in)."""
    gc.disable()
    started = time.thread_time()
    try:
        read(*args)
    except UsageError as e:
        assert "\n" not in str(e)
    finally:
        took = time.thread_time() - started
        gc.enable()
    assert took < 0.1, f"{took:.2f} s"


def test_what_fuzz_all_found_is_refused_in_one_line():
    for text in ("25e9999999999999999999999", "1e-999999999999999999999999999/s"):
        with pytest.raises(UsageError, match="exponent is out of range"):
            options.parse_bandwidth(text)
    with pytest.raises(UsageError, match=r"names mesh axes 'a\\nb' that") as refused:
        options.topology(None, ["a\nb=1GB/s"], [], ["x"])
    assert "\n" not in str(refused.value)
    with _no_warnings():
        with pytest.raises(ss.ShardingError, match="invalid decimal literal"):
            ss.parse_partition_spec("P(1x)")


@pytest.mark.parametrize("kind", sorted(CLI_PARSERS))
@CLI
@given(text=st.one_of(st.text(st.characters(exclude_categories=()), max_size=40),
                      st.lists(st.sampled_from(VALID_VALUES + PIECES), min_size=1, max_size=4).map("".join)))
def test_command_line_values_are_read_or_refused_at_once(kind, text):
    quickly(CLI_PARSERS[kind], text)


def numbers():
    """What a topology file may hold where a number belongs: reasonable, absurd, or no number."""
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**12), st.just(10**400), st.booleans(),
        st.none(), st.sampled_from(VALID_VALUES + PIECES + ["nvlink", "h100"]),
    )


def links():
    return st.one_of(st.sampled_from(["nvlink", "infiniband", "fast"]), numbers(), st.lists(numbers(), max_size=2),
                     st.dictionaries(st.sampled_from(["bandwidth", "latency", "speed"]), numbers(), max_size=3))


def topology_documents():
    return st.one_of(
        st.fixed_dictionaries({}, optional={
            "links": st.one_of(numbers(), st.dictionaries(st.sampled_from(["x", "y", "z", ""]), links(), max_size=3)),
            "default": links(),
            "nodes": st.one_of(numbers(), st.fixed_dictionaries({}, optional={"size": numbers(), "link": links()})),
            "device": st.one_of(st.sampled_from(["h100", "tpu"]), st.dictionaries(
                st.sampled_from(["flops", "memory_bandwidth"]), numbers(), max_size=2)),
            "extra": numbers(),
        }).map(lambda d: json.dumps(d)),
        st.integers(1, 200_000).map(lambda depth: "[" * depth + "]" * depth),
        st.text(max_size=40),
    )


@CLI
@given(text=topology_documents())
def test_topology_files_are_read_or_refused_at_once(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "topology.json"
        path.write_text(text, errors="surrogatepass")
        quickly(options.topology, str(path), [], [], ["x", "y"])


# -- report JSON read back ---------------------------------------------------------------------------
RECORD = ss.CommRecord(device=1, instr=3, position=0, source="%3 dot", kind="all_reduce", axes=("y",), group=(0, 1),
                       bytes_sent=64, bytes_received=64, messages_sent=1, messages_received=1, min_bytes=64,
                       peers=((0, 64, 64),))
REPORTS = {
    "comm": (ss.CommReport.from_json, json.loads(ss.CommReport((RECORD,)).to_json()), "records"),
    "memory": (ss.MemoryReport.from_json, json.loads(ss.MemoryReport((DeviceMemory(0, 512, 2, 5, "%5 add", 128, 256),
                                                                       )).to_json()), "devices"),
}


def json_values():
    """What a report's JSON may hold where a value belongs."""
    return st.recursive(st.one_of(numbers(), st.text(max_size=8)),
                        lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6)


@st.composite
def report_documents(draw, kind: str) -> str:
    """A report's JSON with one field of one entry changed, removed or added; or its text edited;
    or text that is not JSON at all (or nested deeper than Python reads)."""
    doc = json.loads(json.dumps(REPORTS[kind][1]))
    how = draw(st.sampled_from(["value", "drop", "add", "text", "deep", "any"]))
    entry = doc[REPORTS[kind][2]][0]
    name = draw(st.sampled_from(sorted(entry)))
    if how == "value":
        entry[name] = draw(json_values())
    elif how == "drop":
        del entry[name]
    elif how == "add":
        entry[draw(st.text(max_size=6))] = draw(json_values())
    text = json.dumps(doc, allow_nan=True)
    if how == "text":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(PIECES + ["{", "]", '"', "NaN", "-"])) + text[at + 1:]
    elif how == "deep":
        text = "[" * draw(st.integers(1, 200_000))
    elif how == "any":
        text = draw(st.text(max_size=40))
    return text


@pytest.mark.parametrize("kind", sorted(REPORTS))
@CLI
@given(data=st.data())
def test_report_json_is_read_or_refused_naming_the_problem_at_once(kind, data):
    text = data.draw(report_documents(kind))
    read = REPORTS[kind][0]
    started = time.thread_time()  # (CPU: the machine running the suite is shared)
    try:
        back = read(text)
    except ReportFormatError as e:
        assert str(e).startswith(("a communication report", "a memory report")), e
    else:  # read: every count a count, every field of its type, as to_json wrote it
        assert json.loads(back.to_json())
    took = time.thread_time() - started
    assert took < 0.1, f"{took:.2f} s"


def test_a_report_field_of_the_wrong_type_is_named():
    doc = REPORTS["comm"][1]
    bad = dict(doc, records=[dict(doc["records"][0], bytes_sent="64")])
    with pytest.raises(ReportFormatError, match="record 0: field 'bytes_sent' must be a 64-bit integer, not \"64\""):
        ss.CommReport.from_json(json.dumps(bad))
    huge = dict(doc, records=[dict(doc["records"][0], bytes_received=10**400)])  # its ratio fits no float
    with pytest.raises(ReportFormatError, match="record 0: field 'bytes_received' must be a 64-bit integer, not 1000"):
        ss.CommReport.from_json(json.dumps(huge))
    with pytest.raises(ReportFormatError, match="nested too deeply"):
        ss.MemoryReport.from_json("[" * 100_000)
    assert ss.CommReport.from_json(json.dumps(doc)).records == (RECORD,)


# -- random programs ------------------------------------------------------------------------------------
SIZES = (1, 2, 3)  # size-1 and uneven axes next to the usual 2


@st.composite
def meshes(draw) -> ss.Mesh:
    names = draw(st.sampled_from([("x",), ("x", "y"), ("x", "y", "z")]))
    return ss.Mesh({n: draw(st.sampled_from(SIZES)) for n in names})


@st.composite
def specs(draw, mesh: ss.Mesh, rank: int):
    """A P over ``mesh`` for a value of ``rank``: each axis on one dim or nowhere (never twice)."""
    dims: list[list[str]] = [[] for _ in range(rank)]
    for name in mesh.axis_names:
        where = draw(st.integers(-1, rank - 1))
        if where >= 0:
            dims[where].append(name)
    return ss.P(*(None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims))


STEPS = ["add", "mul", "where", "matmul", "einsum", "sum", "max", "mean-int", "reshape", "transpose", "broadcast"]


def step(kind: str, x, w):
    """One op of a random program on ``x`` [n, k]; ``w`` a [k, k] input. Keeps [n, k] and exact values."""
    if kind == "add":
        return x + w[0]
    if kind == "mul":
        return x * np.sign(x)
    if kind == "where":
        return np.where(x > 0, x, -x)
    if kind == "matmul":
        return x @ np.sign(w)
    if kind == "einsum":
        return np.einsum("nk,kj->nj", x, np.sign(w))
    if kind == "sum":
        return x - x.sum(axis=1, keepdims=True)
    if kind == "max":
        return x - x.max(axis=0)
    if kind == "mean-int":
        return x + x.sum(axis=0) * 0.0
    if kind == "reshape":
        return x.reshape(-1).reshape(x.shape)
    if kind == "transpose":
        return (x.T * 1.0).T
    return np.broadcast_to(x[:, None, :], (x.shape[0], 2, x.shape[1])).sum(axis=1)


@PROGRAMS
@given(data=st.data())
def test_random_programs_run_bitwise_or_raise_simshards_errors(data):
    mesh = data.draw(meshes())
    n, k = data.draw(st.sampled_from([1, 2, 3, 4, 6])), data.draw(st.sampled_from([1, 2, 3, 4]))
    kinds = data.draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=4))
    in_specs = (data.draw(specs(mesh, 2)), data.draw(specs(mesh, 2)))
    out_spec = data.draw(st.one_of(st.none(), specs(mesh, 2)))
    x, w = ss.exact_inputs([(n, k), (k, k)], seed=data.draw(st.integers(0, 3)))

    def program(x, w):
        for kind in kinds:
            x = step(kind, x, w)
        return x

    try:
        res = ss.run(program, x, w, mesh=mesh, in_shardings=in_specs, out_shardings=out_spec, backend="local")
    except OWN_ERRORS as e:
        event(f"refused: {type(e).__name__}")
        return  # refused, naming the problem: allowed (an uneven P on an explicit type, say)
    event("ran")
    # every output bit for bit; an intermediate may differ only where a sharded sum was reduced
    # after a linear op (a pending sum times 0.0: numpy's sums start from +0.0, so contributions
    # of -0.0 and +0.0 give +0.0 where the whole sum times 0.0 gives -0.0), which opcheck names
    assert all(c.bitwise for c in res.verify.checks) and not res.verify.wrong_ops, res.verify.render()
    assert all(c.bitwise or c.legitimate for c in res.verify.op_checks), res.verify.render()
