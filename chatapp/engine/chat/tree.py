"""A conversation as a tree of messages, after llama.cpp's WebUI and Open WebUI: each message
has a stable short id and a parent; editing a question or regenerating a reply adds a sibling
instead of replacing it, and the conversation shows one path, from a first question to its
active leaf.

Each parent remembers the child last viewed under it, so switching to a sibling shows, inside
that sibling's subtree, the leaf last viewed there (as the WebUI's ‹ 2/3 › arrows do). The
system prompt is not in the tree: it applies to every branch (chatapp.engine.chat.conversation).

Plain data: no tokenizing, no cache. `Engine` keeps one and decides what a change costs.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from dataclasses import replace

from chatapp.engine.events import Message
from chatapp.errors import InputError

ROOT = "root"
"""What the command line and the tree listing call the place before the first question."""
ID_LENGTH = 8
MIN_PREFIX = 4
"""The shortest id prefix accepted for a message (as git accepts a short commit id)."""


def is_id(value: object) -> bool:
    """Whether a value (read from a database or a command line) has the form of an id chatapp writes."""
    return isinstance(value, str) and len(value) == ID_LENGTH and all(c in "0123456789abcdef" for c in value)


def new_id(taken: Iterable[str] | dict) -> str:
    while (candidate := secrets.token_hex(ID_LENGTH // 2)) in taken or candidate == ROOT:
        pass
    return candidate


class MessageTree:
    def __init__(self) -> None:
        self._nodes: dict[str, Message] = {}
        self._children: dict[str | None, list[str]] = {None: []}
        self._last_viewed: dict[str | None, str] = {}
        """For each parent (None: the root), the child last on the active path under it."""
        self._leaf: str | None = None
        self._path: list[Message] | None = None
        """The active path, root first; built again after a change."""

    @classmethod
    def from_messages(cls, messages: Iterable[Message], leaf: str | None = None) -> "MessageTree":
        """A tree from messages in the order they were written. Messages that carry ids and
        parents keep them; those without (a linear transcript) are chained, each after the
        one before. `leaf` ends the active path (the last message's, by default); an unknown
        one, or a message whose parent is missing, falls back to what can be kept."""
        tree = cls()
        last: str | None = None
        for message in messages:
            if message.role == "system":
                continue
            parent = message.parent if message.id else last
            if parent is not None and parent not in tree._nodes:
                parent = None if message.id else last  # an orphan (its parent lost) starts a branch of its own
            node = replace(message, id=message.id if message.id and message.id not in tree._nodes
                           else new_id(tree._nodes), parent=parent)
            tree._insert(node)
            last = node.id
        if leaf is not None and leaf in tree._nodes:
            tree.switch(leaf, descend=False)
        elif last is not None:
            tree.switch(last, descend=False)
        return tree

    def copy(self) -> "MessageTree":
        """An independent copy (messages are immutable, so only the structure is copied)."""
        twin = MessageTree()
        twin._nodes = dict(self._nodes)
        twin._children = {parent: list(children) for parent, children in self._children.items()}
        twin._last_viewed = dict(self._last_viewed)
        twin._leaf = self._leaf
        return twin

    # --- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._nodes

    def __getitem__(self, message_id: str) -> Message:
        return self._nodes[message_id]

    @property
    def leaf(self) -> str | None:
        """The id of the active path's last message; None when the path is empty."""
        return self._leaf

    def path(self) -> list[Message]:
        """The active path, first question first (a copy)."""
        if self._path is None:
            path, at = [], self._leaf
            while at is not None:
                node = self._nodes[at]
                path.append(node)
                at = node.parent
            self._path = path[::-1]
        return list(self._path)

    def path_to(self, message_id: str) -> list[Message]:
        path, at = [], message_id
        while at is not None:
            node = self._nodes[at]
            path.append(node)
            at = node.parent
        return path[::-1]

    def on_path(self, message_id: str) -> bool:
        return any(m.id == message_id for m in self.path())

    def messages(self) -> list[Message]:
        """Every message, in the order they were written (parents before children)."""
        return list(self._nodes.values())

    def children(self, message_id: str | None) -> list[Message]:
        return [self._nodes[child] for child in self._children.get(message_id, ())]

    def siblings(self, message_id: str) -> tuple[list[str], int]:
        """The ids of the message and its siblings, in the order written, and its index."""
        family = self._children[self._nodes[message_id].parent]
        return list(family), family.index(message_id)

    def leaves(self) -> list[str]:
        return [i for i in self._nodes if not self._children.get(i)]

    def descend(self, message_id: str | None) -> str | None:
        """The leaf reached from a message by following the child last viewed at each step."""
        at = message_id
        while self._children.get(at):
            at = self._last_viewed.get(at) or self._children[at][-1]
        return at

    def walk(self) -> Iterator[tuple[Message, int]]:
        """Every message with its depth, depth first, children in the order written."""
        stack = [(child, 0) for child in reversed(self._children[None])]
        while stack:
            at, depth = stack.pop()
            yield self._nodes[at], depth
            stack.extend((child, depth + 1) for child in reversed(self._children.get(at, ())))

    def resolve(self, prefix: str) -> str:
        """The id of the message whose id starts with `prefix` (at least MIN_PREFIX characters,
        or the whole id); InputError for an unknown or ambiguous one."""
        prefix = prefix.strip().lower()
        if prefix in self._nodes:
            return prefix
        if len(prefix) < MIN_PREFIX:
            raise InputError(f"message id {prefix!r} is too short: give at least {MIN_PREFIX} characters")
        found = [i for i in self._nodes if i.startswith(prefix)]
        if not found:
            raise InputError(f"no message with id {prefix!r} in this conversation")
        if len(found) > 1:
            raise InputError(f"message id {prefix!r} is ambiguous: it starts {', '.join(sorted(found))}")
        return found[0]

    def branch_point(self, prefix: str) -> str | None:
        """The reply a new question may branch after (None: ROOT, a new first question);
        InputError for an unknown id or a message that is not a reply."""
        if prefix == ROOT:
            return None
        target = self.resolve(prefix)
        if self[target].role != "assistant":
            raise InputError(f"message {target} is a {self[target].role} message: a branch starts after a reply "
                             f"(or at {ROOT})")
        return target

    def editable(self, prefix: str) -> str:
        """The question or tool result an edit may replace; InputError for anything else."""
        target = self.resolve(prefix)
        role = self[target].role
        if role not in ("user", "tool"):
            raise InputError(f"message {target} is an {role} message: only a question or a tool's result can be "
                             "edited")
        return target

    # --- changing -----------------------------------------------------------------------------
    def add(self, message: Message, parent: str | None) -> Message:
        """Take in a new message after `parent` (None: a first question) and end the active
        path there. Returns the message as kept, with its id."""
        if parent is not None and parent not in self._nodes:
            raise InputError(f"no message with id {parent!r} in this conversation")
        node = replace(message, id=new_id(self._nodes), parent=parent)
        self._insert(node)
        self.switch(node.id, descend=False)
        return node

    def update(self, message_id: str, message: Message) -> Message:
        """Change a message's content or flags in place (its id and parent stay)."""
        old = self._nodes[message_id]
        node = replace(message, id=old.id, parent=old.parent)
        self._nodes[message_id] = node
        self._path = None
        return node

    def switch(self, message_id: str | None, *, descend: bool = True) -> str | None:
        """Make the path through `message_id` the active one; with `descend`, it goes on to
        the leaf last viewed below it, else it ends there. Returns the new leaf."""
        at = message_id
        while at is not None:
            parent = self._nodes[at].parent
            self._last_viewed[parent] = at
            at = parent
        self._leaf = self.descend(message_id) if descend else message_id
        self._path = None
        return self._leaf

    def remove(self, message_id: str) -> list[Message]:
        """Remove a message and everything after it. When the active path ran through it, the
        path moves to a remaining sibling's last viewed leaf, or ends at the parent."""
        node = self._nodes[message_id]
        on_path = self.on_path(message_id)
        removed, stack = [], [message_id]
        while stack:
            at = stack.pop()
            removed.append(self._nodes.pop(at))
            stack.extend(self._children.pop(at, ()))
            self._last_viewed.pop(at, None)
        family = self._children[node.parent]
        family.remove(message_id)
        if self._last_viewed.get(node.parent) == message_id:
            del self._last_viewed[node.parent]
        if on_path:
            target = family[-1] if family else node.parent
            self._leaf = self.switch(target) if target is not None else None
            if target is None:
                self._last_viewed.pop(None, None)
        self._path = None
        return removed

    def _insert(self, node: Message) -> None:
        self._nodes[node.id] = node
        self._children.setdefault(node.parent, []).append(node.id)
        self._children.setdefault(node.id, [])
        self._path = None
