"""Attachments in the TUI, on the real model: /attach (with Tab completion), the picker, the
header's list and removal, the sources under each question, the panels' retrieved segment,
a resumed session, and every bad input."""

from __future__ import annotations

import pytest
from textual.command import CommandPalette
from textual.notifications import Notify
from textual.widgets import DirectoryTree

from chatapp.engine.chat.prompt_view import role_counts
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import AttachFailed, Attached, TurnFinished, TurnRetrieved
from chatapp.ui.screens.attach import AttachScreen, DetachScreen
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Notice, Transcript, UserMessage
from tests.cli.attach_inputs import bad_inputs
from tests.engine.retrieval.conftest import DOCS, make_bomb_pdf, pdf_readers
from tests.ui._helpers import TURN_TIMEOUT, WIDE, Messages, notified, send_text, wait_until

pytestmark = pytest.mark.app_settings(n_ctx=2048, max_tokens=16, threads=0, opener=None)

QUESTION = "How do I disable Rich globally in Typer?"


def header(app: ChatApp) -> str:
    return app.query_one(AppHeader).render().plain


async def type_command(pilot, text: str) -> None:
    pilot.app.query_one(Composer).load_text(text)
    await pilot.press("enter")


async def attached(pilot, seen: Messages, n: int) -> Attached:
    await wait_until(pilot, lambda: seen.count(Attached) + seen.count(AttachFailed) >= n, TURN_TIMEOUT)
    await wait_until(pilot, lambda: not pilot.app.attaching)
    assert seen.count(Attached) == n, [m.error for m in seen.of(AttachFailed)]
    return seen.of(Attached)[-1]


def sources_notices(app: ChatApp) -> list[Notice]:
    return [n for n in app.query_one(Transcript).query(Notice) if n.has_class("-sources")]


async def test_attach_typed_then_asked_shows_its_sources_and_its_cost(make_app, monkeypatch):
    monkeypatch.chdir(DOCS.parent)
    app, seen = make_app(session="s")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await wait_until(pilot, lambda: not app.session_busy, TURN_TIMEOUT)
        composer = app.query_one(Composer)
        composer.load_text("/attach docs/ty")
        await pilot.press("tab")  # completes the path
        assert composer.text == "/attach docs/typer.md"
        await pilot.press("enter")
        report = (await attached(pilot, seen, 1)).report
        assert [p.attachment.name for p in report.added] == ["typer.md"] and not report.added[0].whole
        assert composer.text == ""
        assert "attached (F8): typer.md" in header(app)
        assert any("attached typer.md: " in n.render().plain and " chunks" in n.render().plain
                   for n in app.query_one(Transcript).query(Notice))

        done = await send_text(pilot, app, seen, QUESTION)
        assert isinstance(done, TurnFinished)
        [retrieved] = seen.of(TurnRetrieved)
        context = app.engine.messages[-2].context
        assert retrieved.context == context and "TYPER_USE_RICH" in context.text
        # Under the user's message: file, line range and section of each part.
        [sources] = sources_notices(app)
        children = list(app.query_one(Transcript).children)
        assert isinstance(children[children.index(sources) - 1], UserMessage)
        for entry in context.entries:
            assert entry.label().strip("[]") in sources.render().plain  # e.g. typer.md, lines 10-42, "Install"
        # The panels: the retrieved segment is the block's own token count.
        n = role_counts(done.view)["retrieved"]
        assert n == len(app.engine.tokenize(context.text)) > 0
        kv = app.query_one(KVPanel).plain
        assert f"retrieved {n}" in kv and f"retrieved: {n} tok" in kv
        assert done.record.cached_tokens == 0  # the first turn
        placed = f"placed late: {done.record.prefill_tokens:,} prefilled ({n:,} retrieved)"
        assert f"{placed}; the next turn reuses it all" in kv
        # The second question: the conversation before its block comes from the cache.
        done = await send_text(pilot, app, seen, "Since which version does Typer include Click's source code?")
        second = app.engine.messages[-2].context
        n2 = sum(1 for p in done.view if p.role == "retrieved" and p.origin == "prefilled")
        assert n2 == len(app.engine.tokenize(second.text)) > 0
        assert done.record.cached_tokens > 0
        kv = app.query_one(KVPanel).plain.replace("\n", " ")
        assert f"placed late: the {done.record.cached_tokens:,} tok before it came from the cache; " \
               f"{done.record.prefill_tokens:,} prefilled ({n2:,} retrieved)" in kv
        assert len(sources_notices(app)) == 2
        tokens = app.query_one(TokensPanel)
        assert f"retrieved {role_counts(done.view)['retrieved']}" in tokens.query_one("#tokens-summary").plain

    # A new app on the same session: its attachments, and the sources of the earlier question.
    app2, seen2 = make_app(session="s")
    async with app2.run_test(size=WIDE, message_hook=seen2) as pilot:
        await wait_until(pilot, lambda: app2.sessions_ui.live is not None and not app2.session_busy, TURN_TIMEOUT)
        assert app2.sessions_ui.live.report.restored_tokens > 0
        assert "attached (F8): typer.md" in header(app2)
        assert len(sources_notices(app2)) == 2
        await notified(pilot, seen2, lambda n: "1 attachment restored: typer.md" in n.message)


async def test_the_picker_the_header_list_and_removing_one(make_app, tmp_path, monkeypatch):
    tmp_path = tmp_path / "work"  # the test's data and config folders are in tmp_path itself
    tmp_path.mkdir()
    (tmp_path / "more.md").write_text("# More\n\nThe backup server is called egret.\n")
    (tmp_path / "notes.txt").write_text("The staging server is called heron.\n")
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "faq.md").write_text("# FAQ\n\nPort 8443 is for staging.\n")
    monkeypatch.chdir(tmp_path)
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        # The palette opens the picker; Enter on a file in the tree attaches it.
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Attach a file")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, AttachScreen))
        tree = app.screen.query_one(DirectoryTree)
        await wait_until(pilot, lambda: len(tree.root.children) == 3)
        assert [str(c.label) for c in tree.root.children] == ["refs", "more.md", "notes.txt"]
        await pilot.press("down", "down", "enter")  # refs, more.md
        await attached(pilot, seen, 1)
        assert not isinstance(app.screen, AttachScreen)
        # F on a folder attaches the folder; a path typed in the box works too.
        await type_command(pilot, "/attach")
        await wait_until(pilot, lambda: isinstance(app.screen, AttachScreen))
        tree = app.screen.query_one(DirectoryTree)
        await wait_until(pilot, lambda: len(tree.root.children) == 3)
        await pilot.press("down", "f")
        await attached(pilot, seen, 2)
        await type_command(pilot, "/attach")
        await wait_until(pilot, lambda: isinstance(app.screen, AttachScreen))
        box = app.screen.query_one("#attach-path")
        box.focus()
        await pilot.press("f")  # in the box, F is a letter of the path
        assert box.value == "f" and isinstance(app.screen, AttachScreen)
        await pilot.press("backspace", *"notes.txt", "enter")
        await attached(pilot, seen, 3)
        assert "attached (F8): more.md, refs/faq.md, notes.txt" in header(app)

        # F8 lists them; Enter removes the highlighted one. /detach NAME removes by name.
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, DetachScreen))
        await pilot.press("enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, DetachScreen))
        assert "attached (F8): refs/faq.md, notes.txt" in header(app)
        await type_command(pilot, "/detach notes.txt")
        await pilot.pause()
        assert "attached (F8): refs/faq.md" in header(app)
        await type_command(pilot, "/detach nope.md")
        await notified(pilot, seen, lambda n: n.message == "Attachment: nothing named nope.md is attached")
        assert [p.attachment.name for p in app.engine.attachments] == ["refs/faq.md"]
        await pilot.press("ctrl+n")  # a new chat starts without attachments
        await wait_until(pilot, lambda: "attached" not in header(app))


async def test_each_bad_input_is_one_notice_and_nothing_changes(make_app, tmp_path):
    app, seen = make_app()
    good = tmp_path / "good.txt"
    good.write_text("The staging server is called heron.\n")
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await type_command(pilot, f"/attach {good}")
        await attached(pilot, seen, 1)
        await send_text(pilot, app, seen, "Hello")
        before = (app.engine.messages, app.engine.attachments, header(app),
                  len(app.query_one(Transcript).children))
        (tmp_path / "bad").mkdir()
        for n, (what, (path, why)) in enumerate(bad_inputs(tmp_path / "bad").items(), 1):
            await type_command(pilot, f"/attach {path}")
            await wait_until(pilot, lambda: seen.count(AttachFailed) >= n, TURN_TIMEOUT)
            await wait_until(pilot, lambda: not app.attaching)
            error = seen.of(AttachFailed)[-1].error
            assert error.startswith("Attachment: ") and why in error and "\n" not in error, what
            await notified(pilot, seen, lambda note: note.message == error)
            composer = app.query_one(Composer)
            assert composer.text == f"/attach {path}", what  # back in the composer, to fix it
            composer.clear()
            after = (app.engine.messages, app.engine.attachments, header(app),
                     len(app.query_one(Transcript).children))
            assert after == before, what
        assert seen.count(AttachFailed) == 6


async def test_esc_stops_attaching_a_slow_pdf_and_nothing_is_attached(make_app, tmp_path):
    """Esc did nothing during "attaching…": a PDF that keeps pypdf busy is stopped, its reader killed."""
    slow = tmp_path / "slow.pdf"
    slow.write_bytes(make_bomb_pdf(4 * 2**20))  # inside the inflate limit, a minute or more of pypdf
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        for key in ("escape", "ctrl+c"):
            await type_command(pilot, f"/attach {slow}")
            await wait_until(pilot, lambda: bool(pdf_readers()), TURN_TIMEOUT)
            assert "attaching slow.pdf" in header(app)
            await pilot.press(key)
            await wait_until(pilot, lambda: not app.attaching, TURN_TIMEOUT)
            failed = seen.of(AttachFailed)[-1]
            assert failed.stopped and failed.error == "attaching slow.pdf stopped; nothing was attached"
            await app.workers.wait_for_complete()
            assert not pdf_readers()
            assert app.engine.attachments == () and "attaching" not in header(app)
            composer = app.query_one(Composer)
            assert composer.text == f"/attach {slow}"  # nothing typed is lost
            composer.clear()
        assert seen.count(AttachFailed) == 2 and seen.count(Attached) == 0
        # Ctrl+C stopped the attach; it did not arm a quit.
        assert not any("Ctrl+C again" in m.notification.message for m in seen.of(Notify))


async def test_file_names_and_texts_with_escapes_reach_the_screen_escaped(make_app, tmp_path, monkeypatch):
    """A file named with an OSC sequence (it could set the terminal's title or clipboard), one
    with a line break, and a text that holds escape sequences: shown escaped everywhere."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "\x1b]0;title\x07.txt").write_text("The staging server is \x1b[31mheron\x1b[0m.\n")
    (folder / "two\nlines.md").write_text("# Owners\n\nAda runs heron.\n")
    monkeypatch.chdir(folder)
    app, seen = make_app()
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await type_command(pilot, "/attach")  # the picker lists the folder's files
        await wait_until(pilot, lambda: isinstance(app.screen, AttachScreen))
        tree = app.screen.query_one(DirectoryTree)
        await wait_until(pilot, lambda: len(tree.root.children) == 2)
        picked = [str(c.label) for c in tree.root.children]
        assert picked == ["\\x1b]0;title\\x07.txt", "two\\nlines.md"]
        await pilot.press("escape")
        await type_command(pilot, f"/attach {folder}")
        await attached(pilot, seen, 1)
        await send_text(pilot, app, seen, "Who runs the staging server?")
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, DetachScreen))
        listed = "\n".join(str(option.prompt) for option in app.screen.query_one("OptionList")._options)
        await pilot.press("escape")
        shown = [header(app), listed, *picked, app.query_one(TokensPanel).query_one("#tokens-pieces").render().plain,
                 *(n.render().plain for n in app.query_one(Transcript).query(Notice)),
                 *(m.notification.message for m in seen.of(Notify))]
        text = "\n".join(shown)
        assert "notes/\\x1b]0;title\\x07.txt" in header(app) and "notes/two\\nlines.md" in header(app)
        assert "notes/\\x1b]0;title\\x07.txt" in listed
        assert "\\x1b[31m" in shown[4]  # the attached text's own escapes, in the Tokens panel
        assert not any(c in text for c in "\x1b\x07\x9b"), [line for line in shown if "\x1b" in line]
