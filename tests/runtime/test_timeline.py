"""A Ray run's timeline (``core/diagnosis.Timeline``): each device's Spans made from its shipped
rows when first read, and kept; a mapping like any other (devices, items, equality)."""

from simshard.runtime.core.diagnosis import Span, Timeline


def test_a_devices_spans_are_made_when_first_read_and_kept():
    rows = {0: [(0, 0, 1, "compute", "%1 dot", 1.0, 2.0)], 1: [(1, 0, 1, "compute", "%1 dot", 1.5, 2.5)]}
    tl = Timeline(rows)
    assert tl.made == {} and len(tl) == 2 and list(tl) == [0, 1]
    first = tl[0]
    assert first == (Span(0, 0, 1, "compute", "%1 dot", 1.0, 2.0),) and first[0].end == 2.0
    assert tl[0] is first and set(tl.made) == {0}  # made once, device 1 not yet
    assert dict(tl) == {d: tuple(Span._make(r) for r in rs) for d, rs in rows.items()}
    assert tl == {0: first, 1: (Span(1, 0, 1, "compute", "%1 dot", 1.5, 2.5),)}
