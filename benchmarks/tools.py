"""Tools (issue 38): what a tool loop reuses of the cache, and whether each schema's reported
token cost is exact, on the real default model with the tests' MCP server over stdio.

- A 3-step loop ("What is 17 plus 25?" with --tool-choice add, the small model then copying its
  call): each step after the first should prefill only the appended result and the template's
  glue, reusing >= 95% of its prompt from the cache.
- Each tool's cost (Engine.tool_costs) against the prompt's tokens counted again with and
  without that tool: the difference must be exact.

    .venv/bin/python benchmarks/tools.py [--model PATH] [--steps 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.chat.tool_turns import ToolTurns
from chatapp.engine.events import TurnDone
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.models.catalog import load_catalog
from chatapp.engine.models.resolve import resolve_model
from chatapp.engine.tools.registry import ToolRegistry
from chatapp.engine.tools.servers import McpServer, ToolSettings

SERVER = Path(__file__).resolve().parent.parent / "tests" / "data" / "mcp_test_server.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    path = args.model or resolve_model(load_catalog().default)
    runtime = LlamaRuntime(path, LoadOptions(n_ctx=2048))
    engine = Engine(LocalBackend(runtime), Settings(n_ctx=2048, system_prompt="You are a helpful assistant."))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=60)
    server = McpServer("test", command=sys.executable, args=(str(SERVER),))
    with ToolRegistry.open(ToolSettings(roots=(str(SERVER.parent),), servers=(server,))) as registry:
        tools = registry.enabled()
        costs = engine.tool_costs(tools)
        engine.set_tools(tools)
        everything = len(engine.prompt_ids(engine.messages, add_generation_prompt=False))
        exact = True
        for tool in tools:
            engine.set_tools([t for t in tools if t is not tool])
            without = len(engine.prompt_ids(engine.messages, add_generation_prompt=False))
            ok = costs.per_tool[tool.name] == everything - without
            exact &= ok
            print(f"{tool.name:>14} ({tool.server}): {costs.per_tool[tool.name]:4d} tokens; with/without "
                  f"difference {everything - without:4d} {'exact' if ok else 'DIFFERS'}")
        print(f"glue {costs.glue} tokens, all tools {costs.total} tokens ({costs.format} format)")

        offered = registry.choose(["add"])
        turns = ToolTurns(engine, registry, offered, lambda call, spec: "once", choice="add", max_steps=args.steps)
        records = []
        for event in turns.run(lambda: engine.send("What is 17 plus 25?")):
            if isinstance(event, TurnDone):
                records.append(event.record)
        for step, record in enumerate(records, 1):
            reused = record.cached_tokens / record.prompt_tokens
            calls = [(c["name"], c["arguments"], c["result"]) for c in record.extra.get("tool_calls", [])]
            print(f"step {step}: prompt {record.prompt_tokens}, cached {record.cached_tokens} ({reused:.1%}), "
                  f"prefilled {record.prefill_tokens} in {record.prefill_ms:.0f} ms; calls {calls}"
                  f"{'; ' + record.extra['tool_loop_end'] if 'tool_loop_end' in record.extra else ''}")
    print("schema costs exact" if exact else "schema costs DIFFER")


if __name__ == "__main__":
    main()
