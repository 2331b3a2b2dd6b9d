"""Command palette (Ctrl+P): every chatapp action, and a theme list that previews live."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from chatapp.ui.controllers import branches as branch_control

TOOL_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Tools: off", "Offer the model no tool (the default): no tool schema in the prompt", "tool_choice('none')"),
    ("Tools: auto", "Offer every enabled tool (the built-ins and the config's MCP servers); the model decides, "
     "and each call waits for your approval", "tool_choice('auto')"),
    ("Tools: required", "Offer every enabled tool; each question's first reply must call one",
     "tool_choice('required')"),
    ("Tools: always allowed", "The tools approved always (each of one server, as its schema was then); "
     "'Tools: ask again before …' takes one back", "tools_allowed"),
)
"""The tool choice, as `ask --tool-choice` takes it; once the tools are open, each one's name
is a choice too ("Tools: call NAME", chatapp.ui.controllers.tools)."""

COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("New chat", "Start a new conversation (same system prompt)", "new_chat"),
    ("Regenerate reply", "Answer again beside the selected reply (else the last); the old one stays", "regenerate"),
    *branch_control.COMMANDS,
    ("Stop generation", "Stop the reply being written; the partial reply is kept", "stop"),
    ("Stop thinking and answer", "A thinking model's reply: end its thought now and answer (Ctrl+G)", "answer_now"),
    ("Think more", "A thinking model's reply (selected, else the last): think on from its thought's end, then "
     "answer again beside it, nothing prefilled again (Ctrl+F)", "think_more"),
    ("Thinking: on", "A thinking model thinks before it answers, with no budget; kept with the session",
     "think('on')"),
    ("Thinking: off", "A thinking model answers at once: its template's enable_thinking switch where it has one, "
     "else the thought closed before its first token; kept with the session", "think('off')"),
    ("Thinking: budget", "A thinking model's most thought tokens a reply, with the sampler's settings (Ctrl+O)",
     "sampling"),
    ("Earlier thoughts: keep as generated", "A thinking model's earlier thoughts stay in the prompt as it wrote "
     "them, so the cache holds each next turn's start; kept with the session", "thinking_history('keep')"),
    ("Earlier thoughts: as the template renders them", "Usually dropped, as the model was trained: the next "
     "turn prefills the previous reply again (the KV panel says how much); kept with the session",
     "thinking_history('template')"),
    ("Edit system prompt", "Change the system prompt", "system_prompt"),
    ("Sampling: temperature, max tokens, top-k, top-p, min-p, seed",
     "Set temperature, max tokens, top-k, top-p, min-p and the seed (Ctrl+O, or /set NAME VALUE)", "sampling"),
    ("Toggle drafting (speculative decoding)",
     "Draft by prompt lookup and verify in one batch, or decode one token a step; from the next reply",
     "toggle_drafting"),
    ("Reply shape: JSON schema", "Every reply from the next turn a JSON value of a schema (JSON text or "
     "'name, age int, bio: one sentence'), checked after the turn (/schema TEXT, /schema off)", "reply_shape"),
    ("Reply shape: off", "Replies are free text again from the next turn", "reply_shape('off')"),
    ("Reply shape: count the grammar's mask", "Per reply token under a grammar, the entries it allowed and the "
     "probability it cut, in the Tokens panel; the whole vocabulary is masked, so slower (/schema mask)",
     "reply_shape('mask')"),
    ("Switch model", "Load another local model", "switch_model"),
    ("Sessions: open, new, rename, delete", "Saved conversations with their KV cache (F6)", "sessions"),
    ("Save chat as session", "Save this chat under a name; it is saved after every turn from then on",
     "save_session"),
    ("Model anatomy", "Blocks, heads, experts, bytes per tensor family, KV cost per token (F7)", "anatomy"),
    ("Attention in the last turn", "Which earlier tokens a reply token attended to, per layer and head (F9)",
     "attention"),
    ("Surprise of the conversation", "Each token in the cache shaded by -ln p, and the perplexity",
     "attention('surprise')"),
    ("Quantization cost of the conversation", "Pick a second quant of the loaded model: each token in the cache "
     "shaded by how far its probabilities are (KL divergence), with both files' sizes and decode speeds",
     "compare_quant"),
    ("Logit lens of a reply token", "What each layer would pick next, for the selected reply token (else the last)",
     "attention('lens')"),
    ("Sampler chain of a reply token", "What top-k, top-p, min-p, temperature and the draw did to a reply token",
     "attention('sampler')"),
    ("Attach a file or folder", "Text, Markdown, code or PDF: the best parts go before each question (/attach PATH)",
     "attach_file"),
    ("Remove an attachment", "Pick one of the attached files to remove (F8)", "detach"),
    ("Copy last reply", "Copy the last assistant reply to the clipboard", "copy_reply"),
    ("Toggle panels", "Show or hide the Tokens / KV / Speed / Quant panels", "toggle_panels"),
    ("Next panel", "Show the next panel", "next_panel"),
    ("Toggle token ids", "Show token ids in the Tokens panel", "toggle_token_ids"),
    ("Toggle confidence view", "Reply tokens shaded by probability; click a token for its alternatives "
     "before and after the sampler (F10)", "toggle_confidence"),
    ("Token probabilities of the selected reply", "A token's alternatives next to it; 1-9 branch there (Alt+P)",
     "token_probs"),
    ("Score reply", "Read the selected reply (else the last) back in one prefill pass for its tokens' "
     "probabilities, when it was written without them", "score_reply"),
    *TOOL_COMMANDS,
    ("Switch theme", "Pick a theme; the app previews it as you move", "change_theme"),
    ("Help: keys", "Every key binding", "help"),
)
"""(title, help, app action) for each palette entry."""


class ChatCommands(Provider):
    def _hits(self):
        tools = getattr(self.app, "tools_ui")
        named = [(f"Tools: call {name}", f"Offer every enabled tool; each question's first reply must call {name}",
                  f"tool_choice({name!r})") for name in tools.names()]
        named += [(f"Preset: {name}", "Switch to this preset from the next turn (its system prompt, samplers, "
                   "drafting); says first what it costs: samplers only keep the KV cache", f"preset({name!r})")
                  for name in getattr(self.app, "presets_ui").names()]
        named += [(f"Tools: ask again before {line}", "Take back its \"always\": its next call asks first",
                   f"tools_allowed({key!r})") for key, line in tools.allowed()]
        for title, help_text, action in (*COMMANDS, *named):
            yield title, help_text, partial(self.app.run_action, action)

    async def discover(self) -> Hits:
        for title, help_text, callback in self._hits():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._hits():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)

