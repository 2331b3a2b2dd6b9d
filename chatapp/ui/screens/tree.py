"""Alt+T: the whole conversation as a tree, to see every branch and jump to any of them.

A run of messages without a fork is listed at one level (a 40-turn branch is 80 lines, not
80 levels of indent); each fork opens one level per branch ("branch 2/3"). Messages on the
shown path are marked ●, the shown leaf ◀; each leaf says its length in tokens and whether
its KV state is kept (a switch there restores it instead of prefilling). Enter or a click
jumps: the path through that message is shown, on to the leaf last viewed below it.
"""

from __future__ import annotations


from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label, Tree
from textual.widgets.tree import TreeNode

from chatapp.engine.events import Message
from chatapp.format import count, one_line
from chatapp.ui.screens.dialog import Dialog
from chatapp.ui.shown import TreeSnapshot

FIRST_LINE = 48
"""Characters of a message's first line shown in the tree."""
EXPAND_ALL = 200
"""Up to this many messages every branch is listed open; past it, only the shown path's."""
KEPT_WORDS = {"cache": "KV in the cache now", "memory": "KV kept in memory", "disk": "KV kept on disk"}


def first_line(message: Message) -> str:
    line = one_line(message.content)  # an edited session's text may hold escapes
    return line if len(line) <= FIRST_LINE else line[: FIRST_LINE - 1] + "…"


class TreeScreen(Dialog[str | None]):
    """Dismisses with the id of the message chosen, or None (Esc)."""

    FRAME_TITLE = "Conversation tree · Enter jumps · Space folds · Esc closes"
    BINDINGS = [Binding("q", "close", "Close")]

    DEFAULT_CSS = """
    TreeScreen > #dialog { width: 94%; max-width: 120; height: 90%; }
    TreeScreen Tree { height: 1fr; background: $surface; }
    TreeScreen #tree-legend { color: $text-muted; height: auto; }
    """

    def __init__(self, snapshot: TreeSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.active = {m.id for m in snapshot.tree.path()}
        self.open_all = len(snapshot.tree) <= EXPAND_ALL
        self.nodes: dict[str, TreeNode[str]] = {}
        """The tree widget's node of each message id."""

    def compose_body(self) -> ComposeResult:
        tree = self.snapshot.tree
        leaves = tree.leaves()
        forks = sum(1 for parent in [None, *(m.id for m in tree.messages())] if len(tree.children(parent)) > 1)
        yield Label(f"{count(len(tree))} messages · {count(len(leaves))} branch{'es' if len(leaves) != 1 else ''}"
                    f" · {count(forks)} fork{'s' if forks != 1 else ''} · ● shown path  ◀ shown leaf  ⑂ fork",
                    id="tree-legend", markup=False)
        widget: Tree[str] = Tree("conversation", id="tree")
        widget.show_root = False
        widget.guide_depth = 3
        self._add_run(widget.root, [m.id for m in tree.children(None)])
        widget.root.expand()
        yield widget

    def on_mount(self) -> None:
        widget = self.query_one(Tree)
        leaf = self.snapshot.tree.leaf
        widget.focus()
        if leaf in self.nodes:
            widget.move_cursor(self.nodes[leaf])

    def _label(self, message: Message) -> Text:
        tree, shown_leaf = self.snapshot.tree, self.snapshot.tree.leaf
        on_path = message.id in self.active
        label = Text("● " if on_path else "  ", style="bold" if on_path else "")
        label.append("you " if message.role == "user" else "assistant ", style="bold" if on_path else "dim")
        label.append(f"{message.id}  ", style="dim")
        label.append(first_line(message) or "(empty)")
        children = tree.children(message.id)
        if len(children) > 1:
            label.append(f"  ⑂ {len(children)} branches", style="italic")
        if not children:
            tokens = self.snapshot.tokens.get(message.id)
            details = [f"{count(tokens)} tok"] if tokens is not None else []
            details.append(KEPT_WORDS.get(self.snapshot.kept.get(message.id, ""), "KV not kept"))
            label.append(f"  · {' · '.join(details)}", style="dim")
        if message.id == shown_leaf:
            label.append("  ◀ shown", style="bold")
        return label

    def _add_run(self, node: TreeNode[str], first: list[str]) -> None:
        """Messages after one another at one level, until a fork: each branch opens a level."""
        tree = self.snapshot.tree
        if len(first) > 1:
            for index, child in enumerate(first, 1):
                on_path = child in self.active
                group = node.add(Text(f"{'● ' if on_path else ''}branch {index}/{len(first)}"), data=child,
                                 expand=on_path or self.open_all)
                self._add_run(group, [child])
            return
        at = first[0] if first else None
        while at is not None:
            message = tree[at]
            children = [m.id for m in tree.children(at)]
            if len(children) > 1:
                fork = node.add(self._label(message), data=at, expand=True)
                self.nodes[at] = fork
                self._add_run(fork, children)
                return
            self.nodes[at] = node.add_leaf(self._label(message), data=at)
            at = children[0] if children else None

    def on_tree_node_selected(self, event: Tree.NodeSelected[str]) -> None:
        event.stop()
        if event.node.data is not None:
            self.dismiss(event.node.data)
