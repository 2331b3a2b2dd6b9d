"""The header at 80 columns: a long store name shortens (cut with …, the session after it)
instead of pushing the model, its quant, the backend and the context off the line."""

from __future__ import annotations

from textual.app import App, ComposeResult

from chatapp.engine.backend import ModelSummary
from chatapp.ui.widgets.header import AppHeader
from tests.ui._helpers import wait_until

LONG_NAME = "ollama:hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M-imatrix-long-tag"
SUMMARY = ModelSummary(name=LONG_NAME, path="/m/sha256-" + "b179c" * 12, kind="in-process", backend="CPU",
                       location="in-process", build="b1", n_ctx=2048, quant="Q4_K_M")


class HeaderHost(App[None]):
    def compose(self) -> ComposeResult:
        yield AppHeader(id="header")


def shown(app: App) -> str:
    header = app.query_one(AppHeader)
    return header.render_line(0).text


async def test_at_80_columns_the_header_keeps_model_quant_backend_and_context():
    app = HeaderHost()
    async with app.run_test(size=(80, 24)) as pilot:
        header = app.query_one(AppHeader)
        header.summary = SUMMARY
        header.session = "what-is-the-capital-of-france-and-why"
        await pilot.pause()
        await wait_until(pilot, lambda: "ctx 2,048" in shown(app))
        line = shown(app)
        assert "ollama:hf.co/" in line and "…" in line  # the name, cut: its start says which it is
        assert all(part in line for part in ("Q4_K_M", "CPU", "ctx 2,048")), line
        header.status = "generating…"
        await pilot.pause()
        line = shown(app)
        assert "generating…" in line and "ctx 2,048" in line and "ollama:" in line, line
        assert len(line.rstrip()) <= 80
    wide = HeaderHost()
    async with wide.run_test(size=(200, 24)) as pilot:  # room enough: nothing is cut
        header = wide.query_one(AppHeader)
        header.summary, header.session = SUMMARY, "s1"
        await pilot.pause()
        assert f"{LONG_NAME} · Q4_K_M · CPU · ctx 2,048  session: s1" in shown(wide)
