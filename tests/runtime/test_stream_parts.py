"""``stream_parts.PartReader``: frames of parts whose sizes earlier parts give, parsed the same
however the stream is cut into reads, small parts staged and large ones read in place."""

import random
import struct

from hypothesis import given, settings, strategies as st

from simshard.runtime.wire.stream_parts import IN_PLACE, STAGE, PartReader

HEAD = struct.Struct("<II")  # a test frame: two sizes, then a part of each size


def frames_parser(out: list):
    while True:
        a, b = HEAD.unpack((yield HEAD.size))
        first = yield a
        second = yield b
        out.append((bytes(first), second))


def encode(frames) -> bytes:
    return b"".join(HEAD.pack(len(x), len(y)) + x + y for x, y in frames)


def feed(reader: PartReader, stream: bytes, cuts) -> tuple[int, int]:
    """``stream`` given to ``reader`` in reads no larger than the next cut (as a socket would);
    the reads that went into a part in place, and all reads."""
    at = in_place = reads = 0
    cuts = list(cuts) or [len(stream) or 1]
    while at < len(stream):
        buf = reader.get_buffer()
        n = min(len(buf), cuts[reads % len(cuts)], len(stream) - at)
        buf[:n] = stream[at:at + n]
        in_place += reader.part is not None
        reader.buffer_updated(n)
        at, reads = at + n, reads + 1
    return in_place, reads


sizes = st.one_of(st.integers(0, 64), st.integers(IN_PLACE - 2, IN_PLACE + 2), st.integers(STAGE - 8, 3 * STAGE))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(sizes, sizes), max_size=6), st.lists(st.integers(1, 5 * STAGE), max_size=5), st.integers(0, 2**32))
def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(shape, cuts, seed):
    rnd = random.Random(seed)
    frames = [(rnd.randbytes(a), rnd.randbytes(b)) for a, b in shape]
    out = []
    reader = PartReader(frames_parser(out))
    feed(reader, encode(frames), cuts)
    assert [(x, bytes(y)) for x, y in out] == frames
    assert all(type(y) is bytearray for _, y in out)  # each part the parser's own buffer
    assert reader.start == reader.end and reader.part is None  # nothing left over


def test_small_frames_come_in_one_read_and_a_large_part_goes_in_place():
    out = []
    reader = PartReader(frames_parser(out))
    small = [(b"run", b"plan"), (b"", b"x" * 100)]
    assert feed(reader, encode(small), [len(encode(small))]) == (0, 1)  # one read, two frames
    assert len(out) == 2
    big = bytes(range(256)) * (3 * STAGE // 256)
    in_place, reads = feed(reader, encode([(b"h", big)]), [STAGE])
    assert bytes(out[-1][1]) == big and in_place == reads - 1  # all but the first read went straight in
