"""A base model is named as one wherever the TUI shows a model (issue 59): the header, the model
picker's row and a notice as it loads; a chat model is not."""

from __future__ import annotations

from chatapp.config import Settings
from chatapp.engine.machine.model_fit import ModelRow
from chatapp.engine.models.base_model import base_model_reason
from chatapp.engine.opening import open_engine
from chatapp.ui.app import ChatApp
from chatapp.ui.screens.model_picker import option_for
from chatapp.ui.widgets.header import AppHeader
from tests.ui._helpers import WIDE, Messages, notified


async def test_the_header_and_a_load_notice_name_a_base_model(gemma_path, default_model_path):
    for path, base in ((gemma_path, True), (default_model_path, False)):
        settings = Settings().replace(n_ctx=1024, threads=2)
        app, seen = ChatApp(open_engine(settings, str(path)), settings=settings), Messages()
        try:
            async with app.run_test(size=WIDE, message_hook=seen) as pilot:
                await pilot.pause()
                header = app.query_one(AppHeader).render().plain
                assert ("· base model ·" in header) is base, header
                if base:
                    await notified(pilot, seen, lambda n: "a base model, not tuned for chat" in n.message)
        finally:
            app.release_engine()


def test_the_picker_row_of_a_base_model_says_so(gemma_path, default_model_path):
    """The row as model_rows makes it (its `base` from base_model_reason, as `models list`'s is)."""
    for path, base in ((gemma_path, True), (default_model_path, False)):
        row = ModelRow(path.stem, "catalog", str(path), "Q4", path.stat().st_size, None, True, None,
                       base_model_reason(path))
        assert ("(base model, not for chat)" in option_for(row, default_model_path).prompt.plain) is base
