"""The conversation: user messages as plain text, replies as streaming Markdown, notices."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.widgets import Static

from chatapp.engine.events import ContextTrimmed
from chatapp.engine.retrieval.context import RetrievedContext
from chatapp.engine.stats import TurnRecord
from chatapp.ui.widgets.reply import Reply

FINISH_NOTES = {
    "stopped": "■ stopped: partial reply kept",
    "length": "… max tokens reached",
    "context": "… context full: the reply was cut",
}


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
    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False, classes="message")
        self.border_title = "you"


class Notice(Static):
    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(text, markup=False, classes=f"notice -{kind}")


class Transcript(VerticalScroll):
    """Holds one widget per non-system chat message, in order, plus notices between them."""

    DEFAULT_CSS = """
    Transcript { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, can_focus=True)
        self.reply: Reply | None = None
        """The reply streaming now, if any."""

    # --- turns ---------------------------------------------------------------------------
    async def add_user(self, text: str) -> UserMessage:
        widget = UserMessage(text)
        await self.mount(widget)
        self.anchor()
        return widget

    async def start_reply(self) -> Reply:
        self.reply = Reply()
        self.reply.streaming = True
        self.reply.add_class("-streaming")
        await self.mount(self.reply)
        self.anchor()
        return self.reply

    async def show_progress(self, text: str) -> None:
        if self.reply is not None:
            self.reply.show(text)

    async def finish_reply(self, record: TurnRecord) -> None:
        reply = self.reply or await self.start_reply()
        self.reply = None
        reply.show(record.reply or "*(empty reply)*", streaming=False)
        reply.remove_class("-streaming")
        note = FINISH_NOTES.get(record.finish_reason)
        reply.set_class(record.finish_reason == "stopped", "-stopped")
        if note:
            await self.mount(Notice(note, "stopped" if record.finish_reason == "stopped" else "info"))

    async def fail_reply(self, error: str, refused: bool) -> None:
        """A turn failed: drop the empty reply, and the user message too if the engine took it back."""
        if self.reply is not None:
            if not self.reply.source:
                await self.reply.remove()
            self.reply = None
        if refused:
            users = self.query(UserMessage)
            if users:
                await users.last().remove()
        await self.add_notice(error, "error")

    async def drop_last_reply(self) -> None:
        """Regenerate: the last reply (and its notes) go; the last user message stays."""
        children = list(self.children)
        while children and not isinstance(children[-1], UserMessage):
            await children.pop().remove()

    # --- notices ---------------------------------------------------------------------------
    async def show_sources(self, context: RetrievedContext) -> None:
        """Under the last user message: the attachment text its turn placed before it."""
        users = self.query(UserMessage)
        await self.mount(Notice(sources(context), "sources"), after=users.last() if users else None)
        self.anchor()

    async def add_notice(self, text: str, kind: str = "info") -> Notice:
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

    async def clear(self) -> None:
        self.reply = None
        await self.remove_children()

    # --- reading back (the last reply, tests) --------------------------------------------
    def replies(self) -> list[Reply]:
        return list(self.query(Reply))
