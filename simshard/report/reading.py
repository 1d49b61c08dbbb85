"""Reading a report back from its JSON (``CommReport.from_json``, ``MemoryReport.from_json``):
text that is not what ``to_json`` wrote is a ``ReportFormatError`` saying what is wrong and where
(which record, which field), never a ``KeyError`` or ``TypeError`` from deep inside, and never a
report with a count that is not a count. Any text is answered in time linear in its length (JSON
nested too deep to read is refused, as are numbers Python will not read)."""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from typing import Any, Callable


class ReportFormatError(ValueError):
    """Report JSON that is not a report: what is wrong, and where."""


INT64 = 2**63  # every figure a run records fits in 64 bits: a larger one is no report's (a ratio of
# two such would not even fit a float)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -INT64 <= v < INT64


def _ints(n: int | None) -> Callable[[Any], bool]:
    """A list of ints (``n`` of them, or any number)."""
    return lambda v: isinstance(v, list) and (n is None or len(v) == n) and all(map(_is_int, v))


# each field annotation of the reports' records -> whether a JSON value is one
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": _is_int,
    "int | None": lambda v: v is None or _is_int(v),
    "str": lambda v: isinstance(v, str),
    "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
    "tuple[int, ...]": _ints(None),
    "tuple[tuple[int, int, int], ...]": lambda v: isinstance(v, list) and all(map(_ints(3), v)),
}
_SHOWN = {"int": "a 64-bit integer", "int | None": "a 64-bit integer or null", "str": "a string",
          "tuple[str, ...]": "a list of strings", "tuple[int, ...]": "a list of 64-bit integers",
          "tuple[tuple[int, int, int], ...]": "a list of [peer, sent, received] 64-bit integer triples"}


def read_entries(text, what: str, key: str) -> list:
    """The list under ``key`` of the JSON object ``text`` (a ``what``, for the error)."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ReportFormatError(f"{what}: the JSON is nested too deeply to be a report") from None
    except (ValueError, TypeError) as e:  # not JSON (or a number Python will not read)
        raise ReportFormatError(f"{what}: not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise ReportFormatError(f"{what}: expected a JSON object with a list of {key!r}, as to_json writes")
    return doc[key]


def checked(cls, raw, what: str) -> dict:
    """``raw`` as the keyword arguments of dataclass ``cls``: an object with every required field,
    no unknown one, each value of its field's type; a ``ReportFormatError`` naming the field."""
    if not isinstance(raw, dict):
        raise ReportFormatError(f"{what}: expected a JSON object, not {type(raw).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise ReportFormatError(f"{what}: unknown field {unknown[0]!r}")
    for name, f in known.items():
        if name not in raw:
            if f.default is MISSING:
                raise ReportFormatError(f"{what}: field {name!r} is missing")
            continue
        if not _CHECKS[f.type](raw[name]):
            raise ReportFormatError(f"{what}: field {name!r} must be {_SHOWN[f.type]}, not {_shown(raw[name])}")
    return raw


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
