"""Switching an open chat to other settings (a preset, chatapp.presets) between turns, and what
that costs before it is paid.

The samplers act after the prompt is decoded, so a switch that changes only them keeps the KV
cache whole: the next turn prefills its question and nothing else. A new system prompt changes
the prompt from its first differing token on; the cache holds the tokens before it, and the
next turn prefills the rest again: `plan` counts them from the prompt the new settings render,
so the caller can say so before the switch. Drafting changes from the next turn; what only a
model load can change (the context size, the KV type, threads...) is named, not applied.

Only the Engine's public surface is used here, as any caller would.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.thoughts import think_mode
from chatapp.engine.events import Message
from chatapp.engine.tokens import common_prefix

if TYPE_CHECKING:
    from chatapp.engine.chat.engine import Engine

LIVE = ("system_prompt", "draft", "draft_max", "think_budget", "think_budget_message")
"""Settings beyond the samplers that a switch applies to the open chat from the next turn (the
thinking budget acts after the prompt, as the samplers do)."""


@dataclass(frozen=True)
class SwitchPlan:
    samplers: dict
    """The sampler settings that change (GenerationSettings' names), by their new values."""
    live: dict
    """The other settings applied from the next turn (system prompt, drafting), by new value."""
    later: tuple[str, ...]
    """Settings that change only when the model loads again (kept, not applied now)."""
    held: int
    """Of the shown branch's tokens, those the cache holds now."""
    kept: int
    """Of those, the ones the prompt still starts with after the switch."""

    @property
    def reprefill(self) -> int:
        """Cached tokens the next turn prefills again because of the switch (0: the cache is kept)."""
        return self.held - self.kept

    @property
    def changed(self) -> tuple[str, ...]:
        return (*self.samplers, *self.live, *self.later)

    def notice(self) -> str:
        """What the switch costs, in one line, before it happens."""
        if not self.changed:
            return "nothing changes"
        parts = [f"changes {', '.join(self.changed)}"]
        parts.append(f"the next turn prefills {self.reprefill:,} cached tokens again (from token {self.kept:,})"
                     if self.reprefill else "the KV cache is kept (nothing is prefilled again)")
        if self.later:
            parts.append(f"{', '.join(self.later)} take effect when the model loads again")
        return "; ".join(parts)


def _samplers(settings: Settings) -> dict:
    generation = GenerationSettings.from_settings(settings)
    return {f.name: getattr(generation, f.name) for f in fields(generation)}


def plan(engine: Engine, settings: Settings) -> SwitchPlan:
    """What switching the open chat to `settings` changes and costs, without changing anything."""
    old, new = _samplers(engine.settings), _samplers(settings)
    samplers = {name: value for name, value in new.items() if old[name] != value}
    thinking = engine.thinking
    current = {"system_prompt": engine.system_prompt, "draft": engine.drafting.mode,
               "draft_max": engine.drafting.draft_max,
               "think_budget": -1 if thinking.budget is None else thinking.budget,
               "think_budget_message": thinking.budget_message}
    live = {name: getattr(settings, name) for name in LIVE if getattr(settings, name) != current[name]}
    sampler_fields = {f.name for f in fields(Settings)} & set(new)
    later = tuple(f.name for f in fields(Settings) if f.name not in sampler_fields and f.name not in LIVE
                  and getattr(settings, f.name) != getattr(engine.settings, f.name))
    figures = engine.branch_figures()
    kept = figures.cached
    if "system_prompt" in live and figures.cached:
        messages = [m for m in engine.context_messages() if m.role != "system"]
        if settings.system_prompt:
            messages.insert(0, Message("system", settings.system_prompt))
        history = engine.prompt_ids(messages, add_generation_prompt=False) if messages else []
        kept = min(kept, common_prefix(engine.cached_tokens(), history))
    return SwitchPlan(samplers, live, later, figures.cached, kept)


def switch(engine: Engine, settings: Settings) -> SwitchPlan:
    """Switch the open chat to `settings` from its next turn; returns the plan it carried out."""
    done = plan(engine, settings)
    if done.samplers:
        engine.set_generation(**done.samplers)
    if "system_prompt" in done.live:
        engine.set_system_prompt(settings.system_prompt)
    if "draft" in done.live or "draft_max" in done.live:
        engine.set_drafting(settings.draft, settings.draft_max)
    if "think_budget" in done.live:
        engine.thinking.set_mode(think_mode(None if settings.think_budget < 0 else settings.think_budget))
    if "think_budget_message" in done.live:
        engine.thinking.budget_message = settings.think_budget_message
    applied = {name: getattr(settings, name) for name in {f.name for f in fields(Settings)}
               if name not in done.later}
    engine.settings = replace(engine.settings, **applied)
    return done
