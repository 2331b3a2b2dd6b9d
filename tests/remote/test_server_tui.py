"""The chat App on the llama-server backend, driven through Textual's pilot."""

from __future__ import annotations

import shutil

import pytest

from chatapp.engine.backend import NOT_REPORTED
from chatapp.engine.opening import open_engine
from chatapp.format import count, ms, tps
from chatapp.ui.app import ChatApp
from chatapp.ui.messages import ModelInfoReady, PrefillProgressed, ReplyProgress, TurnFailed, TurnFinished
from chatapp.ui.screens.attention import AttentionScreen, AttentionView
from chatapp.ui.widgets.composer import Composer
from chatapp.ui.widgets.header import AppHeader
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.quant_panel import QuantPanel
from chatapp.ui.widgets.speed_panel import SpeedPanel
from chatapp.ui.widgets.tokens_panel import TokensPanel
from chatapp.ui.widgets.transcript import Reply, Transcript
from tests.ui._helpers import Messages, notified, wait_until

from .conftest import SETTINGS, start_llama_server
from tests.remote.server_tui import TURN_TIMEOUT, WIDE, send


@pytest.fixture
def server_app():
    """ChatApp around an engine on a llama-server; every engine is closed after the test."""
    apps: list[ChatApp] = []

    def make(url: str, **overrides) -> tuple[ChatApp, Messages]:
        settings = SETTINGS.replace(server=url, **overrides)
        engine = open_engine(settings)
        engine.clear_cache()
        app = ChatApp(engine, settings=settings, opener=open_engine)
        apps.append(app)
        return app, Messages()

    yield make
    for app in apps:
        app.release_engine()



async def test_every_panel_shows_the_servers_figures(server_app, llama_server):
    app, seen = server_app(llama_server.url)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await wait_until(pilot, lambda: seen.count(ModelInfoReady))
        header = app.query_one(AppHeader).render().plain
        assert f"llama-server {llama_server.url}" in header and app.engine.summary.build in header
        await send(pilot, app, seen, "Name a fruit.")
        done = await send(pilot, app, seen, "Name another one.")
        record = done.record
        assert record.cached_tokens > 0

        speed = app.query_one(SpeedPanel).figures
        assert speed["cached_tokens"] == count(record.cached_tokens)
        assert speed["prefill_tps"] == tps(record.prefill_tps) and speed["ttft_ms"] == ms(record.ttft_ms)
        assert speed["decode_tps"] == tps(record.decode_tps) and record.decode_tps > 0

        kv = app.query_one(KVPanel)
        assert kv.kv_used == record.kv_used == app.engine.kv_used() and kv.n_ctx == 1024
        assert f"this turn wrote: {count(record.kv_used - record.cached_tokens)} cells" in kv.plain
        assert NOT_REPORTED in kv.plain  # KV bytes: the server does not say its cache type

        tokens = app.query_one(TokensPanel)
        assert list(tokens.turn_view) == done.view and len(done.view) == record.kv_used

        quant = app.query_one(QuantPanel)
        assert quant.info is not None and quant.info.file_type == "Q4_1"  # the same file, readable here
        assert f"{quant.info.bits_per_weight:.2f} bits/weight" in quant.plain
        assert f"KV now   {count(record.kv_used)} tok" in quant.plain

        await pilot.press("ctrl+l")
        await notified(pilot, seen, lambda n: "serves the model it was started with" in n.message)


async def test_the_attention_view_says_the_server_has_no_weights_to_show(server_app, llama_server):
    app, seen = server_app(llama_server.url)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        await send(pilot, app, seen, "Name a fruit.")
        await pilot.press("f9")
        await wait_until(pilot, lambda: isinstance(app.screen, AttentionScreen))
        view = app.screen.query_one(AttentionView)
        await wait_until(pilot, lambda: view.problem is not None, 30)
        assert view.map is None
        assert view.plain.startswith("llama-server does not expose attention weights")


async def test_a_model_file_this_machine_cannot_read_shows_what_the_server_reports(
        server_app, default_model_path, tmp_path):
    copy = tmp_path / "elsewhere" / default_model_path.name
    copy.parent.mkdir()
    shutil.copyfile(default_model_path, copy)
    server = start_llama_server(copy, tmp_path / "server")
    try:
        copy.unlink()  # the server keeps its mapping; this machine can no longer read the file
        app, seen = server_app(server.url)
        async with app.run_test(size=WIDE, message_hook=seen) as pilot:
            summary = app.engine.summary
            assert summary.local_file is None and summary.quant == "Q4_1"
            await send(pilot, app, seen, "Hi")
            text = app.query_one(QuantPanel).plain
            bits = summary.size_bytes * 8 / summary.n_params
            assert f"Q4_1 · {bits:.2f} bits/weight" in text
            assert f"tensor types: {NOT_REPORTED}" in text and "scanning" not in text
            assert not seen.count(ModelInfoReady)
    finally:
        server.stop()


async def test_the_tui_stays_responsive_while_the_server_reads_a_long_prompt(server_app, llama_server):
    app, seen = server_app(llama_server.url)
    long = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(50))
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        app.query_one(Composer).load_text(long + "\nHow many lines?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(PrefillProgressed), TURN_TIMEOUT)
        await pilot.press(*"typing on")  # the worker holds the turn; the UI thread keeps serving keys
        assert app.generating and app.query_one(Composer).text == "typing on"
        await pilot.press("f3")
        assert app.query_one("#kv").has_class("-current")
        await pilot.press("escape")
        await wait_until(pilot, lambda: seen.count(TurnFinished), TURN_TIMEOUT)
        record = seen.of(TurnFinished)[0].record
        assert record.finish_reason == "stopped"
        assert app.query_one(Composer).text == "typing on"
        done = await send(pilot, app, seen, "Say hello.")
        assert isinstance(done, TurnFinished) and done.record.reply


async def test_a_server_killed_mid_reply_keeps_the_reply_and_gives_a_notice(server_app, another_server):
    server = another_server()
    app, seen = server_app(server.url, max_tokens=400)
    async with app.run_test(size=WIDE, message_hook=seen) as pilot:
        app.query_one(Composer).load_text("Write a very long story about a ship.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: seen.count(ReplyProgress), TURN_TIMEOUT)
        server.popen.kill()
        await wait_until(pilot, lambda: seen.count(TurnFinished), TURN_TIMEOUT)
        record = seen.of(TurnFinished)[0].record
        assert record.finish_reason == "stopped" and record.reply
        await notified(pilot, seen, lambda n: n.title == "Server" and "lost llama-server" in n.message)
        reply = app.query_one(Transcript).query(Reply).last()
        assert reply.source == record.reply and reply.has_class("-stopped")
        failed = await send(pilot, app, seen, "Are you there?")
        assert isinstance(failed, TurnFailed) and failed.refused and "cannot connect" in failed.error
        assert app.query_one(Composer).text == "Are you there?"
        assert app.engine.messages[-1].content == record.reply
