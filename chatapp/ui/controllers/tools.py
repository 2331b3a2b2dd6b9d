"""Tools in the TUI: the tool choice, the tools opened when first wanted, each call approved on screen.

The choice is the OpenAI API's, as `ask --tool-choice` takes it: "none" (the default: no tool
is offered, no schema costs a token), "auto", "required", or a tool's name (the first reply must
call it). The palette sets it (the "Tools: …" commands, `tool_choice` actions), and the config's
`[tools] choice` sets it at start. The first choice other than "none" opens the registry on a
worker (chatapp's built-ins and every enabled MCP server in the config, whose children end when
the app quits); every enabled tool is offered from the next turn on.

A turn with tools is a tool loop (chatapp.engine.chat.tool_turns) on the turn's worker. Before a
call runs, its worker asks here: the approval dialog shows the tool, its server and the full
arguments, and the worker waits for the answer (approve once, always for this tool of this server
while the app runs and its schema stays the same, or deny: the denial is the result the model
reads). Quitting, or the turn cancelled, answers deny.
"""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from collections.abc import Callable
from typing import TYPE_CHECKING

from chatapp.engine.chat.tool_turns import CHOICES, Approval, ToolTurns
from chatapp.engine.tools.spec import ToolCall, ToolSpec
from chatapp.errors import ChatappError
from chatapp.format import one_line_text
from chatapp.ui.screens.tool_approval import DENY, ToolApprovalScreen

if TYPE_CHECKING:
    from chatapp.engine.chat.engine import Engine
    from chatapp.engine.tools.registry import ToolRegistry
    from chatapp.ui.host import ChatHost

POLL_S = 0.25
"""How often a worker waiting for an answer looks whether the app quit or the turn was cancelled."""


def open_registry() -> ToolRegistry:
    """The built-ins and every enabled MCP server's tools, as the config file sets them up."""
    from chatapp import paths
    from chatapp.engine.tools.registry import ToolRegistry
    from chatapp.engine.tools.servers import load_tool_settings

    return ToolRegistry.open(load_tool_settings(), log_dir=paths.cache_dir() / "mcp-logs")


class ToolController:
    def __init__(self, app: ChatHost, keep: Callable[[str], None] = lambda choice: None) -> None:
        self.app = app
        self.keep = keep
        """Called with a choice the user made once it holds (an unknown tool's name falls back
        first): the open session keeps it (chatapp.ui.controllers.sessions)."""
        self._keeping = False
        self.choice = "none"
        """The tool choice from the next turn on (read by the turn's worker)."""
        self.registry: ToolRegistry | None = None
        """The tools, once opened; None until tools are first wanted."""
        self.always: dict[str, ToolSpec] = {}
        """The tools approved "always", by approval_key: each runs without asking while the app
        runs, as long as its server (command or URL) and its schema stay as they were. The palette
        lists them ("Tools: always allowed") and takes each back ("Tools: ask again before …")."""
        self._opening = False
        self._closed = False

    # --- the choice (UI thread) ----------------------------------------------------------------
    def at_start(self) -> None:
        """The config's `[tools] choice`, when it is not "none": the tools open at start."""
        from chatapp.engine.tools.servers import load_tool_settings

        try:
            choice = load_tool_settings().choice
        except ChatappError as exc:  # the palette's first choice says it again, when one is made
            self.app.notify(exc.one_line(), title="Tools", severity="error", timeout=10, markup=False)
            return
        if choice != "none":
            self.choose(choice)

    def names(self) -> list[str]:
        """The enabled tools' names, once opened (the palette offers each as a choice)."""
        return [spec.name for spec in self.registry.enabled()] if self.registry is not None else []

    def choose(self, choice: str, *, by_user: bool = False) -> None:
        """Set the tool choice; the first one other than "none" opens the tools on a worker.
        `by_user`: the user's own choice (the palette's), which the open session keeps."""
        self.choice, self._keeping = choice, by_user
        if choice == "none":
            self.app.notify("Tools off: no tool is offered from the next reply", title="Tools", timeout=4)
            self._held()
        elif self.registry is not None:
            self._announce()
        elif not self._opening:
            self._opening = True
            self.app.notify("Starting the tools (MCP servers in the config)…", title="Tools", timeout=4)
            self.app.run_worker(self._open, name="tools", group="tools", thread=True, exit_on_error=False)

    def _open(self) -> None:
        try:
            registry = open_registry()
        except ChatappError as exc:
            self._call(self._failed, exc.one_line())
            return
        self._call(self._opened, registry)

    def _call(self, callback: Callable, *args) -> None:
        try:
            self.app.call_from_thread(callback, *args)
        except RuntimeError:  # the app is gone: nothing to show, nothing to keep
            if args and hasattr(args[0], "close"):
                args[0].close()

    def _failed(self, line: str) -> None:
        self._opening, self.choice, self._keeping = False, "none", False
        self.app.notify(line, title="Tools", severity="error", timeout=10, markup=False)

    def _opened(self, registry: ToolRegistry) -> None:
        self._opening = False
        if self._closed:
            registry.close()
            return
        self.registry = registry
        for notice in registry.notices:
            self.app.notify(notice, title="Tools", severity="warning", timeout=10, markup=False)
        self._announce()

    def _announce(self) -> None:
        names = self.names()
        if self.choice not in CHOICES and self.choice not in names:
            self.app.notify(f"no enabled tool is named {self.choice!r} (the tools: {', '.join(names) or 'none'})",
                            title="Tools", severity="error", timeout=8, markup=False)
            self.choice = "auto"
        said = {"auto": "the model may call any of them", "required": "each first reply must call one"}
        how = said.get(self.choice, f"each first reply must call {self.choice}")
        tools = "1 tool" if len(names) == 1 else f"{len(names)} tools"
        self.app.notify(f"{tools} offered from the next reply ({', '.join(names)}): {how}",
                        title="Tools", timeout=6, markup=False)
        self._held()

    def _held(self) -> None:
        """The choice holds: the user's is kept with the open session."""
        if self._keeping:
            self._keeping = False
            self.keep(self.choice)

    def allowed(self) -> list[tuple[str, str]]:
        """(approval key, "NAME from SERVER (command or URL)") for each tool approved "always"."""
        kept = list(self.always.items())  # a copy: a worker may add one meanwhile
        return [(key, f"{one_line_text(spec.name)} from {one_line_text(spec.server)}"
                 + (f" ({one_line_text(spec.origin)})" if spec.origin else "")) for key, spec in kept]

    def allowed_action(self, revoke: str = "") -> None:
        """The palette's: list the tools approved always, or take back the one keyed `revoke`."""
        if revoke:
            self.revoke(revoke)
            return
        allowed = [line for _, line in self.allowed()]
        self.app.notify("\n".join(allowed) if allowed else "No tool is approved always: every call asks first",
                        title=f"Tools approved always: {len(allowed)}", timeout=10, markup=False)

    def revoke(self, key: str) -> None:
        """Take an "always" back: that tool's next call asks again (the turn running now included)."""
        spec = self.always.pop(key, None)
        if spec is not None:
            self.app.notify(f"{one_line_text(spec.name)} from {one_line_text(spec.server)} asks before each call again",
                            title="Tools", timeout=5, markup=False)

    def close(self) -> None:
        """End the MCP servers' children (on quit); a registry opening now is closed when it lands."""
        self._closed = True
        registry, self.registry = self.registry, None
        if registry is not None:
            registry.close()

    # --- a turn (its worker) -------------------------------------------------------------------
    def turns_for(self, engine: Engine, cancelled: Callable[[], bool]) -> ToolTurns | None:
        """The turn's tool loop, or None with tools off (no schema left in the prompt then)."""
        registry, choice = self.registry, self.choice
        if choice == "none" or registry is None:
            if engine.tools:
                engine.set_tools(())
            return None
        return ToolTurns(engine, registry, registry.enabled(), lambda call, spec: self.approve(call, spec, cancelled),
                         choice=choice, always=self.always)

    def approve(self, call: ToolCall, spec: ToolSpec, cancelled: Callable[[], bool]) -> Approval:
        """Ask on screen, and wait for the answer (deny if the app quits or the turn is cancelled)."""
        answer: Future[str] = Future()
        self._call(self._ask, call, spec, answer)
        while True:
            try:
                return answer.result(timeout=POLL_S)  # type: ignore[return-value]
            except FutureTimeout:
                if self.app.gate.released or cancelled() or self._closed:
                    return DENY

    def _ask(self, call: ToolCall, spec: ToolSpec, answer: Future[str]) -> None:
        def answered(choice: str | None) -> None:
            if not answer.done():
                answer.set_result(choice or DENY)

        self.app.push_screen(ToolApprovalScreen(call, spec), answered)
