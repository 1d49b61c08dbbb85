"""Bitwise verification: outputs against a reference, bit patterns, dtypes and shapes.

Never allclose-as-pass: a check passes only when shapes, dtypes and every element's bits agree
(NaN payloads and signed zeros included). When floats differ the check says where first (index
and both values), how many elements differ and the largest distance in units in the last place
(ULP: how many representable floats lie between the two values). A difference is excused only
as a reassociation: a sum the partition split over mesh axes (``Check.reassociated``, named by
the op-by-op check, ``simshard.report.opcheck``), never by its size. ``note`` carries why a
difference may be expected; it never turns a failure into a pass. An output that differs where
no op split a sum over mesh axes DIFFERS.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..dtypes import bit_equal
from ..units import plain_text

if TYPE_CHECKING:
    from .framework import FrameworkCheck

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass(frozen=True)
class Check:
    """One array compared bit for bit with its reference."""

    what: str  # "output 0", or e.g. "op %5 dot_general"
    bitwise: bool
    problem: str  # "" when bitwise; else "shape", "dtype" or "values"
    expected_shape: tuple[int, ...]
    actual_shape: tuple[int, ...]
    expected_dtype: str
    actual_dtype: str
    mismatches: int = 0  # elements whose bits differ
    first_index: tuple[int, ...] | None = None
    expected_value: Any = None
    actual_value: Any = None
    max_ulp: int | None = None  # floats only; None when a NaN / inf is involved or not floats
    device: int | None = None  # for op-by-op checks: a device holding the first divergence
    note: str = ""
    # op-by-op checks: mesh axes over which the op's sum-like reduction was sharded, set when its
    # (float) result differs only because its additions ran in another order
    reassociated: tuple[str, ...] = ()

    @property
    def legitimate(self) -> bool:
        """Bitwise, or differing only by a reassociated float reduction (finite values)."""
        return self.bitwise or (bool(self.reassociated) and self.problem == "values" and self.max_ulp is not None)

    @property
    def wrong(self) -> bool:
        """Differs, and no reassociation explains it: a wrong result (a wrong partition, for an op)."""
        return not self.legitimate

    def describe(self) -> str:
        if self.bitwise:
            return f"{self.what}: bitwise equal ({self.actual_dtype}{list(self.actual_shape)})"
        if self.problem == "shape":
            return f"{self.what}: shape {self.actual_shape} where the reference has {self.expected_shape}"
        if self.problem == "dtype":
            return f"{self.what}: dtype {self.actual_dtype} where the reference has {self.expected_dtype}"
        where = f" on device {self.device}" if self.device is not None else ""
        ulp = f"; max {self.max_ulp} ULP" if self.max_ulp is not None else ""
        note = f" ({self.note})" if self.note else ""
        if self.legitimate:
            return (
                f"{self.what}: reassociated sum over mesh axes {', '.join(self.reassociated)}: {self.mismatches} of "
                f"{int(np.prod(self.expected_shape, dtype=np.int64))} elements differ by at most {self.max_ulp} ULP "
                f"(first at index {self.first_index}: got {self.actual_value!r}, expected {self.expected_value!r}); "
                "float additions ran in another order, not a wrong partition"
            )
        return (
            f"{self.what}: {self.mismatches} of {int(np.prod(self.expected_shape, dtype=np.int64))} elements differ; "
            f"first at index {self.first_index}{where}: got {self.actual_value!r}, expected {self.expected_value!r}"
            f"{ulp}{note}"
        )


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """Elementwise number of representable floats between ``a`` and ``b`` (uint64), for float16/32/64
    (complex: the larger of the parts). None for other dtypes. NaNs give the largest uint64."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "c":
        part = np.dtype(f"f{a.dtype.itemsize // 2}")
        ra = np.ascontiguousarray(a).view(part).reshape(a.shape + (2,))
        rb = np.ascontiguousarray(b).view(part).reshape(b.shape + (2,))
        d = ulp_distance(ra, rb)
        return None if d is None else d.max(axis=-1)
    if a.dtype.kind != "f" or a.dtype.itemsize not in _UINT:
        return None
    u = _UINT[a.dtype.itemsize]
    bits = 8 * a.dtype.itemsize
    sign = u(1 << (bits - 1))

    def ordered(x):
        # Map float bits to unsigned integers in the order of the floats: negative values are
        # flipped entirely, non-negative ones get the sign bit set.
        v = np.ascontiguousarray(x).view(u)
        return np.where(v & sign, ~v, v | sign)

    oa, ob = ordered(a), ordered(b)
    d = np.where(oa > ob, oa - ob, ob - oa).astype(np.uint64)
    nan = np.isnan(a) | np.isnan(b)
    return np.where(nan & ~bit_equal(a, b), np.uint64(np.iinfo(np.uint64).max), d)


def plain_value(x):
    """An array element (or array) as plain Python values, for a check's readable fields."""
    x = np.asarray(x)
    return x.item() if x.ndim == 0 else x.tolist()


def compare(actual, expected, what: str = "output", *, device: int | None = None, note: str = "") -> Check:
    """Compare one array with its reference, bit for bit (see the module docstring)."""
    a, e = np.asarray(actual), np.asarray(expected)
    base = dict(
        what=what, expected_shape=tuple(e.shape), actual_shape=tuple(a.shape), expected_dtype=str(e.dtype),
        actual_dtype=str(a.dtype), device=device, note=note,
    )
    if a.shape != e.shape:
        return Check(bitwise=False, problem="shape", **base)
    if a.dtype != e.dtype:
        return Check(bitwise=False, problem="dtype", **base)
    same = np.asarray(bit_equal(a, e)).reshape(-1)
    if same.all():
        return Check(bitwise=True, problem="", **base)
    fa, fe = a.reshape(-1), e.reshape(-1)
    bad = np.flatnonzero(~same)
    first = tuple(int(i) for i in np.unravel_index(int(bad[0]), a.shape))
    ulps = ulp_distance(fa[bad], fe[bad])
    max_ulp = None
    if ulps is not None:
        worst = int(ulps.max())
        finite = np.isfinite(fa[bad]).all() and np.isfinite(fe[bad]).all()
        max_ulp = worst if finite else None
    return Check(
        bitwise=False, problem="values", mismatches=int(len(bad)), first_index=first,
        expected_value=plain_value(fe[bad[0]]), actual_value=plain_value(fa[bad[0]]), max_ulp=max_ulp, **base,
    )


@dataclass(frozen=True)
class VerifyReport:
    """Checks of a run's outputs against a reference, and (``op_checks``, in program order) of
    each partitioned op's assembled result against the op run whole on the assembled inputs
    (``simshard.report.opcheck``). ``framework``: for a program imported from JAX or PyTorch, its
    outputs against the framework's own (``report.framework``), which ``ok`` also requires."""

    checks: tuple[Check, ...]
    op_checks: tuple[Check, ...] = ()
    framework: tuple["FrameworkCheck", ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "checks", tuple(self.checks))
        object.__setattr__(self, "op_checks", tuple(self.op_checks))
        object.__setattr__(self, "framework", tuple(self.framework))

    def with_ops(self, op_checks: Sequence[Check]) -> "VerifyReport":
        """This report with op-by-op checks added."""
        return VerifyReport(self.checks, tuple(op_checks), self.framework)

    def with_framework(self, checks: Sequence["FrameworkCheck"]) -> "VerifyReport":
        """This report with the checks against the framework's own outputs added."""
        return VerifyReport(self.checks, self.op_checks, tuple(checks))

    @staticmethod
    def compare(actual: Sequence, expected: Sequence, names: Sequence[str] | None = None,
                notes: Sequence[str] | None = None) -> "VerifyReport":
        """Compare outputs pairwise: ``actual[i]`` against the reference ``expected[i]``."""
        actual, expected = list(actual), list(expected)
        if len(actual) != len(expected):
            raise ValueError(f"{len(actual)} outputs to compare with {len(expected)} reference outputs")
        names = list(names) if names is not None else [f"output {i}" for i in range(len(actual))]
        notes = list(notes) if notes is not None else [""] * len(actual)
        return VerifyReport(tuple(compare(a, e, n, note=t) for a, e, n, t in zip(actual, expected, names, notes)))

    @staticmethod
    def against(program, args: Sequence, outputs: Sequence, notes: Sequence[str] | None = None) -> "VerifyReport":
        """Run ``program`` whole on ``args`` in plain numpy (``simshard.evaluate``, the registry's
        kernels) and compare ``outputs`` (e.g. a sharded run's assembled outputs) with it."""
        from ..tracing.interpret import evaluate

        expected = evaluate(program, *args)
        names = [
            f"output {i}" + (f" ({program.label(v)})" if program.label(v) else "") for i, v in enumerate(program.outputs)
        ]
        return VerifyReport.compare(outputs, expected, names, notes)

    @property
    def bitwise(self) -> bool:
        """True when every check (outputs and ops) matched bit for bit."""
        return all(c.bitwise for c in self.checks) and all(c.bitwise for c in self.op_checks)

    def __bool__(self) -> bool:
        return self.bitwise

    @property
    def failures(self) -> tuple[Check, ...]:
        """Wrong results: ops whose partition is wrong (in program order), then differing outputs.
        An op that only reassociated a float sum is not a failure (see ``reassociations``), nor an
        output it explains (``explained``)."""
        explained = self.explained  # the checks themselves (a handful): no id() set
        return tuple(c for c in self.op_checks if c.wrong) + tuple(
            c for c in self.checks if not c.bitwise and not any(c is e for e in explained))

    @property
    def explained(self) -> tuple[Check, ...]:
        """Outputs that differ in values only because ops upstream reassociated float sums (no op
        is wrong, and some op reassociated): expected, not a failure."""
        if self.wrong_ops or not self.reassociations:
            return ()
        return tuple(c for c in self.checks if not c.bitwise and c.problem == "values")

    @property
    def reassociations(self) -> tuple[Check, ...]:
        """Ops whose float result differs only because a sharded reduction reordered additions."""
        return tuple(c for c in self.op_checks if not c.bitwise and c.legitimate)

    @property
    def wrong_ops(self) -> tuple[Check, ...]:
        return tuple(c for c in self.op_checks if c.wrong)

    @property
    def ok(self) -> bool:
        """No op is wrong, and every output is bitwise or differs in values only where ops
        legitimately reassociated float sums; and every output agrees with the framework's where
        the program came from one (``framework``)."""
        if self.wrong_ops or not all(f.ok for f in self.framework):
            return False
        bad = [c for c in self.checks if not c.bitwise]
        return not bad or (bool(self.reassociations) and all(c.problem == "values" for c in bad))

    @property
    def first_divergence(self) -> Check | None:
        """The first op (program order) whose partition is wrong, naming device and global index;
        without op checks (or when every op is right), the first differing output."""
        f = self.failures
        return f[0] if f else None

    @property
    def max_ulp(self) -> int | None:
        vals = [c.max_ulp for c in self.failures + self.reassociations if c.max_ulp is not None]
        return max(vals) if vals else None

    def table(self):
        from rich.table import Table

        t = Table(title="verification (bitwise against the single-process reference)", title_justify="left")
        for col in ("check", "result", "shape", "dtype", "differ", "first index", "max ULP"):
            t.add_column(col)
        for c in self.checks + self.op_checks:
            if c.bitwise:
                result = "bitwise"
            elif c.legitimate:
                result = f"reassociated ({','.join(c.reassociated)})"
            elif any(c is e for e in self.explained):
                result = "reassociated upstream"
            else:
                result = f"DIFFERS ({c.problem})" + (f" on device {c.device}" if c.device is not None else "")
            t.add_row(
                c.what, result, str(list(c.actual_shape)), c.actual_dtype,
                str(c.mismatches) if c.problem == "values" else "-",
                str(c.first_index) if c.first_index is not None else "-",
                str(c.max_ulp) if c.max_ulp is not None else "-",
            )
        for f in self.framework:
            c = f.check
            t.add_row(
                f"{c.what} vs {f.framework}", ("bitwise" if c.bitwise else "within" if f.ok else "DIFFERS") + f"; {f.mode}",
                str(list(c.actual_shape)), c.actual_dtype, str(c.mismatches) if c.problem == "values" else "-",
                str(c.first_index) if c.first_index is not None else "-",
                f"{f.scaled_ulp:.1f} of scale" if f.scaled_ulp is not None and not c.bitwise else "-",
            )
        return t

    def render(self, width: int = 100) -> str:
        lines = [c.describe() for c in self.failures + self.reassociations] + [f.describe() for f in self.framework]
        return plain_text(self.table(), *lines, width=width)

    def __str__(self) -> str:
        return self.render()

    def __rich__(self):
        return self.table()

    def to_dict(self) -> dict:
        return {
            "bitwise": self.bitwise, "ok": self.ok, "checks": [_plain(asdict(c)) for c in self.checks],
            "op_checks": [_plain(asdict(c)) for c in self.op_checks],
            "framework": [_plain({**asdict(f), "ok": f.ok, "mode": f.mode}) for f in self.framework],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=_jsonable)


def _plain(v):
    """JSON-safe: tuples as lists, non-finite floats and complex numbers as their repr."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return repr(v)
    if isinstance(v, complex):
        return repr(v)
    return v


def _jsonable(v):
    raise TypeError(f"cannot write {type(v).__name__} as JSON")
