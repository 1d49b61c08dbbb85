"""Reading quantities the command line and ``--topology`` files give: sizes in bytes, link
bandwidths and per-message latencies, with their units.

Whatever is typed, reading it takes time linear in a bounded length: the number is read by one
scan of its characters (ASCII digits only: ``str.isdigit`` also takes ``²`` and ``٣``), never by a
regular expression that backtracks, and text over ``MAX_CHARS`` is refused before anything is
read. A value must be finite and within its quantity's bounds (``Bound``): ``1e999999`` bytes is
no device's memory, ``--latency 1e999`` is no latency, however Python would round them.
Each mistake raises ``UsageError`` (exit 2, one line).
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from typing import NamedTuple

from .errors import UsageError

# No size, rate or time is written in more characters than this (a topology file's strings too).
MAX_CHARS = 64
# A number whose decimal exponent is beyond this is out of every quantity's bounds; checked
# before any arithmetic, so that no Decimal overflows and no int of millions of bits is built.
MAX_EXPONENT = 60
DIGITS = frozenset("0123456789")

RATE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
TIME_UNITS = {"": Decimal(1), "s": Decimal(1), "ms": Decimal("1e-3"), "us": Decimal("1e-6"),
              "µs": Decimal("1e-6"), "ns": Decimal("1e-9")}
# the spellings a byte unit may take (``[kKmMgGtT]?i?B``): kB/MB/GB/TB powers of 1000, KiB... of 1024
BYTE_SPELLINGS = frozenset(prefix + binary + "B" for prefix in ("", *"kKmMgGtT") for binary in ("", "i"))


class Bound(NamedTuple):
    """What a quantity is called, its bounds (a value is 0, if ``zero_ok``, or in [low, high])
    and how an error shows them."""

    what: str
    example: str
    low: Decimal
    high: Decimal
    zero_ok: bool
    low_text: str
    high_text: str


SIZE = Bound("a size", "a number of bytes like 8192, 8KiB or 1.5MB", Decimal(1), Decimal(2**60), True,
             "1 byte", "1 EiB (2**60 bytes)")
BANDWIDTH = Bound("a bandwidth", "a positive number of bytes per second like 25e9, 25GB/s or 32GiB/s",
                  Decimal(1), Decimal("1e18"), False, "1 B/s", "1e18 B/s (1 EB/s)")
LATENCY = Bound("a latency", "a number of seconds like 5e-6, or with a unit: 5us, 0.5ms",
                Decimal("1e-15"), Decimal("1e6"), True, "1e-15 s", "1e6 s (11.6 days)")


def shown(text: str) -> str:
    """``text`` as an error quotes it: repr (escapes included), cut short."""
    return repr(text) if len(text) <= 40 else repr(text[:40]) + f"... ({len(text)} characters)"


def split_number(text: str) -> tuple[str, str] | None:
    """``"5.5 KiB"`` -> ``("5.5", " KiB")``: the longest leading ``[0-9]*.?[0-9]+([eE][-+]?[0-9]+)?``
    and the rest, in one scan; None when no number leads."""
    def digits(at: int) -> int:
        while at < len(text) and text[at] in DIGITS:
            at += 1
        return at

    end = digits(0)
    if end < len(text) and text[end] == ".":
        after = digits(end + 1)
        if after == end + 1:  # "1." or ".": a point needs digits after it
            return None
        end = after
    if end == 0:
        return None
    if end < len(text) and text[end] in "eE":
        sign = end + 1 + (end + 1 < len(text) and text[end + 1] in "+-")
        if digits(sign) > sign:
            end = digits(sign)
    return text[:end], text[end:]


def read(text: str, bound: Bound, units: dict) -> Decimal:
    """``text`` (a number, optional spaces, a unit of ``units`` keyed as written) as a Decimal in
    the quantity's base unit, within ``bound``."""
    if not isinstance(text, str):
        raise UsageError(f"{bound.what} is {bound.example}; got {text!r}")
    body = text.strip()
    if len(body) > MAX_CHARS:
        raise UsageError(f"{bound.what} is {bound.example}; got {shown(text)}, over {MAX_CHARS} characters")
    split = split_number(body)
    unit = split[1].strip() if split else None
    if split is None or unit not in units:
        raise UsageError(f"{bound.what} is {bound.example}; got {shown(text)}")
    try:
        number = Decimal(split[0])
    except ArithmeticError:  # an exponent beyond any Decimal's (InvalidOperation): beyond any quantity too
        raise UsageError(f"{bound.what} is {bound.example}; got {shown(text)}, whose exponent is out of range") from None
    if number and number.adjusted() > MAX_EXPONENT:
        raise UsageError(f"{bound.what} is at most {bound.high_text}; got {shown(text)}")
    if number and number.adjusted() < -MAX_EXPONENT:
        raise UsageError(f"{bound.what} is {'0 or ' if bound.zero_ok else ''}at least {bound.low_text}; got {shown(text)}")
    return within(number * Decimal(units[unit]), bound, text)


def within(value: Decimal, bound: Bound, text) -> Decimal:
    """``value`` if ``bound`` allows it; else the UsageError saying which end it passed."""
    if value > bound.high:
        raise UsageError(f"{bound.what} is at most {bound.high_text}; got {shown(str(text))}")
    if value == 0 and not bound.zero_ok:
        raise UsageError(f"{bound.what} is {bound.example}; got {shown(str(text))}")
    if 0 < value < bound.low or value < 0:
        raise UsageError(f"{bound.what} is {'0 or ' if bound.zero_ok else ''}at least {bound.low_text}; "
                         f"got {shown(str(text))}")
    return value


def parse_size(text: str) -> int:
    """Bytes: ``5632``, ``5.5KiB``, ``16MiB``, ``1GB`` (kB/MB/GB powers of 1000, KiB/MiB/GiB of 1024)."""
    units = {spelling: RATE_UNITS[spelling.lower()] for spelling in BYTE_SPELLINGS if spelling.lower() in RATE_UNITS}
    return int(read(text, SIZE, {"": 1, **units}))


def parse_bandwidth(text: str) -> float:
    """Bytes per second: ``25e9``, ``25GB/s``, ``300 GiB/s`` (decimal kB/MB/GB/TB or binary KiB...)."""
    units = {spelling: RATE_UNITS[spelling.lower()] for spelling in BYTE_SPELLINGS if spelling.lower() in RATE_UNITS}
    units = {"": 1, "/s": 1, **units, **{f"{s}/s": scale for s, scale in units.items()}}
    return float(read(text, BANDWIDTH, units))  # decimal: 10us is exactly 1e-05


def parse_latency(text: str) -> float:
    """Seconds per message: ``5e-6``, ``5us``, ``0.5 ms``."""
    return float(read(text, LATENCY, TIME_UNITS))


def check_number(value, bound: Bound) -> float:
    """A number a topology file gives as JSON (``"bandwidth": 25e9``): a real number, finite and
    within ``bound``, as a float; anything else (true, 1e400, an integer of 400 digits, NaN) is refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{bound.what} is {bound.example}; got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise UsageError(f"{bound.what} is at most {bound.high_text}; got an integer of {value.bit_length()} bits") from None
    if not math.isfinite(number):
        raise UsageError(f"{bound.what} is {bound.example}, a finite one; got {value!r}")
    return float(within(Decimal(number), bound, value))
