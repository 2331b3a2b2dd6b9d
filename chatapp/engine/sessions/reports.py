"""What opening and saving a session tell the user: plain data plus one-line notices."""

from __future__ import annotations

from dataclasses import dataclass, field

from chatapp.engine.stats import TurnRecord


@dataclass(frozen=True)
class ResumeReport:
    session: str
    created: bool
    """True for a session that didn't exist yet (it is written on the first save)."""
    messages: int
    restored_tokens: int = 0
    restore_ms: float = 0.0
    fallback: str | None = None
    """Why the saved KV state wasn't used; None when it was, or when there was nothing to use."""
    reprefill_tokens: int = 0
    """In the fallback case, the tokens of the transcript the next turn prefills before its
    question: its prompt starts with them, and nothing of it is cached."""
    turns_back: int = 0
    """In the fallback case, the earlier turns the context holds again, its window placed anew
    for this n_ctx (they were dropped under a smaller context or a larger reply reserve);
    negative: the turns that no longer fit, and left it."""
    system_changed: bool = False
    """The system prompt was replaced on opening (the command line's): from this turn on it is
    the new one."""
    estimate_s: float | None = None
    """How long re-prefilling the restored tokens would take here, from measured prefill speed."""
    notices: tuple[str, ...] = ()
    """Lines besides `notice`: attachments restored, or dropped because their text changed."""

    @property
    def restored(self) -> bool:
        return self.restored_tokens > 0

    @property
    def notice(self) -> str | None:
        """The one line to show, e.g. "restored 1,874 tokens in 9 ms; re-prefill would take ~6.2 s"."""
        return self.notice_for(branches=False)

    def notice_for(self, *, branches: bool) -> str | None:
        """The notice, when the first turn goes on from the saved leaf or (`branches`) from an
        earlier message: then it reuses only the restored tokens before that point (its own line
        says how many), so what prefilling all of them again would take is not claimed as saved."""
        if self.restored:
            line = f"restored {self.restored_tokens:,} tokens in {self.restore_ms:,.0f} ms"
            if branches:
                line += "; the first prompt branches off earlier, so it reuses only those before its branch point"
            elif self.estimate_s is not None:
                line += f"; re-prefill would take ~{format_seconds(self.estimate_s)}"
            return line
        if self.fallback:
            return f"saved KV state not used ({self.fallback}); {self._window_change()}re-prefilling " \
                   f"{self.reprefill_tokens:,} tokens from the transcript with the next turn"
        if self.system_changed:
            return "system prompt replaced from this turn on"
        return None

    def _window_change(self) -> str:
        turns = abs(self.turns_back)
        plural = "s" if turns != 1 else ""
        if self.turns_back > 0:
            return f"{turns} earlier turn{plural} came back into the context; "
        if self.turns_back < 0:
            return f"the oldest {turns} turn{plural} no longer fit{'' if plural else 's'} and left the context; "
        return ""


@dataclass(frozen=True)
class SaveReport:
    record: TurnRecord | None
    """The turn's record as saved (with session, restore figures), when a turn was saved."""
    state_bytes: int = 0
    state_tokens: int = 0
    save_ms: float = 0.0
    notices: list[str] = field(default_factory=list)
    """Problems that didn't lose the transcript, e.g. a KV state that could not be written."""


def format_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:,.0f} ms"
    if seconds < 120:
        return f"{seconds:,.1f} s"
    return f"{seconds / 60:,.1f} min"


def reprefill_estimate(tokens: int, prefill_tps: float | None) -> float | None:
    return tokens / prefill_tps if prefill_tps and tokens else None
