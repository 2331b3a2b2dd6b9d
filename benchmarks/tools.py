"""Tools (issue 38): what a tool loop reuses of the cache, and whether each schema's reported
token cost is exact, on the real default model with the tests' MCP server over stdio.

- A 3-step loop ("What is 17 plus 25?" with --tool-choice add, the small model then copying its
  call): each step after the first should prefill only the appended result and the template's
  glue, reusing >= 95% of its prompt from the cache.
- Each tool's cost (Engine.tool_costs) against the prompt's tokens counted again with and
  without that tool: the difference must be exact.
- With --llama-server: the same add loop driven as llama.cpp's WebUI drives llama-server --jinja
  (/v1/chat/completions with `tools`, the call and its result sent back as messages, the
  server's prompt cache on), each step's prompt, cached and prefilled tokens from its timings:
  what llama.cpp's own tool loop reuses, beside chatapp's.
- With --tui N: the TUI (Textual's pilot, headless) asked N questions with the tool choice `add`;
  for each, the time from the call's last token (the step's last TextDelta, on the turn's
  worker) to the approval dialog mounted on screen. Target: within 100 ms.

  With --template FILE (a Jinja chat template, e.g. tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja),
  both sides run on a copy of the model with that template (`gguf-new-metadata`, in a temp
  folder): the default model's own template has no tools, and llama-server then renders none.

- With --also-server COMMAND (repeatable), another MCP server's tools are offered too, as a user's
  real server's would be: the reference filesystem server (`npm install
  @modelcontextprotocol/server-filesystem`, then `--also-server "node
  node_modules/@modelcontextprotocol/server-filesystem/dist/index.js DIR"`) brings 14 tools and
  2,042 tokens of schemas, where the test server's and the built-ins' six bring 379. A step's
  share reused is 1 - (result + glue) / prompt, so it is read at a prompt of a real size.

    .venv/bin/python benchmarks/tools.py [--model PATH] [--steps 3] [--tui N] [--llama-server [--template FILE]]
                                         [--also-server COMMAND]
"""

from __future__ import annotations

import argparse
import shlex
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
    parser.add_argument("--tui", type=int, default=0, help="questions to time the approval dialog on")
    parser.add_argument("--llama-server", action="store_true", help="also llama-server's own loop")
    parser.add_argument("--template", type=Path, help="run on a copy of the model with this chat template")
    parser.add_argument("--also-server", action="append", default=[], metavar="COMMAND",
                        help="another MCP server over stdio (a command line, e.g. the reference filesystem "
                             "server's), its tools offered beside the test server's: a real server's schemas")
    args = parser.parse_args()
    path = args.model or resolve_model(load_catalog().default)
    if args.template:
        path = with_template(path, args.template)
    if args.llama_server:
        server_loop(path, args.steps)
    if args.tui:
        import asyncio

        latencies = asyncio.run(approval_latency(path, args.tui))
        print("approval dialog after the call's last token: " + ", ".join(f"{ms:.1f}" for ms in latencies)
              + f" ms (max {max(latencies):.1f}; target 100)")
        return
    n_ctx = 8192 if args.also_server else 2048  # a real server's schemas run to thousands of tokens
    runtime = LlamaRuntime(path, LoadOptions(n_ctx=n_ctx))
    engine = Engine(LocalBackend(runtime), Settings(n_ctx=n_ctx, system_prompt="You are a helpful assistant."))
    engine.generation = GenerationSettings(temperature=0.0, max_tokens=60)
    servers = [McpServer("test", command=sys.executable, args=(str(SERVER),))]
    for number, line in enumerate(args.also_server, 1):
        command, *rest = shlex.split(line)
        servers.append(McpServer(f"also{number}", command=command, args=tuple(rest)))
    with ToolRegistry.open(ToolSettings(roots=(str(SERVER.parent),), servers=tuple(servers))) as registry:
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
                  f"prefilled {record.prefill_tokens} in {record.prefill_ms:.0f} ms{least(records, step)}; "
                  f"calls {calls}{'; ' + record.extra['tool_loop_end'] if 'tool_loop_end' in record.extra else ''}")
        chained_calls(engine, registry, tools, args.steps)
    print("schema costs exact" if exact else "schema costs DIFFER")


def chained_calls(engine: Engine, registry: ToolRegistry, tools: list, steps: int) -> None:
    """A loop of `steps` calls with every enabled tool offered. The small model does not chain
    calls by itself (above, it repeats its first), so each step's reply is kept to a call by the
    call grammar a named tool choice uses (add, then current_time, in turn); what is measured is
    what each step after the first prefills, against its whole prompt."""
    from chatapp.engine.tools.calls import parse_calls
    from chatapp.engine.tools.grammar import call_grammar

    engine.new_chat()
    engine.set_tools(tools)
    names = ["add", "current_time"]
    start = lambda: engine.send("What is 17 plus 25, and what time is it?")  # noqa: E731
    sent: list[str] = []
    records = []
    for step in range(1, steps + 1):
        wanted = [t for t in tools if t.name == names[(step - 1) % len(names)]]
        engine.set_generation(grammar=call_grammar(wanted, engine.tool_syntax))
        record = next(e.record for e in list(start()) if isinstance(e, TurnDone))
        records.append(record)
        engine.set_generation(grammar=None)
        calls = parse_calls(record.reply)[0]
        results = [registry.call(call).text for call in calls]
        appended = sum(len(engine.tokenize(text)) for text in sent)
        print(f"chained step {step}: prompt {record.prompt_tokens}, cached {record.cached_tokens} "
              f"({record.cached_tokens / record.prompt_tokens:.1%}), prefilled {record.prefill_tokens} in "
              f"{record.prefill_ms:.0f} ms"
              + (f" (the result's {appended} tokens and {record.prefill_tokens - appended} of glue)" if sent else "")
              + least(records, step) + f"; called {[(c.name, c.arguments) for c in calls]} -> {results}")
        sent = results
        start = lambda results=results: engine.send_tool_results(results)  # noqa: E731


def least(records: list, step: int) -> str:
    """What no cache could avoid prefilling at this step: the tokens its prompt has past the last
    step's prompt and reply (the result and the template's glue), and the reuse that leaves."""
    if step == 1:
        return ""
    before, now = records[step - 2], records[step - 1]
    new = now.prompt_tokens - (before.prompt_tokens + before.generated_tokens)
    return f"; new since the last step {new}, so at most {1 - new / now.prompt_tokens:.1%} reusable"


def with_template(path: Path, template: Path) -> Path:
    """A copy of the model at `path` with `template` as its chat template, in a temp folder."""
    import subprocess
    import tempfile

    copy = Path(tempfile.mkdtemp(prefix="tools-bench-")) / f"{path.stem}-{template.stem}.gguf"
    subprocess.run([str(Path(sys.executable).parent / "gguf-new-metadata"), "--chat-template-file", str(template),
                    "--force", str(path), str(copy)], check=True, capture_output=True)
    return copy


def server_loop(path: Path, steps: int) -> None:
    """The add loop through llama-server's own tool calling: step 1 with tool_choice "required"
    (the one tool offered, as chatapp's named choice), later steps "auto", each call run on the
    same MCP server and its result sent back as a `tool` message, as the WebUI's agentic loop
    does. The server's timings say what each step reused (cache_n) and prefilled (prompt_n)."""
    import json
    import tempfile
    import urllib.request

    from chatapp.engine.tools.spec import ToolCall
    from llama_server import llama_server

    log = Path(tempfile.mkdtemp(prefix="tools-bench-server-")) / "llama-server.log"

    def post(url: str, body: dict) -> dict:
        request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.loads(response.read())

    with llama_server(path, "-c", "2048", "-np", "1", "--jinja", "-t", "2", log=log) as url:
        server = McpServer("test", command=sys.executable, args=(str(SERVER),))
        with ToolRegistry.open(ToolSettings(roots=(str(SERVER.parent),), servers=(server,))) as registry:
            tools = [t.as_openai() for t in registry.choose(["add"])]
            messages: list[dict] = [{"role": "system", "content": "You are a helpful assistant."},
                                    {"role": "user", "content": "What is 17 plus 25?"}]
            for step in range(1, steps + 1):
                choice = "required" if step == 1 else "auto"
                data = post(url, {"messages": messages, "tools": tools, "tool_choice": choice, "temperature": 0.0,
                                  "max_tokens": 60, "cache_prompt": True})
                t, message = data["timings"], data["choices"][0]["message"]
                prompt = t["cache_n"] + t["prompt_n"]
                calls = message.get("tool_calls") or []
                print(f"llama-server step {step}: prompt {prompt}, cached {t['cache_n']} "
                      f"({t['cache_n'] / prompt:.1%}), "
                      f"prefilled {t['prompt_n']} in {t['prompt_ms']:.0f} ms; calls "
                      f"{[(c['function']['name'], c['function']['arguments']) for c in calls]}")
                if not calls:
                    print(f"  (no call; the reply: {message.get('content')!r:.200}; the server's log: {log})")
                    break
                messages.append({"role": "assistant", "content": message.get("content") or "", "tool_calls": calls})
                for c in calls:
                    result = registry.call(ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"])))
                    messages.append({"role": "tool", "tool_call_id": c.get("id", ""), "content": result.text})


async def approval_latency(path: Path, questions: int) -> list[float]:
    """Milliseconds from each question's call's last token to its approval dialog on screen."""
    import os
    import tempfile
    import time

    from chatapp.engine.events import TextDelta
    from chatapp.engine.opening import open_engine
    from chatapp.ui import app as app_module
    from chatapp.ui.controllers import tools as tools_module
    from chatapp.ui.screens.tool_approval import ToolApprovalScreen

    home = Path(tempfile.mkdtemp(prefix="chatapp-tools-bench-"))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        os.environ[var] = str(home / var)
    config = home / "XDG_CONFIG_HOME" / "chatapp" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[tools]\ndisabled = ["big", "environment", "read_file", "list_folder"]\n\n'
                      f'[mcp_servers.test]\ncommand = "{sys.executable}"\nargs = ["{SERVER}"]\n')
    last_token: list[float] = []
    turn_done: list[float] = []
    shown: list[float] = []
    engine_ms: list[float] = []

    class Timed(ToolTurns):
        def run(self, first):
            def stamped():
                for event in first():
                    if isinstance(event, TextDelta):
                        last_token[:] = [time.perf_counter()]
                    elif isinstance(event, TurnDone):
                        turn_done[:] = [time.perf_counter()]
                    yield event
            return super().run(stamped)

    class Shown(ToolApprovalScreen):
        def on_mount(self) -> None:
            shown.append((time.perf_counter() - last_token[0]) * 1000)
            engine_ms.append((turn_done[0] - last_token[0]) * 1000)
            super().on_mount()

    tools_module.ToolTurns, tools_module.ToolApprovalScreen = Timed, Shown
    settings = Settings(n_ctx=2048, temperature=0.0, max_tokens=60, incognito=True)
    app = app_module.ChatApp(open_engine(settings, str(path)), settings=settings)
    async with app.run_test() as pilot:
        await app.run_action("tool_choice('add')")
        while app.tools_ui.registry is None:
            await pilot.pause(0.05)
        for n in range(questions):
            app.edit_text(f"What is {17 + n} plus {25 + n}?")
            seen = len(shown)  # before Enter: the dialog can be up before the key's await returns
            await pilot.press("enter")
            while app.generating or len(shown) == seen:
                if isinstance(app.screen, ToolApprovalScreen):
                    await pilot.press("o" if len(shown) == seen + 1 else "d")
                await pilot.pause(0.05)
            del shown[seen + 1:], engine_ms[seen + 1:]  # the first dialog of each question only
    app.release_engine()
    print("of which the engine's end of turn (last token to TurnDone): "
          + ", ".join(f"{ms:.1f}" for ms in engine_ms) + " ms")
    return shown


if __name__ == "__main__":
    main()
