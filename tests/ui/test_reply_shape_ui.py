"""The reply shape in the TUI (issue 56, item 1): the palette's dialog and `/schema` set it through
chatapp.engine.shape's own reading (bad input: one line, nothing changed), the header says it is
on, each shaped turn says whether its reply matched the schema and where not, and the Speed
panel shows the grammar's time a token beside decode's. Real model throughout."""

from __future__ import annotations

import json

import pytest
from textual.widgets import Label, TextArea

from chatapp.engine.shape import ReplyShape, shape_from_json
from chatapp.errors import InputError

from chatapp.ui.screens.reply_shape import ReplyShapeScreen
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.transcript import Notice
from tests.ui._helpers import NARROW, header, notified, send_text, texts, wait_until


async def test_the_dialog_sets_a_shape_the_turn_keeps_then_off_clears_it(make_app):
    app, seen = make_app(max_tokens=24)

    def dialog_open() -> bool:  # pushed, and its box composed
        return isinstance(app.screen, ReplyShapeScreen) and bool(app.screen.query(TextArea))

    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        await app.run_action("reply_shape")
        await wait_until(pilot, dialog_open)
        screen = app.screen
        screen.query_one(TextArea).load_text("answer integer")  # llm's types are int, float, bool, str
        await pilot.press("ctrl+s")
        await pilot.pause()
        problem = screen.query_one("#shape-error", Label).render().plain
        assert app.screen is screen and "'integer' is not one of int" in problem and "\n" not in problem
        assert app.engine.generation.shape is None and "shape" not in header(app)

        screen.query_one(TextArea).load_text("answer bool")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: not isinstance(app.screen, ReplyShapeScreen))
        shape = app.engine.generation.shape
        assert shape is not None and shape.schema["properties"] == {"answer": {"type": "boolean"}}
        assert "shape: JSON" in header(app)

        record = (await send_text(pilot, app, seen, "Is the sky blue?")).record
        assert json.loads(record.reply).keys() == {"answer"} and record.extra["schema_valid"] is True
        await wait_until(pilot, lambda: "schema: the reply is valid" in texts(app, Notice))
        grammar = app.query_one(SpeedPanel).figures["grammar"]
        assert grammar.startswith(f"grammar {record.extra['grammar_ms_per_token']:.2f} ms/tok beside decode's")

        await app.run_action("reply_shape")  # the dialog shows the schema now set, to edit
        await wait_until(pilot, dialog_open)
        assert json.loads(app.screen.query_one(TextArea).text) == shape.schema
        await pilot.click("#off")
        await wait_until(pilot, lambda: not isinstance(app.screen, ReplyShapeScreen))
        assert app.engine.generation.shape is None and "shape" not in header(app)

        free = (await send_text(pilot, app, seen, "Say hi.")).record
        assert "schema_valid" not in free.extra and "grammar" not in app.query_one(SpeedPanel).figures


async def test_slash_schema_refuses_in_one_line_and_says_where_a_reply_fails(make_app):
    app, seen = make_app(max_tokens=3)  # too few for the object to close: the check says where it stops
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        composer = app.query_one(Composer)
        composer.load_text("/schema bio: one sentence, bio")
        await pilot.press("enter")
        refused = await notified(pilot, seen, lambda n: n.title == "Reply shape")
        assert refused.severity == "error" and "given twice" in refused.message and "\n" not in refused.message
        assert app.engine.generation.shape is None and composer.text == "/schema bio: one sentence, bio"

        composer.load_text("/schema bio: one sentence")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.engine.generation.shape is not None)
        record = (await send_text(pilot, app, seen, "Tell me about yourself.")).record
        assert record.finish_reason == "length" and record.extra["schema_valid"] is False
        line = f"schema: the reply is not valid: {record.extra['schema_error']}"
        assert record.extra["schema_error"].startswith("not JSON")
        await wait_until(pilot, lambda: line in texts(app, Notice))

        composer.load_text("/schema off")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.engine.generation.shape is None)
        assert "shape" not in header(app)


def test_slash_schema_keeps_the_text_as_typed():
    from chatapp.ui.slash import slash_action

    assert slash_action("/schema") == "reply_shape"
    assert slash_action("/schema off") == "reply_shape('off')"
    typed = "name\n  age int: in years"  # a schema over lines keeps them
    assert slash_action(f"/SCHEMA {typed} ") == f"reply_shape({typed!r})"


async def test_the_tokens_panel_shows_the_grammars_mask_per_reply_token(make_app):
    from chatapp.ui.widgets.paint import shown_piece
    from chatapp.ui.widgets.tokens_panel import WINDOW, TokensPanel

    app, seen = make_app(max_tokens=24)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        for typed in ("/schema answer bool", "/schema mask"):
            app.query_one(Composer).load_text(typed)
            await pilot.press("enter")
            await notified(pilot, seen, lambda n, typed=typed: n.title == "Reply shape" and (
                "mask" in typed) == ("Tokens panel" in n.message))
        record = (await send_text(pilot, app, seen, "Is the sky blue?")).record
        assert record.finish_reason == "stop" and record.extra["schema_valid"]
        panel = app.query_one(TokensPanel)
        mask = panel._mask_at()
        view = panel.turn_view
        # one entry per reply token in the cache, in order: together they are the reply
        assert "".join(view[i].token.piece for i in sorted(mask)) == record.reply
        assert [a for a, _ in (mask[i] for i in sorted(mask))] == record.extra["grammar_allowed"][:-1]
        forced = [i for i in sorted(mask) if mask[i][0] == 1]
        assert len(forced) == record.extra["grammar_forced"] - (record.extra["grammar_allowed"][-1] == 1)
        assert forced and all(0 <= mask[i][1] <= 1 for i in mask)
        said = panel._summary(200).plain
        assert f"grammar mask: {len(forced)} token{'s' * (len(forced) != 1)} forced (tinted) of {len(mask)}" in said
        start = max(len(view) - WINDOW, 0)
        panel.select(forced[0] - start)
        await pilot.pause()
        piece = shown_piece(view[forced[0]].token.piece)
        assert f"{piece!r}: forced: the only entry the grammar allowed" in panel._summary(200).plain
        free = next(i for i in sorted(mask) if mask[i][0] > 1)
        panel.select(free - start)
        await pilot.pause()
        assert f"the grammar allowed {mask[free][0]} entries, cutting {mask[free][1]:.1%}" in panel._summary(200).plain


async def test_a_shape_is_kept_with_the_chat_and_comes_back_when_it_is_opened(make_app):
    """Issue 56: the TUI's shape is a per-session setting. A GBNF grammar typed after `/schema`
    shapes the kept chat's turn; the chat opened again in a new app has it on before any turn,
    and `/schema off` there clears it from the session too."""
    from chatapp.config import Settings
    from chatapp.engine.sessions import SessionManager

    grammar = 'root ::= "yes" | "no"'
    app, seen = make_app(max_tokens=8)
    async with app.run_test(size=NARROW, message_hook=seen) as pilot:
        app.query_one(Composer).load_text(f"/schema {grammar}")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.engine.generation.shape is not None)
        assert app.engine.generation.shape.gbnf == grammar and "shape: GBNF" in header(app)
        record = (await send_text(pilot, app, seen, "Is the sky blue?")).record
        assert record.reply in ("yes", "no")
        name = app.sessions_ui.name
    app.release_engine()
    kept = SessionManager.open(Settings(), create=False).store.choices(name)
    assert json.loads(kept.shape) == {"gbnf": grammar, "source": "GBNF"}

    again, seen = make_app(session=name, max_tokens=8)
    async with again.run_test(size=NARROW, message_hook=seen) as pilot:
        await notified(pilot, seen, lambda n: "as session" in n.message and "GBNF" in n.message)
        assert again.engine.generation.shape.gbnf == grammar and "shape: GBNF" in header(again)
        assert (await send_text(pilot, again, seen, "Is grass green?")).record.reply in ("yes", "no")
        again.query_one(Composer).load_text("/schema off")
        await pilot.press("enter")
        await wait_until(pilot, lambda: again.engine.generation.shape is None)
    again.release_engine()
    assert SessionManager.open(Settings(), create=False).store.choices(name).shape == ""


def test_a_kept_shape_edited_since_is_refused_in_one_line():
    schema = ReplyShape(schema={"type": "object", "properties": {"a": {"type": "integer"}}}, source="DSL")
    assert shape_from_json(schema.to_json()) == schema
    for edited, said in (("{", "not one chatapp wrote"), ('{"schema": {"type": 7}}', "not a valid JSON schema"),
                         ('{"gbnf": "list ::= x"}', "no `root ::= ...` rule"), ("[]", "not one chatapp wrote")):
        with pytest.raises(InputError, match=said):
            shape_from_json(edited)
