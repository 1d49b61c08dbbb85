"""Frames parsed off a byte stream with as few reads as the stream allows.

A frame of the control line is a sequence of parts whose sizes the earlier parts give (a fixed
head, then its lengths, a body, out-of-band buffers). Reading each part with its own receive
costs a system call per part, and on uvloop each ``sock_recv_into`` also registers and drops
the socket with the kernel's poller (about eight system calls a part: measured with strace here).

``PartReader`` reads instead as a ``BufferedProtocol`` does (``get_buffer`` / ``buffer_updated``,
so an event loop's transport drives it, or a blocking socket's ``recv_into`` does): every read
takes whatever has come into a staging buffer, and the frame's parser, a generator, is fed each
part as soon as it is whole. A generator says what it wants next by yielding a byte count and
is sent that many bytes, its own (a ``bytearray`` nothing else refers to). A part too large to
stage is read straight into the array it is handed as (no staging copy).
"""

from __future__ import annotations

from typing import Generator

STAGE = 1 << 16  # bytes of the staging buffer: a run call and its small inputs come in one read
IN_PLACE = STAGE // 4  # a part of this many bytes or more is read into its own buffer, not staged

# a frame's parser: yields the bytes it wants next, is sent them (its own), loops for ever
Parser = Generator[int, bytearray, None]


class PartReader:
    """Feeds ``parser`` the parts it asks for from what the stream gives, staged or in place
    (module docstring)."""

    def __init__(self, parser: Parser):
        self.parser = parser
        self.want = next(parser)
        self.stage = bytearray(STAGE)
        self.start = self.end = 0  # the unparsed bytes are stage[start:end]
        self.part: bytearray | None = None  # a large part being read in place
        self.filled = 0  # its bytes read so far
        self._feed()

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read goes: the rest of a large part, else the staging buffer's free end."""
        if self.part is not None:
            return memoryview(self.part)[self.filled:]
        if self.end == len(self.stage):  # full: the unparsed bytes move to the front
            kept = self.end - self.start
            self.stage[:kept] = self.stage[self.start:self.end]
            self.start, self.end = 0, kept
        return memoryview(self.stage)[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` came into the buffer ``get_buffer`` gave: every part now whole goes to the
        parser."""
        if self.part is not None:
            self.filled += nbytes
            if self.filled == len(self.part):
                part, self.part = self.part, None
                self._give(part)
        else:
            self.end += nbytes
        self._feed()

    def _feed(self) -> None:
        while self.part is None:
            staged = self.end - self.start
            if self.want >= IN_PLACE:  # into a buffer of its own, starting with what is staged
                part = bytearray(self.want)
                took = min(staged, self.want)
                part[:took] = self.stage[self.start:self.start + took]
                self.start += took
                if took < self.want:  # the rest is read straight into it
                    self.part, self.filled = part, took
                    return
                self._give(part)
            elif staged >= self.want:
                part = self.stage[self.start:self.start + self.want]  # a copy: the parser's own
                self.start += self.want
                self._give(part)
            else:
                return
            if self.start == self.end:
                self.start = self.end = 0

    def _give(self, part: bytearray) -> None:
        self.want = self.parser.send(part)
