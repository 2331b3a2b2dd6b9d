"""The lines of a server-sent-event stream, found in linear time and capped in length."""

from __future__ import annotations


class LineTooLong(Exception):
    pass


class LineBuffer:
    """Lines of a byte stream, without their line ends, in time linear in its length: each
    byte is searched for a line end once and copied into its line once (joining everything
    pending and splitting it again at each chunk is quadratic in a long line). What waits for
    a line end is capped at `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        start, lines = len(self._pending), []
        self._pending += chunk
        cut = 0
        while (end := self._pending.find(b"\n", start)) >= 0:  # what was pending holds no line end
            lines.append(bytes(self._pending[cut:end]).rstrip(b"\r"))
            cut = start = end + 1
        del self._pending[:cut]  # only the chunk's tail stays
        if len(self._pending) > self.limit:
            raise LineTooLong
        return lines

    def rest(self) -> bytes:
        """What came after the last line end, once the stream has ended."""
        rest, self._pending = bytes(self._pending).rstrip(b"\r"), bytearray()
        return rest
