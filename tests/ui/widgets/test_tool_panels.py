"""The KV panel on a tool loop (issue 38): the tools' schemas, a reply that calls a tool and the
tool's result are roles of their own, and the schemas' tokens (each tool's, the glue) with the
time their prefill takes. The real default model made to call `add` of the tests' MCP server."""

from __future__ import annotations

import pytest

from chatapp.config import Settings
from chatapp.engine.chat.prompt_view import role_counts
from chatapp.engine.chat.tool_turns import ToolTurns
from chatapp.engine.events import TurnDone
from chatapp.engine.opening import open_engine
from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.servers import ToolSettings
from chatapp.ui.widgets.kv_panel import KVPanel
from chatapp.ui.widgets.paint import Sketch
from chatapp.ui.widgets.tokens_panel import TokensPanel
from tests.engine.tools.conftest import stdio_server
from tests.ui._helpers import shown_after
from tests.ui.widgets.hosts import Host


@pytest.fixture(scope="module")
def loop(default_model_path):
    """The two steps of a tool loop: (record, view) each, and what the schemas cost."""
    engine = open_engine(Settings(n_ctx=1024, temperature=0.0, max_tokens=60), str(default_model_path))
    with ToolRegistry.open(ToolSettings(servers=(stdio_server(),), timeout=30)) as registry:
        turns = ToolTurns(engine, registry, registry.choose(["current_time", "add"]), lambda call, spec: "once",
                          choice="add", max_steps=2)
        steps = [(e.record, e.view) for e in turns.run(lambda: engine.send("What is 17 plus 25?"))
                 if isinstance(e, TurnDone)]
        costs = engine.tool_costs()
    yield steps, costs
    engine.close()


def test_tool_roles_are_counted_apart(loop):
    (first, first_view), (second, second_view) = loop[0]
    costs = loop[1]
    roles = role_counts(first_view)
    assert abs(roles["tools"] - costs.total) <= 2  # the schemas' text, tokenized in place
    assert roles["call"] == first.decode_tokens - 1 or roles["call"] == first.decode_tokens  # the reply is a call
    after = role_counts(second_view)
    assert after["tools"] == roles["tools"] and after["call"] >= roles["call"] - 1
    assert after["tool"] > 0  # the result, a role of its own
    assert "tool" not in role_counts([v for v in second_view if v.role != "tool"])


async def test_kv_panel_shows_each_schemas_tokens_and_their_prefill_time(loop, themes):
    (first, first_view), (second, second_view) = loop[0]
    costs = loop[1]
    assert first.extra["tool_schema_tokens"] == costs.per_tool and first.extra["tool_glue_tokens"] == costs.glue
    panel = KVPanel()
    async with Host(themes, panel).run_test(size=(100, 30)) as pilot:
        panel.branch = shown_after(second, second_view, shown_after(first, first_view))
        await pilot.pause()
        text = panel.plain
        assert f"tool schemas: {costs.total:,} tok" in text
        assert f"≈ {costs.total / second.prefill_tps * 1000:,.0f} ms to prefill" in text
        assert f"current_time {costs.per_tool['current_time']}, add {costs.per_tool['add']}, glue {costs.glue}" in text
        counts = role_counts(second_view)
        for role in ("tools", "call", "tool"):
            assert f"{role} {counts[role]:,}" in text


async def test_tokens_panel_names_the_tool_roles_of_the_turn(loop, themes):
    (first, first_view), (second, second_view) = loop[0]
    panel = TokensPanel()
    async with Host(themes, panel).run_test(size=(100, 30)) as pilot:
        panel.branch = shown_after(second, second_view)
        await pilot.pause()
        summary = panel.query_one("#tokens-summary", Sketch).plain
        counts = role_counts(second_view)
        for role, said in (("tools", "tool schemas"), ("call", "tool calls"), ("tool", "tool results")):
            assert f"{said} {counts[role]:,}" in summary
