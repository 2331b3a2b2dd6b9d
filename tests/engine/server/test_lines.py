"""LineBuffer: the lines of a server-sent-event stream, however its chunks fall, and a cap on
a line that never ends. (A pure function of bytes: no server needed.)"""

from __future__ import annotations

import pytest

from chatapp.engine.server.lines import LineBuffer, LineTooLong


def test_lines_are_split_wherever_the_chunks_break():
    lines = LineBuffer(limit=100)
    said = [*lines.feed(b"data: 1\r"), *lines.feed(b"\n\ndata"), *lines.feed(b": 2\n: ping\n"), *lines.feed(b"data: 3")]
    assert said == [b"data: 1", b"", b"data: 2", b": ping"] and lines.rest() == b"data: 3"


def test_a_line_longer_than_the_cap_is_refused_without_waiting_for_its_end():
    """A line is searched and copied once, so a 10 MB one is no longer slow (quadratic before);
    and past the cap it is refused at once, whatever may follow."""
    lines = LineBuffer(limit=1 << 20)
    assert lines.feed(b"data: ok\ndata: {") == [b"data: ok"]
    with pytest.raises(LineTooLong):
        for _ in range(100):
            assert lines.feed(b"x" * 65536) == []
