"""What the user chose for one session, kept with it: the thinking mode, how earlier thoughts are
kept, the tool choice, the preset and the reply shape.

A session opened again (the TUI's F6, `ask --session`) comes back as it was left: a chat with
thinking off stays off, a chat that offered tools offers them again, whatever the config's
defaults. Each is kept as the text its own parser takes (`Thinking.set_mode`, `--tool-choice`),
so that parser, not this module, says what is valid; "" means not chosen (the defaults hold)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

MAX_CHOICE = 200
"""The longest choice kept (a tool's name is the longest there is)..."""
MAX_SHAPE = 64 * 1024
"""...but a reply shape: a schema or grammar longer than this (as text) is not kept."""


@dataclass(frozen=True)
class SessionChoices:
    think: str = ""
    """"on", "off" or a budget in tokens (chatapp.engine.chat.thoughts.Thinking.set_mode)."""
    tools: str = ""
    """"none", "auto", "required" or a tool's name (chatapp.engine.chat.tool_turns.CHOICES)."""
    history: str = ""
    """Earlier thoughts in the prompt: "template" or "keep" (chatapp.config.THINKING_HISTORIES)."""
    preset: str = ""
    """The preset the session's turns last ran with (chatapp.presets; `--preset`)."""
    shape: str = ""
    """The reply shape set in the TUI, as `ReplyShape.to_json` writes it (chatapp.engine.shape)."""

    def chosen(self) -> dict[str, str]:
        """The choices made, by name (none: {})."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def to_json(self) -> str:
        return json.dumps(self.chosen())

    @classmethod
    def from_json(cls, text: object) -> SessionChoices:
        try:
            data = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        return cls(**{f.name: data[f.name] for f in fields(cls)
                      if isinstance(data.get(f.name), str) and len(data[f.name]) <= _longest(f.name)})


def _longest(name: str) -> int:
    return MAX_SHAPE if name == "shape" else MAX_CHOICE
