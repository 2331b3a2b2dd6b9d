"""The conversation: user messages as plain text, replies as streaming Markdown, notices.

It draws the active path of the conversation tree only (each message titled with its short id,
and ‹ n/m › when it has siblings), never the whole tree: a switch of branch keeps the widgets
of the messages both paths share and mounts the rest (`show_path`). One message can be
selected (Alt+Up/Alt+Down or a click), for the branch actions (chatapp.ui.controllers.branches);
the selected one lists them under it, and a click on one posts `ActionClicked`.

In the confidence view (bound to the App's `confidence`), a click on a token of a shaded reply,
or `pick` from the keys, shows that token's alternatives next to it (chatapp.ui.widgets.token_popup).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rich.cells import cell_len
from textual import events
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from chatapp.engine.events import ContextTrimmed
from chatapp.engine.retrieval.context import RetrievedContext
from chatapp.engine.sampling import TokenProbs
from chatapp.engine.stats import TurnRecord
from chatapp.format import visible_text
from chatapp.ui.shown import Selection, Shown
from chatapp.ui.widgets.confidence import AlternativeChosen, first_unlikely
from chatapp.ui.widgets.reply import Reply
from chatapp.ui.widgets.thought import Thought
from chatapp.ui.widgets.token_popup import TokenPopup
from chatapp.ui.widgets.tool_messages import ToolResult, call_markdown

FINISH_NOTES = {
    "stopped": "■ stopped: partial reply kept",
    "length": "… max tokens reached",
    "context": "… context full: the reply was cut",
}


SHOWN_CHARS = 20_000
"""The most of one message the transcript shows: a saved message can be megabytes (edited into
the database), and laying it out would cost the app far more than the model ever sees of it."""


def shown(content: str) -> str:
    if len(content) <= SHOWN_CHARS:
        return content
    return (f"{content[:SHOWN_CHARS]}\n\n… {len(content) - SHOWN_CHARS:,} more characters not shown "
            "(`chatapp sessions export` has all of it)")


def title(role: str, message_id: str, position: int = 1, siblings: int = 1) -> str:
    """A message's title: "you · 3fa2b1c0 · ‹ 2/3 ›" (no id while it is being written)."""
    parts = [{"user": "you", "tool": "tool"}.get(role, "assistant")]
    if message_id:
        parts.append(message_id)
    if siblings > 1:
        parts.append(f"‹ {position}/{siblings} ›")
    return " · ".join(parts)


def role_of(widget: Widget) -> Literal["user", "assistant", "tool"]:
    return "user" if isinstance(widget, UserMessage) else "tool" if isinstance(widget, ToolResult) else "assistant"


def name_message(widget: Widget, message_id: str, position: int = 1, siblings: int = 1) -> None:
    """Give a message widget its id in the tree and its place among its siblings."""
    widget.message_id, widget.position, widget.siblings = message_id, position, siblings
    widget.border_title = title(role_of(widget), message_id, position, siblings)


def arrow_at(widget: Widget, x: int) -> int:
    """-1 or +1 when column `x` of the message's title row is on its ‹ or ›, else 0. Read from
    the row as drawn, so wherever the theme's CSS puts the title, the arrow is where it shows."""
    if getattr(widget, "siblings", 1) < 2:
        return 0
    row = widget.render_lines(Region(0, 0, widget.outer_size.width, 1))[0].text
    for arrow, step in (("‹", -1), ("›", +1)):
        at = row.rfind(arrow)
        if at >= 0 and abs(x - at) <= 1:
            return step
    return 0


ACTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "user": (("✎ edit Alt+E", "branch('edit')"),),
    "tool": (("✎ edit result Alt+E", "branch('edit')"),),
    "assistant": (("↻ regenerate ^R", "regenerate"), ("⑂ branch here Alt+C", "branch('continue_here')"),
                  ("▒ tokens Alt+P", "token_probs")),
}
"""What the selected message offers under it, by role: (label, the App's action), as llama.cpp's
WebUI puts its message actions; each label names its key too."""


def action_at(widget: Widget, x: int) -> str | None:
    """The App action whose label is at column `x` of the message's last row, as drawn."""
    row = widget.render_lines(Region(0, widget.outer_size.height - 1, widget.outer_size.width, 1))[0].text
    for label, action in ACTIONS.get(role_of(widget), ()):
        at = row.find(label)
        if at >= 0 and cell_len(row[:at]) <= x < cell_len(row[:at]) + cell_len(label):
            return action
    return None


def quote(text: str, width: int = 32) -> str:
    line = " ".join(text.split())
    return repr(line if len(line) <= width else line[: width - 1] + "…")


def trim_notice(event: ContextTrimmed, quoted: int = 2) -> str:
    """E.g. "context full: dropped 2 oldest turns (4 messages: 'first user text…', …)"."""
    n = len(event.dropped)
    turns = f"{event.dropped_turns} oldest turn{'s' if event.dropped_turns != 1 else ''}"
    users = [quote(m.content) for m in event.dropped if m.role == "user"]
    shown = ", ".join(users[:quoted] + (["…"] if len(users) > quoted else []))
    return (f"context full: dropped {turns} ({n} message{'s' if n != 1 else ''}: {shown}); "
            f"prompt {event.prompt_tokens_before:,} → {event.prompt_tokens_after:,} tokens")


def sources(context: RetrievedContext) -> str:
    """Which attachment text a question was given: file, section and line range of each part."""
    tokens = sum(entry.tokens for entry in context.entries)
    lines = [f"from the attachments ({tokens:,} token{'' if tokens == 1 else 's'} placed before this question):"]
    for entry in context.entries:
        score = "" if entry.whole else f"  score {entry.score:.2f}"
        lines.append(f"  · {entry.label().strip('[]')}{score}")
    return "\n".join(lines)


class UserMessage(Static):
    message_id = ""
    position = siblings = 1

    def __init__(self, text: str) -> None:
        super().__init__(visible_text(text), markup=False, classes="message")
        self.border_title = "you"


def message_widget(entry: Shown) -> list[Widget]:
    """The widgets for one message of the path: the message, and the notes under it."""
    message = entry.message
    if message.role == "user":
        widget = UserMessage(shown(message.content))
    elif message.role == "tool":
        widget = ToolResult(shown(message.content))
    else:
        widget = Reply(call_markdown(message.content) or shown(message.content) or "*(empty reply)*")
        widget.probs = entry.probs
        widget.set_class(message.stopped, "-stopped")
    name_message(widget, message.id, entry.position, entry.siblings)
    widgets: list[Widget] = [widget]
    if message.role == "assistant" and message.thinking:  # a thinking model's thought, folded above
        widgets.insert(0, Thought(shown(message.thinking)))
    if message.role == "user" and message.context is not None:
        widgets.append(Notice(sources(message.context), "sources"))
    if message.role == "user" and message.images:  # a vision model's question: its images went before it
        widgets.append(Notice(images_note(len(message.images)), "sources"))
    if message.role == "assistant" and message.stopped:
        widgets.append(Notice(FINISH_NOTES["stopped"], "stopped"))
    return widgets


def images_note(n: int) -> str:
    return f"asked about {n} image{'s' if n != 1 else ''} (the Tokens panel shows their cells)"


class Notice(Static):
    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(visible_text(text), markup=False, classes=f"notice -{kind}")


GREETING = ("Type a question below and press Enter. F1 lists every key and what each panel shows; "
            "Ctrl+P finds any action.")
"""What an empty transcript says, so that a first-time user is not met by a blank screen."""


class Transcript(VerticalScroll):
    """Holds one widget per non-system chat message, in order, plus notices between them; when
    it holds nothing, one line of greeting."""

    DEFAULT_CSS = """
    Transcript { height: 1fr; layers: base popup; }
    """

    confidence: reactive[bool] = reactive(False, init=False)
    """The confidence view is on: replies show their tokens shaded by probability (the App's)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, can_focus=True)
        self.reply: Reply | None = None
        """The reply streaming now, if any."""
        self.thought: Thought | None = None
        """The streaming reply's thought, while it streams."""
        self.selected: Widget | None = None
        """The message selected for a branch action, if any."""
        self.popup: TokenPopup | None = None
        """A reply token's alternatives, shown next to it, if any."""

    # --- the path ------------------------------------------------------------------------
    def messages(self) -> list[Widget]:
        """The message widgets, first question first: one per message of the path drawn."""
        return [child for child in self.children if isinstance(child, (UserMessage, Reply, ToolResult))]

    async def show_path(self, path: Sequence[Shown], dropped: int = 0) -> None:
        """Draw this path: the widgets of the messages already drawn for it stay (their ‹ n/m ›
        updated), the rest go and the path's other messages are mounted. The first `dropped`
        messages are outside the context window (greyed out). Only the path is ever mounted."""
        await self.close_popup()
        if path:
            await self._ungreet()
        children = list(self.children)
        drawn = self.messages()
        keep = 0
        for widget, entry in zip(drawn, path):
            if not widget.message_id or widget.message_id != entry.message.id or widget is self.reply:
                break
            keep += 1
        if keep < len(drawn):
            cut = children.index(drawn[keep])
            cut -= cut > 0 and isinstance(children[cut - 1], Thought)  # a reply's thought goes with it
            await self.remove_children(children[cut:])
        for widget, entry in zip(drawn[:keep], path):
            name_message(widget, entry.message.id, entry.position, entry.siblings)
        new: list[Widget] = []
        for entry in path[keep:]:
            new.extend(message_widget(entry))
        for widget in new:
            if isinstance(widget, Reply):
                widget.confidence = self.confidence
        if new:
            await self.mount_all(new)
        for index, widget in enumerate(self.messages()):
            widget.set_class(index < dropped, "-dropped")
        if self.selected is not None and self.selected not in self.children:
            self.selected = None
        self.reply = self.thought = None
        self.anchor()

    def name_last(self, role: str, message_id: str, position: int = 1, siblings: int = 1) -> None:
        """The last message of this role gets its id (a turn's question and reply, once done)."""
        kind = UserMessage if role == "user" else Reply
        found = [widget for widget in self.messages() if isinstance(widget, kind)]
        if found:
            name_message(found[-1], message_id, position, siblings)

    def name_turn(self, record: TurnRecord) -> None:
        """A finished turn's question and reply get their ids, and the one that branched its ‹ n/m ›."""
        extra = record.extra
        reply_id, question_id = extra.get("message_id"), extra.get("parent_id")
        if not reply_id:
            return
        position, siblings = 1, 1
        if branch := extra.get("branch"):
            position, siblings = (int(n) for n in str(branch).split("/"))
        if extra.get("action") == "regenerate":
            self.name_last("assistant", reply_id, position, siblings)
        else:
            self.name_last("assistant", reply_id)
            self.name_last("user", question_id or "", position, siblings)

    # --- selecting a message -----------------------------------------------------------------
    def select(self, widget: Widget | None, *, scroll: bool = True) -> None:
        """Select a message (None: none): it is marked, and lists its actions under it."""
        if self.selected is not None:
            self.selected.remove_class("-selected")
            self.selected.border_subtitle = ""
        self.selected = widget
        if widget is not None:
            widget.add_class("-selected")
            widget.border_subtitle = "  ".join(label for label, _ in ACTIONS.get(role_of(widget), ()))
            if scroll:
                self.scroll_to_widget(widget, animate=False)

    def select_step(self, step: int) -> Widget | None:
        """Select the message `step` places before (-1) or after (+1) the selected one; with none
        selected, the last message. Stays at the first and last."""
        drawn = [w for w in self.messages() if w.message_id]
        if not drawn:
            return None
        if self.selected not in drawn:
            self.select(drawn[-1])
        else:
            index = min(max(drawn.index(self.selected) + step, 0), len(drawn) - 1)
            self.select(drawn[index])
        return self.selected

    def selected_index(self) -> int | None:
        """The selected message's place in the path (0: the first question), or None."""
        drawn = self.messages()
        return drawn.index(self.selected) if self.selected in drawn else None

    def selection(self) -> Selection | None:
        """The selected message as plain data (chatapp.ui.shown.Selection), or None."""
        index, widget = self.selected_index(), self.selected
        if index is None or widget is None or not widget.message_id:
            return None
        return Selection(index, widget.message_id, role_of(widget))

    async def on_click(self, event: events.Click) -> None:
        widget = event.widget
        while widget is not None and widget is not self and not isinstance(widget, (UserMessage, Reply, ToolResult)):
            widget = widget.parent
        token = event.style.meta.get("step")
        if isinstance(widget, (UserMessage, Reply)) and widget.message_id:
            x, row = event.screen_x - widget.region.x, event.screen_y - widget.region.y
            step = arrow_at(widget, x) if row == 0 else 0
            action = action_at(widget, x) if widget is self.selected and row == widget.region.height - 1 else None
            if step:  # ‹ or › in its title: the sibling before or after, as in llama.cpp's WebUI
                self.post_message(self.SiblingClicked(self.messages().index(widget), step))
            elif action is not None:  # one of the selected message's actions, under it
                self.post_message(self.ActionClicked(action))
            elif isinstance(widget, Reply) and isinstance(token, int) and widget.shaded:
                self.pick(widget.message_id, token)  # its alternatives, next to it; the keys go to them
                return
            else:
                self.select(None if widget is self.selected else widget)
        await self.close_popup()
        self.post_message(self.Clicked())  # typing goes on in the composer, as it does in a chat

    class Clicked(Message):
        """Done with the transcript for now (a click on a message, the token popup closed): typing
        goes on in the composer."""

    class ActionClicked(Message):
        """One of the selected message's actions clicked: `action` is the App's, as a key runs it."""

        def __init__(self, action: str) -> None:
            super().__init__()
            self.action = action

    class SiblingClicked(Message):
        """‹ (step -1) or › (step +1) clicked in the title of the message at `index` of the path."""

        def __init__(self, index: int, step: int) -> None:
            super().__init__()
            self.index, self.step = index, step

    # --- a reply token's alternatives (the confidence view) -----------------------------------
    def watch_confidence(self, on: bool) -> None:
        """Replies that have probabilities show their tokens shaded (or not)."""
        for reply in self.query(Reply):
            reply.show_confidence(on)
        if not on:
            self.call_later(self.close_popup)

    def show_probs(self, message_id: str, probs: tuple[TokenProbs, ...]) -> None:
        """Reply `message_id` has probabilities now (it was scored after it was written)."""
        for reply in self.query(Reply):
            if reply.message_id == message_id:
                reply.show_probs(probs)

    def pick(self, message_id: str, step: int | None = None) -> bool:
        """Show the alternatives of token `step` of reply `message_id` next to it (by default its
        first token below 50%), and give them the keys; False when that reply is not drawn shaded."""
        reply = next((r for r in self.query(Reply) if r.message_id == message_id), None)
        if reply is None or not reply.shaded:
            return False
        step = first_unlikely(reply.probs) if step is None else min(max(step, 0), len(reply.probs) - 1)
        if reply is not self.selected:
            self.select(reply, scroll=False)
        if self.popup is None:
            self.popup = TokenPopup()
            self.mount(self.popup)
        self.popup.point(message_id, reply.probs, step)
        self.popup.focus()
        self.call_after_refresh(self._place_popup, reply, step)
        return True

    def _place_popup(self, reply: Reply, step: int) -> None:
        """Under the token when there is room in view, else over it; scrolled into view."""
        popup, at = self.popup, reply.step_position(step)
        if popup is None or at is None:
            return
        origin = self.content_region.offset - self.scroll_offset  # where the scrolled content starts
        x, y = reply.content_region.offset + at - origin
        width, height = popup.outer_size
        view = self.scrollable_content_region
        top = y + 1
        if top + height > self.scroll_y + view.height and y - height >= self.scroll_y:
            top = y - height
        popup.styles.offset = (max(0, min(x - 1, view.width - width)), top)
        self.scroll_to_region(Region(0, min(top, y), view.width, height + 1), animate=False)

    def on_token_popup_moved(self, message: TokenPopup.Moved) -> None:
        message.stop()
        if self.popup is not None:
            self.pick(self.popup.message_id, message.step)

    async def on_token_popup_closed(self, message: TokenPopup.Closed) -> None:
        message.stop()
        if self.popup is not None:
            await self.close_popup()
            self.post_message(self.Clicked())

    async def on_alternative_chosen(self, message: AlternativeChosen) -> None:
        await self.close_popup()  # the message goes on to the App, which branches there

    async def close_popup(self) -> None:
        popup, self.popup = self.popup, None
        if popup is not None:
            await popup.remove()

    # --- turns ---------------------------------------------------------------------------
    async def add_user(self, text: str, images: int = 0) -> UserMessage:
        await self._ungreet()
        widget = UserMessage(text)
        await self.mount(widget)
        if images:
            await self.mount(Notice(images_note(images), "sources"))
        self.anchor()
        return widget

    async def start_reply(self) -> Reply:
        self.reply = Reply()
        self.reply.streaming = True
        self.reply.confidence = self.confidence
        self.reply.add_class("-streaming")
        await self.mount(self.reply)
        self.anchor()
        return self.reply

    async def show_progress(self, text: str) -> None:
        if self.reply is not None:
            if self.thought is not None and self.thought.streaming and text:
                self.thought.finish()  # the answer started: the thought folds
            self.reply.show(text)

    async def show_thought(self, text: str, tokens: int, ms: float = 0.0) -> None:
        """The streaming reply's thought so far, open above it, counted (and timed: `ms`) in its title."""
        if self.reply is None:
            return
        if self.thought is None:
            self.thought = Thought(streaming=True)
            await self.mount(self.thought, before=self.reply)
        self.thought.show(shown(text), tokens, ms)
        self.anchor()

    async def finish_reply(self, record: TurnRecord) -> None:
        reply = self.reply or await self.start_reply()
        self.reply, thought = None, self.thought
        if record.thinking and thought is None:
            thought = Thought(shown(record.thinking), record.thinking_tokens)
            await self.mount(thought, before=reply)
        if thought is not None:
            thought.finish(shown(record.thinking) if record.thinking else None, record.thinking_tokens,
                           str(record.extra.get("thinking_closed_by", "")))
        self.thought = None
        reply.probs = record.probs
        reply.show(call_markdown(record.reply) or record.reply or "*(empty reply)*", streaming=False)
        reply.remove_class("-streaming")
        note = FINISH_NOTES.get(record.finish_reason)
        reply.set_class(record.finish_reason == "stopped", "-stopped")
        if note:
            await self.mount(Notice(note, "stopped" if record.finish_reason == "stopped" else "info"))

    async def tool_step(self, result: str | None, note: str = "") -> None:
        """A tool loop's result, drawn while the turn runs on (its id comes with the path at the
        end); None: the loop's next step starts, and its reply with it."""
        if result is None:
            await self.start_reply()
            return
        await self.mount(ToolResult(shown(result), note))
        self.anchor()

    async def fail_reply(self, error: str, refused: bool) -> None:
        """A turn failed: drop the empty reply, and the user message too if the engine took it back."""
        if self.reply is not None:
            if not self.reply.source:
                await self.reply.remove()
            self.reply = None
        if self.thought is not None:
            self.thought.finish()
            self.thought = None
        if refused:
            users = self.query(UserMessage)
            if users:
                await users.last().remove()
        await self.add_notice(error, "error")

    # --- notices ---------------------------------------------------------------------------
    async def show_sources(self, context: RetrievedContext) -> None:
        """Under the last user message: the attachment text its turn placed before it."""
        await self._ungreet()
        users = self.query(UserMessage)
        await self.mount(Notice(sources(context), "sources"), after=users.last() if users else None)
        self.anchor()

    async def add_notice(self, text: str, kind: str = "info") -> Notice:
        await self._ungreet()
        notice = Notice(text, kind)
        await self.mount(notice)
        self.anchor()
        return notice

    async def show_trimmed(self, event: ContextTrimmed) -> None:
        """Grey out the messages that left the context window, then say which."""
        remaining = len(event.dropped)
        for widget in self.query(".message"):
            if remaining == 0:
                break
            if not widget.has_class("-dropped"):
                widget.add_class("-dropped")
                remaining -= 1
        # Say it before the message that caused it (its reply is already waiting below it).
        users = self.query(UserMessage)
        notice = Notice(trim_notice(event), "trimmed")
        await self.mount(notice, before=users.last() if users else None)
        self.anchor()

    async def clear(self, *, greet: bool = True) -> None:
        """Nothing drawn; the greeting, unless a path is drawn next (mounting it only to remove it
        again cost a conversation's redraw about a third more UI time)."""
        self.reply = self.selected = self.popup = self.thought = None
        await self.remove_children()
        if greet:
            await self.mount(Notice(GREETING, "greeting"))

    async def on_mount(self) -> None:
        if not self.children:
            await self.mount(Notice(GREETING, "greeting"))

    async def _ungreet(self) -> None:
        """The greeting goes before anything else is shown."""
        await self.query(".-greeting").remove()

    # --- reading back (the last reply, tests) --------------------------------------------
    def replies(self) -> list[Reply]:
        return list(self.query(Reply))
