"""An image in the TUI, on the real default model and a synthetic projector (issue 55): /attach
takes an image file for the next question, the header and Model panel say the model sees images,
the turn encodes it once and the panels show its cells, its tokens and its encode apart."""

from __future__ import annotations

import pytest

from chatapp.ui.messages import AttachFailed, ImageAttached, TurnFinished
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.quant_panel import QuantPanel
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Notice, Transcript
from tests.engine.local.vision import build_projector, picture
from tests.ui._helpers import TURN_TIMEOUT, WIDE, send_text, wait_until

pytestmark = pytest.mark.app_settings(n_ctx=1024, max_tokens=8, threads=1, opener=None)


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory):
    return build_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-test.gguf")


async def test_an_attached_image_goes_with_the_next_question_and_is_encoded_once(make_app, mmproj, tmp_path):
    (tmp_path / "boat.png").write_bytes(picture(5))
    (tmp_path / "notes.png").write_text("not a picture")
    app, seen = make_app(mmproj=str(mmproj))
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        header = app.query_one(AppHeader)
        assert "sees images" in header.render().plain
        assert "sees images through mmproj-test.gguf" in app.query_one(QuantPanel).draw(80).plain
        app.query_one(Composer).load_text(f"/attach {tmp_path / 'boat.png'}")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ImageAttached) + seen.count(AttachFailed) >= 1, TURN_TIMEOUT)
        [attached] = seen.of(ImageAttached)
        assert (attached.facts.n_tokens, attached.facts.width, attached.facts.height) == (16, 40, 48)
        assert "image boat.png" in app.attached
        await pilot.pause()

        first = await send_text(pilot, app, seen, "What is in this picture?")
        assert isinstance(first, TurnFinished) and first.record.extra["image_encodes"] == 1
        assert app.attached == ()  # the question holds it now
        assert app.engine.messages[-2].images == (attached.facts.sha256,)
        tokens = app.query_one(TokensPanel)
        assert sum(1 for item in tokens.turn_view if item.role == "image") == 16
        assert "image 16" in "\n".join(line.plain for line in tokens._turn_summary(120))
        assert app.query_one(KVPanel).roles.get("image") == 16
        assert "image: 16 tok, 1 encoded in" in app.query_one(SpeedPanel).figures["image"]
        assert any("asked about 1 image" in str(n.render()) for n in app.query_one(Transcript).query(Notice))

        second = await send_text(pilot, app, seen, "Is it a boat?")
        assert second.record.extra["image_encodes"] == 0
        assert "kept in the cache (0 encodes)" in app.query_one(SpeedPanel).figures["image"]

        app.query_one(Composer).load_text(f"/attach {tmp_path / 'notes.png'}")  # a text file: attached as text
        await pilot.press("enter")
        await wait_until(pilot, lambda: not app.attaching, TURN_TIMEOUT)
        assert seen.count(ImageAttached) == 1
