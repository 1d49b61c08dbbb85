"""A Ray run's timeline (``core/diagnosis.Timeline``): each device's Spans made from its shipped
rows when first read, and kept; a mapping like any other (devices, items, equality)."""

from types import SimpleNamespace

from simshard.runtime.core.diagnosis import Span, Timeline

# what a Span takes from its device's schedule: each position's instruction (id, kind, source)
SCHEDULES = {d: SimpleNamespace(instrs=(SimpleNamespace(id=1, kind="compute", source="%1 dot"),
                                        SimpleNamespace(id=2, kind="all_reduce", source="%2 sum")))
             for d in (0, 1)}


def test_a_devices_spans_are_made_when_first_read_and_kept():
    """A device ships (position, start, end) per instruction; the rest of each Span is its schedule's."""
    rows = {0: [(0, 1.0, 2.0)], 1: [(0, 1.5, 2.5), (1, 2.5, 3.0)]}
    tl = Timeline(rows, SCHEDULES.get)
    assert tl.made == {} and len(tl) == 2 and list(tl) == [0, 1]
    first = tl[0]
    assert first == (Span(0, 0, 1, "compute", "%1 dot", 1.0, 2.0),) and first[0].end == 2.0
    assert tl[0] is first and set(tl.made) == {0}  # made once, device 1 not yet
    assert tl == {0: first, 1: (Span(1, 0, 1, "compute", "%1 dot", 1.5, 2.5),
                                Span(1, 1, 2, "all_reduce", "%2 sum", 2.5, 3.0))}


def test_packed_rows_read_as_the_plain_ones():
    """A device process ships its spans and transfer rows packed (``packed_rows``); the driver's
    timeline and transfer log read them as they read plain rows, unpacked on first use."""
    from simshard.runtime.core.packed_rows import pack
    from simshard.runtime.core.transfer_log import TransferLog

    spans = {0: [(0, 1.0, 2.0)], 1: [(1, 1.5, 2.5)]}
    assert dict(Timeline({d: pack(r) for d, r in spans.items()}, SCHEDULES.get)) == dict(Timeline(spans, SCHEDULES.get))
    rows = {0: [(0, 1, "sent", (2, 0), 64), (0, 1, "received", (2, 1), 64)], 1: [(1, 0, "received", (2, 0), 64)]}
    packed = TransferLog.of_packed([pack(rows[0]), rows[1]])  # packed or plain, part by part
    assert isinstance(packed.rows, list) and packed._packed == []  # unpacked once read
    plain = TransferLog.of_rows(rows[0] + rows[1])
    assert packed.entries == plain.entries
    assert packed.counts(0, 2) == plain.counts(0, 2) == (64, 64, 1, 1, ((1, 64, 64),))
    late = TransferLog.of_packed([pack(rows[0])])
    late.record(1, 0, "received", (2, 0), 64)  # a row recorded into a packed log comes after its rows
    assert late.entries == plain.entries
