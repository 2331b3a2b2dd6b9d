"""The one line that loading a file an attachment must refuse gives."""

from __future__ import annotations

import pytest

from chatapp.engine.retrieval.loading import load_path
from chatapp.errors import AttachmentError


def refused(path) -> str:
    with pytest.raises(AttachmentError) as info:
        load_path(path)
    line = info.value.one_line()
    assert line.startswith("Attachment: ") and "\n" not in line
    return line
