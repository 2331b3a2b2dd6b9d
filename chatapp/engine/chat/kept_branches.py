"""The branches' kept KV states: the cache of a path put aside before the shown path changes,
and the nearest kept state loaded back when a path is shown again or continued, so a switch,
a regenerate or a resume prefills only what no kept state holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chatapp.engine.backend import Backend, CacheState
from chatapp.engine.chat.branch_states import BranchKeeper, BranchStates
from chatapp.engine.chat.cache_track import CacheTrack
from chatapp.engine.chat.conversation import Conversation
from chatapp.engine.chat.tree import new_id
from chatapp.engine.chat.typeahead import TypeAheadState
from chatapp.engine.events import Message
from chatapp.engine.tokens import common_prefix
from chatapp.errors import ServerError

PromptIds = Callable[..., list[int]]
"""Rendering.prompt_ids: (messages=None, *, add_generation_prompt=True) -> ids."""


class KeptBranches:
    def __init__(self, backend: Backend, conversation: Conversation, prompt_ids: PromptIds, track: CacheTrack,
                 typeahead: TypeAheadState, budget_bytes: int) -> None:
        self._backend = backend
        self._conversation = conversation
        self._prompt_ids = prompt_ids
        self._track = track
        self._typeahead = typeahead
        self._states = BranchStates(budget_bytes)
        self._keeper: BranchKeeper | None = None
        self.namespace = new_id(())
        """Names this conversation's branch states on a server (a saved session sets its state key)."""

    def clear(self) -> None:
        """Another conversation: no state of this one is kept, in memory or beyond."""
        self._states.clear()
        self._keeper = None
        self.namespace = new_id(())

    def keep_with(self, keeper: BranchKeeper | None, namespace: str | None = None) -> None:
        """Where branch states go beyond memory (a saved session), and the name its states take."""
        self._keeper = keeper
        if namespace:
            self.namespace = namespace

    def leaves(self) -> dict[str, str]:
        """The leaves a switch would restore instead of prefilling: "cache" (the one the cache
        holds now) or "memory" (a stashed state). A saved session may keep more (its keeper)."""
        kept = dict.fromkeys(self._states.leaves(), "memory")
        if self._track.leaf is not None:
            kept[self._track.leaf] = "cache"
        return kept

    def discard(self, gone: set[str]) -> None:
        """Deleted messages: their states leave memory and the disk."""
        self._states.discard(gone)
        if self._keeper is not None:
            self._keeper.drop_branches(gone)
        if self._track.leaf in gone:
            self._track.leaf = None

    def stash(self, trim: bool = True) -> None:
        """Keep the cache of the leaf it holds before the shown path changes (unless what is
        kept for that leaf is this very cache: a leaf restored and left without a turn). `trim`:
        cut the shown leaf's cache to its path first (`path_cache`), as a save does."""
        leaf, tree = self._track.leaf, self._conversation.tree
        if leaf is None or leaf not in tree or not self._backend.cached_tokens():
            return
        if leaf == self._track.kept_as_is and leaf in self._states:
            return
        try:
            state = self.path_cache(f"{self.namespace}-{leaf}") if trim and leaf == tree.leaf else \
                self._backend.save_cache(f"{self.namespace}-{leaf}")
        except (ServerError, OSError):  # a server without slot files: the switch prefills instead
            return
        self._states.put(leaf, state)
        self._track.kept_as_is = leaf
        if self._keeper is not None:
            self._keeper.keep_branch(leaf, state)

    def nearest(self, leaf: str) -> list[tuple[str, str]]:
        """The kept states (leaf, "memory" or "disk") worth trying for the path to `leaf`, the
        ones whose path shares the most messages with it first (`leaf`'s own first among
        equals): a branch continued anywhere starts from the state nearest to it."""
        tree = self._conversation.tree
        target = [m.id for m in tree.path_to(leaf)]
        kept = [(held, "memory") for held in reversed(self._states.leaves())]
        if self._keeper is not None:
            kept += [(held, "disk") for held in self._keeper.kept_branches()]
        ranked = []
        for order, (held, source) in enumerate(kept):
            if held not in tree:
                continue
            shared = 0
            for a, b in zip(target, (m.id for m in tree.path_to(held))):
                if a != b:
                    break
                shared += 1
            if shared:
                ranked.append((-shared, held != leaf, order, held, source))
        return [(held, source) for *_, held, source in sorted(ranked)[:4]]

    def restore(self, leaf: str, *, reply: tuple[str, Sequence[int]] | None = None) -> tuple[int, str]:
        """Load the kept state that shares the longest prefix with the path to `leaf` (its own,
        or a branch's near it) when that is more than the cache holds; (tokens kept, where from).

        `reply`: (a reply to `leaf`, the ids it starts with): the states through that reply come
        first, and the prefix kept runs on through the generation prompt into those ids (think
        more on an older reply: a later turn's state holds its thought, so it is not prefilled)."""
        track = self._track
        if leaf == track.leaf and reply is None:
            return 0, ""
        if reply is None:
            expected = self._prompt_ids(add_generation_prompt=False)
        else:
            expected = self._prompt_ids() + list(reply[1])
        for held, source in self.nearest(leaf if reply is None else reply[0]):
            found = (self._states.get(held) if source == "memory"
                     else self._keeper.load_branch(held) if self._keeper else None)
            if found is None:
                continue
            keep = common_prefix(found.tokens, expected)
            current = common_prefix(self._backend.cached_tokens(), expected)
            if keep <= current or not self._backend.restore_cache(found, keep):
                continue
            self._typeahead.forget()
            own = held == leaf
            track.leaf = leaf if (own or keep == len(expected)) and reply is None else None
            track.last_reuse, track.last_turn = None, None
            track.kept_as_is = leaf if own and source == "memory" and keep == len(found.tokens) else None
            return keep, source
        return 0, ""

    def path_cache(self, key: str) -> CacheState:
        """The cache as the shown path's state: the cells past the path's prompt (a question
        prefilled while typing, never sent) are dropped first, so no saved state holds them.

        The last turn's own cells stay, also where the path's prompt parts from them: a template
        that drops thoughts renders the reply without the thought the cache holds, and think more
        goes on from that thought (cut there, it was prefilled again after every save of a kept
        chat). A state is only ever used as far as it agrees with the path it is restored for."""
        track = self._track
        cached = self._backend.cached_tokens()
        messages: list[Message] = self._conversation.context_messages()
        expected = self._prompt_ids(messages, add_generation_prompt=False) if messages else []
        keep = common_prefix(cached, expected)
        turn = track.last_turn[0] if track.last_turn is not None and track.leaf == self._conversation.tree.leaf else []
        if len(turn) > keep and cached[:len(turn)] == turn:
            keep = len(turn)
        if keep < len(cached):
            self._backend.keep_cache_prefix(keep)
            self._typeahead.forget()
            if track.last_reuse is not None:  # the last turn's prompt is still there to regenerate from as it ran
                track.last_reuse = min(track.last_reuse, keep)
        return self._backend.save_cache(key)
