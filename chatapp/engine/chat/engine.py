"""`Engine`: the one owner of the conversation and the KV cache, over one `Backend`.

The CLI and the TUI ask the engine to send, stop, regenerate, start a new chat, set the
system prompt, tokenize, and save or restore the cache for a session; they never reach the
backend or the message list. What the panels need travels in the turn's events.

`send()` and `regenerate()` return generators of events that run on whatever thread iterates
them (a worker in the TUI); `stop()` may be called from any other thread.

Attachments belong to the conversation too: `attach()` reads and sizes a file for this model
(see chatapp.engine.retrieval), and each `send()` places what fits best of them before the
question, in the user message itself (`Message.context`), so the conversation before it stays a
reusable cache prefix and a saved session re-renders exactly the prompt the model saw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from chatapp.config import DraftMode, Settings, validate
from chatapp.engine.backend import Backend, CacheState, Drafting, GenerationSettings, ModelSummary
from chatapp.engine.chat import thoughts
from chatapp.engine.chat.attached import Attached
from chatapp.engine.images import ImageFacts, ImageShelf
from chatapp.engine.chat.branch_states import BranchFigures, BranchKeeper, BranchSwitch
from chatapp.engine.chat.cache_track import CacheTrack
from chatapp.engine.chat.conversation import Conversation
from chatapp.engine.chat.decoded import DecodedReplies
from chatapp.engine.chat.kept_branches import KeptBranches
from chatapp.engine.chat.rendering import Rendering
from chatapp.engine.chat.tool_prompt import ToolCosts
from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.chat.turn import TurnRunner
from chatapp.engine.chat.typeahead import TypeAhead, TypeAheadState, next_question
from chatapp.engine.events import Event, Message
from chatapp.engine.inside.attention import AttentionMap, AttentionUnavailable
from chatapp.engine.inside.views import NextTokenViews
from chatapp.engine.retrieval.attachments import AttachReport, Planned
from chatapp.engine.retrieval.document import Attachment
from chatapp.engine.sampling import Scored, TokenProbs
from chatapp.engine.thinking import ThoughtEnd
from chatapp.engine.tokens import Token, common_prefix
from chatapp.engine.tools.spec import ToolSpec
from chatapp.errors import InputError
from chatapp.format import one_line_text

__all__ = ["Engine", "GenerationSettings", "ModelSummary"]


class Engine:
    """The one face of a conversation for the UI and the commands. It keeps the conversation and
    delegates by concern: the template's rendering (Rendering), the branches' kept states
    (KeptBranches), the attachments (Attached), thinking (thoughts.Thinking), and the turn
    itself (TurnRunner), all sharing one record of what the cache holds (CacheTrack)."""

    def __init__(self, backend: Backend, settings: Settings) -> None:
        self._backend = backend
        self.settings = settings
        self.generation = GenerationSettings.from_settings(settings)
        self._conversation = Conversation(settings.system_prompt)
        self.load_notices: list[str] = []
        """Warnings from loading (an n_ctx above the model's training context), one line each."""
        self.next_token_views: Callable[[], NextTokenViews] | None = None
        """Opens the views inside the next token on the loaded model (chatapp.engine.inside.views):
        set by the opener for an in-process model; None where the backend has no such views."""
        self._track = CacheTrack()
        self._typeahead = TypeAheadState()
        self._reply_probs: dict[str, tuple[TokenProbs, ...]] = {}
        """Each reply's tokens with their probabilities, by message id, where its turn computed them."""
        self._decoded = DecodedReplies(backend)
        """Replies whose decoded tokens differ from their text tokenized again (chat.decoded)."""
        self._thinking = thoughts.Thinking(backend, settings)
        """The model's thinking format (found on first use), its budget, the history choice, and
        the running turn's steering ("answer now")."""
        self._rendering = Rendering(backend, self._conversation, self._thinking, self._decoded)
        self._kept = KeptBranches(backend, self._conversation, self._rendering.prompt_ids, self._track,
                                  self._typeahead, settings.branch_state_mb * 1024 * 1024)
        self._attached = Attached(lambda text: len(backend.tokenize(text)), lambda: self.n_ctx, self._reserve)
        self.images = ImageShelf()  # the bytes of the conversation's images, as a session keeps them
        self._turns = TurnRunner(backend, self._conversation, self._rendering, self._thinking, self._decoded,
                                 self._typeahead, self._track, self._attached, self._reply_probs,
                                 lambda: self.generation, self._reserve)
        drafting = backend.set_drafting(settings.draft, settings.draft_max)
        if drafting.off_because:
            self.load_notices.append(drafting.describe())

    # --- what is loaded ------------------------------------------------------------------
    @property
    def summary(self) -> ModelSummary:
        return self._backend.summary

    @property
    def n_ctx(self) -> int:
        return self._backend.summary.n_ctx

    # --- the conversation --------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        """A copy of the conversation's messages: changing it changes nothing."""
        return list(self._conversation.messages)

    @property
    def window_start(self) -> int:
        return self._conversation.window_start

    @property
    def system_prompt(self) -> str:
        return self._conversation.system_prompt

    def set_system_prompt(self, text: str) -> None:
        """Applies from the next turn; earlier turns stay as they were."""
        self._conversation.set_system_prompt(text)

    def new_chat(self) -> None:
        """A new conversation with the same system prompt and no attachments; the cached prefix
        stays reusable."""
        self._conversation.reset()
        self._attached.forget()
        self._reply_probs.clear()
        self._thinking.forget()
        self._decoded.forget()
        self._forget_branches()

    def load_conversation(self, messages: Sequence[Message], window_start: int | None = None,
                          leaf: str | None = None) -> None:
        """A saved conversation: messages in the order written (with ids and parents: a tree;
        without: one path), the active path ending at `leaf` (the last message by default)."""
        self._conversation.load(messages, window_start, leaf)
        self._reply_probs.clear()
        self._thinking.forget()
        self._decoded.forget()
        self._forget_branches()

    def reply_probs(self, message_id: str) -> tuple[TokenProbs, ...]:
        """Reply `message_id`'s tokens with their probabilities; () where its turn had none."""
        return self._reply_probs.get(message_id, ())

    def remember_reply_probs(self, probs: dict[str, tuple[TokenProbs, ...]]) -> None:
        """Probabilities of replies in the loaded conversation (a saved session's turn records)."""
        self._reply_probs.update({mid: p for mid, p in probs.items() if p and mid in self._conversation.tree})

    def remember_decoded(self, texts: dict[str, str]) -> None:
        """Replies' text as their turns decoded it (a saved session's turn records say it as
        "reply_as_decoded" where it differs from the thought and answer put back together), so
        that keeping earlier thoughts renders them token for token as the saved cache holds them."""
        self._thinking.remember_decoded({mid: text for mid, text in texts.items() if mid in self._conversation.tree})

    def remember_decoded_ids(self, ids: dict[str, list[int]]) -> None:
        """Replies' tokens as their turns decoded them, where their text tokenizes otherwise (a
        saved session's turn records say "reply_ids_as_decoded"), so that the next prompt holds
        them as the saved cache does (chatapp.engine.chat.decoded)."""
        tree = self._conversation.tree
        self._decoded.restore({mid: (tree[mid].content, list(found)) for mid, found in ids.items()
                               if mid in tree and isinstance(found, list)})

    def score_reply(self, message_id: str, n_top: int, stop: threading.Event | None = None) -> Scored:
        """Reply `message_id` of the shown path, written without probabilities, scored after the
        fact: its tokens read back in one prefill pass (`Backend.score`), the probabilities kept as
        its `reply_probs`. The shown leaf's cache is stashed first and restored after, so scoring
        an earlier reply costs the next turn nothing. Call it where a turn could run (it changes
        the cache); it takes about as long as prefilling the reply."""
        conversation = self._conversation
        tree = conversation.tree
        reply = tree.resolve(message_id)
        if tree[reply].role != "assistant":
            raise InputError(f"message {reply} is a {tree[reply].role} message: only a reply can be scored")
        system = conversation.messages[:conversation.n_system]
        path = (system + tree.path_to(reply))[conversation.window_start:]
        if not tree.on_path(reply) or not path or path[-1].id != reply or len(path) < 2:
            raise InputError(f"reply {reply} is not in the shown path's context window")
        prompt = self.prompt_ids(system + path[:-1])
        ids = self.reply_ids(reply)
        leaf = tree.leaf
        if leaf != reply:  # the shown leaf's cache is kept aside, to be put back after
            self._kept.stash()
        scored = self._backend.score(prompt, ids, self.generation, n_top, stop or threading.Event())
        self._typeahead.forget()
        self._track.leaf = self._track.kept_as_is = self._track.last_reuse = None
        if leaf is not None and leaf != reply:
            self._kept.restore(leaf)
        self._reply_probs[reply] = scored.probs
        return scored

    def _forget_branches(self) -> None:
        self._track.forget()
        self._kept.clear()

    @property
    def state_namespace(self) -> str:
        """Names this conversation's branch states on a server (a saved session sets its state key)."""
        return self._kept.namespace

    def keep_branches_with(self, keeper: BranchKeeper | None, namespace: str | None = None) -> None:
        """Where branch states go beyond memory (a saved session), and the name its states take."""
        self._kept.keep_with(keeper, namespace)

    # --- the tree ----------------------------------------------------------------------------
    @property
    def tree(self) -> MessageTree:
        """A copy of the conversation's tree: changing it changes nothing."""
        return self._conversation.tree.copy()

    def transcript(self) -> list[Message]:
        """The system prompt, then every message of the tree in the order written: what a save
        keeps and `load_conversation` takes back."""
        return self._conversation.messages[:self._conversation.n_system] + self._conversation.tree.messages()

    @property
    def leaf(self) -> str | None:
        return self._conversation.tree.leaf

    def resolve(self, prefix: str) -> str:
        """The id of the message a (short) id names; InputError when none or several do."""
        return self._conversation.tree.resolve(prefix)

    def switch(self, message_id: str, *, descend: bool = True) -> BranchSwitch:
        """Show the path through `message_id` (with `descend`, on to the leaf last viewed below
        it). The cache of the path left is kept (memory, and the session's keeper), and the
        target leaf's kept state is restored when there is one that matches its path; otherwise
        the cache keeps what it shares with the new path and the next turn prefills the rest."""
        started = time.perf_counter()
        tree = self._conversation.tree
        message_id = tree.resolve(message_id)
        self._kept.stash()
        tree.switch(message_id, descend=descend)
        self._conversation.place_window(self._conversation.window_start)
        self.refit_window()
        # The branch is named by its deepest fork: a jump to a leaf below a ‹ 2/2 › is branch 2/2.
        forked = next((m.id for m in reversed(tree.path_to(message_id)) if len(tree.siblings(m.id)[0]) > 1),
                      message_id)
        family, index = tree.siblings(forked)
        return self._arrive(started, index + 1, len(family))

    def sibling(self, message_id: str, step: int) -> BranchSwitch:
        """Switch to the previous (-1) or next (+1) sibling of a message, wrapping around."""
        family, index = self._conversation.tree.siblings(self.resolve(message_id))
        return self.switch(family[(index + step) % len(family)])

    def branch_tokens(self, leaf: str | None = None) -> int:
        """The tokens of the branch ending at `leaf` (the shown one by default): its path's
        prompt inside the context window, without the generation prompt, as the next turn there
        starts with it. The one count of a branch: the tree, the switch notices and the panels
        all give this number."""
        conversation = self._conversation
        if leaf is None or leaf == conversation.tree.leaf:
            messages = self.context_messages()
            if not messages:
                return 0
        else:
            system = conversation.messages[:conversation.n_system]
            messages = system + (system + conversation.tree.path_to(leaf))[conversation.window_start:]
        return len(self.prompt_ids(messages, add_generation_prompt=False))

    def branch_figures(self) -> BranchFigures:
        """The shown branch's figures: its tokens, how many the cache holds, the cells in use."""
        messages = self.context_messages()
        expected, glue = self._rendering.history_ids(messages)
        cached = self._backend.cached_tokens()
        held = common_prefix(cached, expected)
        leaf = self._conversation.tree.leaf
        whole = leaf is not None and leaf == self._track.leaf  # the cache: the one this path's last turn left
        next_ids = self._rendering.next_turn_ids(messages) if cached else []
        again = self._thinking.reprefill_expected(cached, expected, glue, whole, next_ids) if cached else 0
        reason = self._rendering.reprefill_reason(messages) if again else ""
        return BranchFigures(self._conversation.tree.leaf, len(expected), held, len(cached), self.n_ctx,
                             again, common_prefix(cached, next_ids) if again else None, reason)

    def kept_leaves(self) -> dict[str, str]:
        """The leaves a switch would restore instead of prefilling, and where their cache is:
        "cache" (the one the cache holds now) or "memory" (a stashed state). A saved session may
        keep more as state files (its BranchKeeper)."""
        return self._kept.leaves()

    def delete_branch(self, message_id: str) -> list[Message]:
        """Remove a message and everything after it (and their kept states); the shown path
        moves to a sibling's branch, or ends before the message."""
        tree = self._conversation.tree
        message_id = tree.resolve(message_id)
        on_path = tree.on_path(message_id)
        if on_path:
            self._kept.stash()
        removed = tree.remove(message_id)
        self._kept.discard({m.id for m in removed})
        if on_path:
            self._conversation.place_window(self._conversation.window_start)
            self.refit_window()
            self._track.last_turn = self._track.last_reuse = None
            if tree.leaf is not None:
                self._kept.restore(tree.leaf)
        return removed

    def restore_nearest(self) -> tuple[int, str]:
        """Restore, for the shown path, the kept state nearest to it (KeptBranches.restore)."""
        leaf = self._conversation.tree.leaf
        return self._kept.restore(leaf) if leaf is not None else (0, "")

    def path_cache(self, key: str) -> CacheState:
        """The cache as the shown path's state, for a save (KeptBranches.path_cache)."""
        return self._kept.path_cache(key)

    def _arrive(self, started: float, position: int, siblings: int) -> BranchSwitch:
        leaf = self._conversation.tree.leaf
        restored, source = self._kept.restore(leaf) if leaf is not None else (0, "")
        figures = self.branch_figures()
        if not restored:
            self._track.leaf = leaf if leaf is not None and figures.cached == figures.tokens else None
            self._track.last_turn = self._track.last_reuse = None
        tps = self._track.prefill_tps
        estimate = figures.tokens / tps if tps else None
        how = "restored" if restored else ("kept" if figures.cached else "empty")
        return BranchSwitch(leaf, position, siblings, how, figures, (time.perf_counter() - started) * 1000,
                            source, estimate)

    def place_window(self, start: int) -> None:
        """Start the context window at message `start` of `messages` (as a session saved it)."""
        self._conversation.place_window(start)

    def refit_window(self, floor: int = 0) -> int:
        """Place the context window again for this n_ctx and max_tokens, as for a conversation
        saved under others (a resumed session): the earlier turns that fit come back, those
        that no longer fit leave; none before message `floor` is tried. Returns how many turns
        came back (negative: how many left)."""
        moved = self._conversation.refit(self.prompt_ids, self.n_ctx, self._reserve(), floor)
        if moved:
            self._track.last_reuse = None
        return moved

    def set_generation(self, **changes) -> None:
        self.generation = replace(self.generation, **changes)

    # --- speculative decoding ----------------------------------------------------------------
    @property
    def drafting(self) -> Drafting:
        """Speculative decoding as the next turn will run it."""
        return self._backend.drafting

    def set_drafting(self, mode: DraftMode, draft_max: int | None = None) -> Drafting:
        """Turn drafting on ("ngram") or off from the next turn; the backend keeps what it has
        measured about drafting (acceptance, step costs) either way. When drafting cannot run
        here, the result's `off_because` says why in one line (the caller shows it)."""
        draft_max = self.drafting.draft_max if draft_max is None else draft_max
        validate(replace(self.settings, draft=mode, draft_max=draft_max))  # one line naming what is wrong
        return self._backend.set_drafting(mode, draft_max)

    def context_messages(self) -> list[Message]:
        return self._conversation.context_messages()

    # --- tokens ------------------------------------------------------------------------------
    def render(self, messages: Sequence[Message] | None = None, *, add_generation_prompt: bool = True) -> str:
        """The messages through the template (the window's, by default; Rendering.render)."""
        return self._rendering.render(messages, add_generation_prompt=add_generation_prompt)

    # --- tools (chatapp.engine.tools) ----------------------------------------------------------
    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        return self._rendering.tools

    def set_tools(self, tools: Sequence[ToolSpec]) -> None:
        """Offer these tools from the next turn on; their schemas join every prompt (the first
        turn after a change prefills from where the prompt changed)."""
        self._rendering.tools = tuple(tools)

    @property
    def tool_format(self) -> str:
        """"template" or "generic" (Rendering.tool_format)."""
        return self._rendering.tool_format

    @property
    def tool_syntax(self) -> str:
        """How the model writes a call: hermes, mistral, llama3 or generic (chatapp.engine.tools.calls)."""
        return self._rendering.tool_syntax

    def tool_costs(self, tools: Sequence[ToolSpec] | None = None) -> ToolCosts:
        """What tools (the offered ones by default) cost in prompt tokens (Rendering.tool_costs)."""
        return self._rendering.tool_costs(tools)

    # --- thinking models (chatapp.engine.thinking) --------------------------------------------
    @property
    def thinking(self) -> "thoughts.Thinking":
        """The thinking format, budget and history choice; `answer_now()` steers a running turn."""
        return self._thinking

    def reprefill_expected(self) -> int:
        """Tokens the next turn will prefill again because the template rewrites the history
        (drops earlier thoughts): of the shown path's prompt, those its last turn decoded into the
        cache that the prompt no longer starts with (see thoughts.Thinking.reprefill_expected). Known before
        the question is typed; the turn's record then says `reprefill_expected` and, measured,
        `reprefill_tokens`."""
        return self.branch_figures().reprefill

    def answer_now(self) -> bool:
        """Stop thinking and answer: from any thread, the running turn forces its thought's closing
        marker before its next token and goes on to the answer. False when no thought is running."""
        return self._thinking.answer_now()

    def prompt_ids(self, messages: Sequence[Message] | None = None, *, add_generation_prompt: bool = True) -> list[int]:
        """The templated prompt's token ids for these messages (the window's, by default;
        Rendering.prompt_ids): without the generation prompt, what the next turn starts with."""
        return self._rendering.prompt_ids(messages, add_generation_prompt=add_generation_prompt)

    def tokenize(self, text: str) -> list[Token]:
        return self._backend.tokenize(text)

    def describe(self, ids: Sequence[int]) -> list[Token]:
        """Token ids as the model's vocabulary spells them, special ones marked."""
        return self._backend.describe(ids)

    # --- attachments (chatapp.engine.chat.attached) -------------------------------------------
    @property
    def attachments(self) -> tuple[Planned, ...]:
        """What is attached: each file with its token count, whole or as chunks, as last sized
        (a new max_tokens is taken into account at the next attach or turn)."""
        return self._attached.plans

    def attach(self, path: str | Path) -> AttachReport:
        """Read a file or a folder (text, Markdown, code, PDF) and attach it, all or nothing (an
        AttachmentError says why in one line). Sizing tokenizes it all: call it off the UI thread."""
        return self._attached.attach(path)

    def add_attachments(self, attachments: Iterable[Attachment], notices: Iterable[str] = ()) -> AttachReport:
        """Attach files already read (`retrieval.loading.load_path`); all or nothing, as `attach`."""
        return self._attached.add(attachments, notices)

    def detach(self, name: str) -> Attachment:
        """Remove an attachment by name; what earlier turns placed stays in their messages."""
        return self._attached.detach(name)

    def set_attachments(self, attachments: Iterable[Attachment]) -> None:
        """Replace every attachment (a resumed session's; the last model's after a switch)."""
        self._attached.replace(attachments)

    # --- prefill while typing (chatapp.engine.chat.typeahead) ----------------------------------
    def type_ahead(self, text: str, stop: threading.Event) -> Iterator[TypeAhead]:
        """Prefill the next turn's prompt for `text`, the question being typed after the shown
        path, as far as it is certain, in short batches until done or `stop` is set; one
        `TypeAhead` after each. Nothing when `prefill_while_typing` is off; for an empty text
        only what the cache holds past the conversation and the next question's opening goes.
        The caller holds the same lock as for a turn: this changes the cache."""
        if not self.settings.prefill_while_typing:
            return iter(())
        return self._typeahead.run(
            self._backend, lambda typed: self.prompt_ids(next_question(self.context_messages(), typed)), text,
            fits=lambda n: n + self._reserve() <= self.n_ctx, question_stable=not self.attachments, stop=stop)

    def add_image(self, data: bytes, name: str) -> ImageFacts:
        """Read an image for `send(images=[its sha256])`, encoded by the first turn that needs it, once."""
        facts = self._backend.add_image(data, name)
        self.images.put(data, name)
        return facts

    # --- turns -------------------------------------------------------------------------------
    def send(self, text: str, *, images: Sequence[str] = (), since: float | None = None) -> Iterator[Event]:
        """A new question after the shown path's last message, about `images` (hashes `add_image`
        gave), if any. `since`: when the user sent it (time.perf_counter()), for the record's
        ttft_ms; by default when the turn starts."""
        if not text.strip():
            raise InputError("the prompt is empty")
        self.images.check_question(text, images)
        tree = self._conversation.tree
        undo_leaf = tree.leaf
        context = self._attached.retrieve(text, self.context_messages())
        question = self._conversation.add(Message("user", text, context=context, images=tuple(images)))
        return self._turns.run(lambda: self._undo(undo_leaf, question.id), "send", since=since)

    def send_after(self, message_id: str, text: str) -> Iterator[Event]:
        """A new question branching after reply `message_id` (tree.ROOT: a new first question);
        the shown path then continues on that branch."""
        target = self._conversation.tree.branch_point(message_id)
        if not text.strip():
            raise InputError("the prompt is empty")
        return self._branch_turn(target, lambda: Message("user", text), "branch")

    def edit(self, message_id: str, text: str) -> Iterator[Event]:
        """Ask a question again in other words: a sibling of user message `message_id`, answered
        anew; or give a tool call another result: a sibling of tool message `message_id` (what
        the model reads as the call's result), and the model's reply to it. The old message and
        everything after it stay in the tree."""
        tree = self._conversation.tree
        target = tree.editable(message_id)
        role = tree[target].role
        if role == "user" and not text.strip():
            raise InputError("the prompt is empty")
        self.images.check_question(text, ())
        if role == "tool":  # a result is data, not a question: nothing is retrieved for it
            return self._branch_turn(tree[target].parent, lambda: Message("tool", text), "edit", retrieve=False)
        images = tree[target].images  # the question asked again about the same images
        return self._branch_turn(tree[target].parent, lambda: Message("user", text, images=images), "edit")

    def think_more(self, extra: int, message_id: str | None = None) -> Iterator[Event]:
        """Think more: a new sibling of reply `message_id` (the shown path's last by default) that
        starts with its thought and thinks on for up to `extra` more sampled tokens, then answers
        (the close forced when they run out). When that reply's turn was the last one, the cache
        is cut back to where its thought ended and the logits it had there are used again (the
        token that closed the thought ruled out), so nothing is prefilled again; otherwise the
        thought is prefilled as far as the cache no longer holds it."""
        tree = self._conversation.tree
        reply = tree.leaf if message_id is None else tree.resolve(message_id)
        if reply is None or tree[reply].role != "assistant" or not tree[reply].thinking:
            raise InputError("think more goes on from a reply with a thought: this one has none")
        if extra < 1:
            raise InputError(f"think more needs at least 1 more token, not {extra}")
        end = self._thinking.end_of(reply) if reply == self._track.leaf else None
        forced: list[int] = []
        if end is not None:
            system = self._conversation.messages[:self._conversation.n_system]
            head = self.prompt_ids(system + tree.path_to(tree[reply].parent))
            cached = self._backend.cached_tokens()
            if len(head) < end.position <= len(cached) and cached[:len(head)] == head:
                forced = cached[len(head):end.position]
            else:
                end = None
        if end is None:
            forced = self._thinking.thought_ids(tree[reply].thinking)
        return self.regenerate(reply, forced=forced, more=(extra, end))

    def regenerate(self, message_id: str | None = None, *, forced: Sequence[int] = (),
                   more: tuple[int, ThoughtEnd | None] | None = None) -> Iterator[Event]:
        """Answer a question again: a new sibling of reply `message_id` (the shown path's last
        reply by default). The old reply stays in the tree.

        `forced`: token ids the new reply starts with, given rather than sampled, decoding on from
        there: a branch from a token, as `last_reply_ids()[:k] + [other]`. The cache keeps the
        conversation and whatever of `forced` it holds, so only the rest is prefilled; the
        record's extra says "forced_tokens" and "forced_prefilled", and its probs cover the
        sampled tokens only. `more`: think more (see `think_more`)."""
        tree = self._conversation.tree
        undo_leaf = tree.leaf
        if message_id is None:
            reply = undo_leaf
        else:
            reply = tree.resolve(message_id)
            if tree[reply].role != "assistant":
                raise InputError(f"message {reply} is a {tree[reply].role} message: only a reply can be regenerated")
        self._kept.stash(trim=more is None)  # think more goes on from the cache as the reply's turn left it
        if message_id is None:
            self._conversation.drop_last_reply()
        else:
            tree.switch(tree[reply].parent, descend=False)
            self._conversation.place_window(self._conversation.window_start)
            # the kept state nearest to the question (a new process too); for think more, nearest
            # to the reply, through as much of its thought as that state holds
            self._kept.restore(tree[reply].parent, reply=(reply, forced) if more is not None else None)
        # The last turn's own reply answered again: prefill as that turn did, so a greedy reply
        # repeats; a branch from a token reuses all it can.
        reuse_limit = self._track.last_reuse if reply == self._track.leaf and not forced else None
        return self._turns.run(lambda: self._undo(undo_leaf, None), "regenerate", reuse_limit, forced=tuple(forced),
                          more=more)

    def _branch_turn(self, parent: str | None, question, action: str, *, retrieve: bool = True) -> Iterator[Event]:
        tree = self._conversation.tree
        undo_leaf = tree.leaf
        self._kept.stash()
        tree.switch(parent, descend=False)
        self._conversation.place_window(self._conversation.window_start)
        if parent is not None:  # start from the kept state nearest to the new path (a new process too)
            self._kept.restore(parent)
        asked = question()
        context = self._attached.retrieve(asked.content, self.context_messages()) if retrieve else None
        added = self._conversation.add(replace(asked, context=context))
        return self._turns.run(lambda: self._undo(undo_leaf, added.id), action)

    def _undo(self, leaf: str | None, added: str | None) -> None:
        """A turn that never started leaves the conversation as it was: the new question (whose
        text the caller still has) leaves the tree and the shown path is the one before."""
        tree = self._conversation.tree
        if added is not None and added in tree:
            tree.remove(added)
        if leaf is None or leaf in tree:
            tree.switch(leaf, descend=False)
        self._conversation.place_window(self._conversation.window_start)

    def send_tool_results(self, texts: Sequence[str]) -> Iterator[Event]:
        """The results of the calls the shown path's last reply made, one "tool" message each,
        and the model's next reply: a step of a tool loop (chatapp.engine.chat.tool_turns). The
        cache holds the path, so only the results and the template's glue are prefilled."""
        if not texts:
            raise InputError("no tool result to send")
        undo_leaf = self._conversation.tree.leaf
        first = self._conversation.add(Message("tool", texts[0]))
        for text in texts[1:]:
            self._conversation.add(Message("tool", text))
        return self._turns.run(lambda: self._undo(undo_leaf, first.id), "tool")

    def reply_ids(self, message_id: str) -> list[int]:
        """A reply's token ids as the model reads it back (Rendering.reply_ids)."""
        return self._rendering.reply_ids(message_id)

    def branch_from_token(self, message_id: str, at: int, token: int) -> Iterator[Event]:
        """A new sibling of reply `message_id` that starts with its first `at` tokens
        (`reply_ids`), then `token` in place of the next one, and decodes on from there."""
        tree = self._conversation.tree
        reply = tree.resolve(message_id)
        if tree[reply].role != "assistant":
            raise InputError(f"message {reply} is a {tree[reply].role} message: a token branch starts in a reply")
        ids = self.reply_ids(reply)
        if not 0 <= at <= len(ids):
            raise InputError(f"--at-token {at} is outside reply {reply}, which has {len(ids)} tokens (0 to {len(ids)})")
        vocab = self._vocab_size()
        if token < 0 or (vocab and token >= vocab):
            raise InputError(f"token id {token} is outside the vocabulary (0 to {(vocab or 1) - 1})")
        self._check_text_token(token)
        return self.regenerate(reply, forced=[*ids[:at], token])

    def _check_text_token(self, token: int) -> None:
        """A token branch puts a token of text in the reply. A control token (an end of turn, a
        template marker) has no text: the reply saved would not hold it, and its figures counted a
        token the transcript lacks, so it is refused (InputError)."""
        found = self.describe([token])[0]
        if found.special:
            raise InputError(f"token {token} ({one_line_text(found.piece)}) is a control token, not text: a reply's "
                             "saved text cannot hold it, so a branch cannot start with it; choose a token of text")

    def branch_at_step(self, message_id: str, step: int, token: int) -> Iterator[Event]:
        """A new sibling of reply `message_id` that takes `token` instead of its `step`-th token with
        probabilities (`reply_probs`, the confidence view's): the tokens before it as they were
        sampled or scored, so the cache of that reply keeps them, then `token`, decoded on."""
        tree = self._conversation.tree
        reply = tree.resolve(message_id)
        steps = self._reply_probs.get(reply, ())
        if not 0 <= step < len(steps):
            raise InputError(f"reply {reply} has no token {step} with probabilities (it has {len(steps)})")
        self._check_text_token(token)
        start = self._rendering.unscored_start(reply, steps)
        return self.regenerate(reply, forced=[*start, *(s.id for s in steps[:step]), token])

    def _vocab_size(self) -> int:
        from chatapp.engine.models.quant import model_info

        path = self.summary.local_file or (self.summary.path if self.summary.kind == "in-process" else None)
        try:
            return model_info(Path(path)).vocab_size if path else 0
        except (OSError, ValueError):
            return 0

    def last_reply_ids(self) -> list[int]:
        """The token ids of the last turn's reply as the cache holds them ([] when the
        conversation or the cache changed since)."""
        if self._track.last_turn is None:
            return []
        tokens, reply_start = self._track.last_turn
        return list(tokens[reply_start:])

    def stop(self) -> None:
        self._turns.stop.set()
        self._backend.interrupt()

    def _reserve(self) -> int:
        """Room kept free for the reply when deciding whether a turn fits."""
        return max(1, min(self.generation.max_tokens, self.n_ctx // 4))

    # --- looking inside ---------------------------------------------------------------------------
    def last_turn(self) -> tuple[list[int], int] | None:
        """The last turn's cache ids and where its reply starts in them (None: no turn since the
        conversation or the cache changed), for the views inside the next token."""
        turn = self._track.last_turn
        return None if turn is None else (list(turn[0]), turn[1])

    def attention(self, head_layer: int | None = None,
                  stop: threading.Event | None = None) -> AttentionMap | AttentionUnavailable:
        """The last turn's attention: for each reply token, which earlier tokens it attended to,
        per layer (heads averaged, and one by one for `head_layer`), as llama.cpp computes them in
        a replay of the turn's tokens (chatapp.engine.inside.attention). Takes about as long as
        prefilling the turn's tokens, so call it from a worker thread; `stop` cuts it short."""
        if self._track.last_turn is None:
            return AttentionUnavailable("no turn to look at yet: send a message first")
        tokens, reply_start = self._track.last_turn
        return self._backend.attention(tokens, reply_start, head_layer, stop or threading.Event())

    # --- the cache, for sessions ---------------------------------------------------------------
    def cached_tokens(self) -> list[int]:
        return self._backend.cached_tokens()

    def kv_used(self) -> int:
        return len(self._backend.cached_tokens())

    def clear_cache(self) -> None:
        self._backend.clear_cache()
        self._typeahead.forget()
        self._track.forget()

    def fingerprint(self) -> dict[str, str | int | bool]:
        return self._backend.fingerprint()

    def save_cache(self, key: str) -> CacheState:
        return self._backend.save_cache(key)

    def restore_cache(self, state: CacheState, keep: int) -> bool:
        """Load a saved cache for the shown path (its tokens already checked against it)."""
        self._track.forget()
        restored = self._backend.restore_cache(state, keep)
        self._typeahead.forget()
        self._track.leaf = self._conversation.tree.leaf if restored else None
        return restored

    def close(self) -> None:
        self._backend.close()
