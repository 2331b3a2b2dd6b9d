"""What one save of a conversation tree writes, given what the database holds.

A writer holds the whole tree (every message with its id and parent). When nobody else saved
since its last read or write, its tree is the truth: new messages are inserted, changed ones
updated, and the ones it removed (a deleted branch) are deleted. When another process saved
meanwhile, both keep what they added as long as they added in different places: each side's new
messages hang under messages both had seen (their attach points), and only two writers adding
under the same message conflict (as two processes continuing the same leaf always did), and the
second is refused with SessionConflict and writes nothing. A message the writer added as a new
branch on purpose (`branched`: a --branch-from question, an edit, a regenerated reply) is a
sibling of whatever another process added there, so it conflicts with nothing. A writer that has
seen everything the other wrote simply appends.

Messages without ids (a transcript written as a list, as before trees) are matched to the stored
tree by content along their path, so they continue it rather than start a new branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from chatapp.engine.chat.tree import new_id
from chatapp.engine.events import Message


class Conflict(Exception):
    """Another process added after the same message as this writer (or removed what it adds under)."""


@dataclass
class SavePlan:
    messages: list[Message]
    """The writer's messages with ids (adopted or new), parents first."""
    inserts: list[Message] = field(default_factory=list)
    updates: list[Message] = field(default_factory=list)
    deletes: set[str] = field(default_factory=set)
    appended: bool = False
    """Another process had saved in between and this writer's messages went in beside its."""
    remap: dict[str, str] = field(default_factory=dict)
    """The writer's ids that are stored under another (the same message, written apart)."""


def _same(a: Message, b: Message) -> bool:
    return a == b and a.parent == b.parent


def adopt_ids(stored: Sequence[Message], mine: Sequence[Message]) -> tuple[list[Message], dict[str, str]]:
    """`mine` with the stored ids wherever it holds a stored message, and the map of its ids
    that changed. A message of `mine` whose id is not stored, but whose content a stored message
    under the same parent has (one no other message of `mine` claims), is that message: two
    processes that built the same transcript apart (or one that wrote a list without ids) then
    continue one tree instead of starting two. A message without an id follows the one before it."""
    children: dict[str | None, list[Message]] = {}
    for message in stored:
        if message.role != "system" and message.id:
            children.setdefault(message.parent, []).append(message)
    stored_ids = {m.id for m in stored if m.id}
    claimed = {m.id for m in mine if m.id in stored_ids}
    taken = stored_ids | {m.id for m in mine if m.id}
    out: list[Message] = []
    remap: dict[str, str] = {}
    last: str | None = None
    for message in mine:
        if message.role == "system":
            out.append(message)
            continue
        parent = remap.get(message.parent, message.parent) if message.id else last
        if message.id not in stored_ids:
            match = next((m for m in children.get(parent, ()) if m == message and m.id not in claimed), None)
            new = match.id if match else (message.id or new_id(taken))
            if match:
                claimed.add(match.id)
            if message.id and new != message.id:
                remap[message.id] = new
            taken.add(new)
            message = replace(message, id=new)
        message = replace(message, parent=parent)
        out.append(message)
        last = message.id
    return out, remap


def plan_save(stored: Sequence[Message], mine: Sequence[Message], *, current: bool,
              seen: frozenset[str] | None, branched: frozenset[str] = frozenset()) -> SavePlan:
    """`current`: nobody saved since the writer's base; `seen`: the ids the writer has held (read
    or written), so a stored message it does not hold now is one it removed. Without `seen`, a
    current writer's tree replaces the stored one, and another's removes nothing stored.
    `branched`: the writer's messages that start a branch on purpose (see the module's docstring)."""
    mine, remap = adopt_ids(stored, mine)
    branched = frozenset(remap.get(i, i) for i in branched)
    stored_by_id = {m.id: m for m in stored if m.role != "system" and m.id}
    mine_by_id = {m.id: m for m in mine if m.role != "system"}
    plan = SavePlan(mine, remap=remap)
    plan.updates = [m for i, m in mine_by_id.items() if i in stored_by_id and not _same(m, stored_by_id[i])]
    new_mine = [m for i, m in mine_by_id.items() if i not in stored_by_id]
    if current and seen is None:
        plan.inserts = new_mine
        plan.deletes = set(stored_by_id) - set(mine_by_id)
        return plan
    if current:  # nobody saved since: what is stored but not held here is either removed here or
        # another's that this writer never held (merged in by an earlier save): only the first goes
        plan.inserts = new_mine
        plan.deletes = {i for i in stored_by_id if i not in mine_by_id and i in seen}
        return plan
    known = seen if seen is not None else frozenset(set(stored_by_id) & set(mine_by_id))
    others = [m for i, m in stored_by_id.items() if i not in mine_by_id and i not in known]
    removed_by_me = {i for i in stored_by_id if i not in mine_by_id and i in known}
    removed_by_them = {i for i in mine_by_id if i in known and i not in stored_by_id}
    new_mine = [m for m in new_mine if m.id not in removed_by_them]
    theirs = {m.id for m in others}
    ours = {m.id for m in new_mine}
    their_points = {m.parent for m in others if m.parent not in theirs}
    our_points = {m.parent for m in new_mine if m.parent not in ours}
    continued = {m.parent for m in new_mine if m.parent not in ours and m.id not in branched}
    if continued & their_points or our_points & removed_by_them:
        raise Conflict()
    if any(m.parent in removed_by_me for m in others):
        raise Conflict()
    plan.inserts = new_mine
    plan.deletes = removed_by_me
    plan.updates = [m for m in plan.updates if m.id not in removed_by_me]
    plan.appended = True
    return plan
