"""A session as data (JSON) or Markdown: the transcript plus a per-turn performance journal.

With every branch (`--all-branches`), the JSON's "tree" is the whole conversation as a flat
list, depth first: each message once, with its "id", its "parent" (null for a first question),
its "children" (ids, in the order written) and its "depth" (0 for a first question), and
"branches" lists each leaf's path as ids. It is flat, not nested one level per message, so
a conversation of any length is written, and read back by any JSON parser (a nested tree
past about 450 messages is deeper than Python's own json module writes or reads). Version 1
nested each message's children inside it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.sessions.files import atomic_write
from chatapp.engine.sessions.records import RECORD_CAP, UNREAD
from chatapp.engine.sessions.store import SessionStore, StoredSession
from chatapp.engine.stats import DRAFT_KEYS
from chatapp.errors import ChatappError, InputError, OutputError
from chatapp.format import finite, human_bytes
from chatapp.private import create_private

EXPORT_FORMAT = "chatapp-session"
EXPORT_VERSION = 2
"""2: the tree is a flat list of messages naming their parent and children (1 nested them)."""
JOURNAL_KEYS = ("prompt_tokens", "cached_tokens", "prefill_tokens", "restored_tokens", "prefill_tps", "ttft_ms",
                "decode_tokens", "decode_tps", "restore_ms", "kv_used", "n_ctx", "finish_reason", "model", "quant",
                "kv_type", "backend", "threads", *DRAFT_KEYS)

THINKING_KEYS = ("thinking_tokens", "thinking_ms", "reprefill_expected")
"""A thinking model's figures, in a turn's entry only where the turn had them."""


def journal_entry(turn: int, message_index: int, record: dict) -> dict:
    """The figures that tell how a turn ran, with cache reuse as a share of the prompt."""
    entry = {"turn": turn, "message_index": message_index}
    entry.update({key: finite(record.get(key)) for key in JOURNAL_KEYS})  # NaN or Infinity: not a figure
    prompt, cached = record.get("prompt_tokens"), record.get("cached_tokens")
    ok = isinstance(prompt, int) and isinstance(cached, int) and prompt > 0
    entry["cache_reuse"] = round(cached / prompt, 4) if ok else None
    entry.update({key: finite(record[key]) for key in THINKING_KEYS if record.get(key)})  # a thinking model's turn
    if isinstance(record.get("preset"), str):  # the preset it ran with (chatapp.presets, --preset)
        entry["preset"] = record["preset"]
    if "logprobs" in record:  # a turn run with --logprobs or the confidence view: its tokens' probabilities
        entry["logprobs"] = record["logprobs"]
    if UNREAD in record:  # too long to read: only the figures its row holds apart
        entry[UNREAD] = record[UNREAD]
    return entry


def journal_notices(data: dict) -> list[str]:
    """A line for each turn whose record was too long to read (sessions.records)."""
    return [f"turn {entry['turn']}'s record is {human_bytes(entry[UNREAD])}, more than the "
            f"{human_bytes(RECORD_CAP)} chatapp reads of one: only its prefill figures are shown"
            for entry in data["journal"] if UNREAD in entry]


def tree_rows(session: StoredSession) -> list[dict]:
    """The whole tree, depth first: `[{"id", "parent", "role", "content", "active", "children"}]`,
    parent None for a first question; `active` marks the shown path (the system prompt is not in
    the tree: it applies to every branch)."""
    tree = MessageTree.from_messages(session.tree, session.leaf)
    active = {m.id for m in tree.path()}
    names = image_names(session)
    return [{"id": m.id, "parent": m.parent, "role": m.role, "content": m.content, "stopped": m.stopped,
             **({"thinking": m.thinking} if m.thinking else {}), **image_entries(m, names), "active": m.id in active,
             "children": [c.id for c in tree.children(m.id)], "depth": depth}
            for m, depth in tree.walk()]


def _flat(rows: list[dict]) -> list[dict]:
    """The tree's rows as the export writes them: flat, depth first (see the module docstring)."""
    return [{k: row[k] for k in ("id", "parent", "role", "images", "content", "thinking", "stopped", "active",
                                 "children", "depth") if k in row}
            for row in rows]


def _branches(rows: list[dict]) -> list[list[dict]]:
    """Each leaf's path, first question first, in the tree's order."""
    by_id = {row["id"]: row for row in rows}
    paths = []
    for row in rows:
        if row["children"]:
            continue
        path, at = [], row
        while at is not None:
            path.append(at)
            at = by_id.get(at["parent"])
        paths.append(path[::-1])
    return paths


CHOICE_LABELS = {"think": "Thinking", "history": "Earlier thoughts", "tools": "Tools"}


def session_data(store: SessionStore, name: str, session: StoredSession | None = None, *,
                 all_branches: bool = False) -> dict:
    """The export of session `name` (`session`, when the caller has already loaded it): the
    shown path and its turns' journal, or with `all_branches` every message as a flat tree (each
    naming its parent and children, see the module docstring) and every turn."""
    session = session or store.get(name)
    by_message = store.records_by_message(name)
    if all_branches:
        rows = tree_rows(session)
        replies = [(i, row["id"]) for i, row in enumerate(rows) if row["id"] in by_message]
    else:
        rows = None
        replies = [(i, m.id) for i, m in enumerate(session.messages) if m.id in by_message]
    if not by_message:  # records from before trees name their reply by index only
        records = [(idx, record, "") for idx, record in store.turn_records(name)]
    else:
        records = [(i, by_message[message_id], message_id) for i, message_id in replies]
    data = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "name": session.name,
        "model": {"name": session.model.name, "quant": session.model.quant, "sha256": session.model.sha256,
                  "path": session.model.path},
        "system_prompt": session.system_prompt,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "window_start": session.window_start,
        "messages": [{"role": m.role, "content": m.content, "stopped": m.stopped} |
                     ({"thinking": m.thinking} if m.thinking else {}) | image_entries(m, image_names(session)) |
                     ({"id": m.id, "parent": m.parent} if m.role != "system" else {}) for m in session.messages],
        "active_leaf": session.leaf,
        "journal": [journal_entry(n, idx, record) | ({"message_id": mid} if mid else {})
                    for n, (idx, record, mid) in enumerate(records, 1)],
    }
    if chosen := store.choices(name).chosen():
        data["choices"] = chosen  # what the user chose for the session (chatapp.engine.sessions.choices)
    if rows is not None:
        data["tree"] = _flat(rows)
        data["branches"] = [[row["id"] for row in path] for path in _branches(rows)]
    elif (hidden := len(session.tree) - len(session.messages)) > 0:
        data["messages_in_other_branches"] = hidden  # --all-branches exports them
    return data


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _cell(value, spec: str = "") -> str:
    if value is None:
        return "–"
    return format(value, spec) if spec and isinstance(value, (int, float)) else str(value)


def _drafted(entry: dict) -> str:
    """E.g. "40 (31)": draft tokens verified and accepted; "–" for a turn that did not draft."""
    drafted, accepted = entry.get("draft_tokens"), entry.get("draft_accepted")
    return f"{drafted:,} ({accepted:,})" if isinstance(drafted, int) and drafted and isinstance(accepted, int) else "–"


def _tree_markdown(data: dict) -> list[str]:
    """Every branch, each message written once: branch 1 from its first question, then each
    later branch only from where it leaves the ones before ("after ID"), so a fork adds its own
    messages and not the whole path again (the JSON's "branches" lists each full path)."""
    by_id = {node["id"]: node for node in data["tree"]}
    written: set[str] = set()
    lines = []
    for number, branch in enumerate(data["branches"], 1):
        new, start = [], branch[-1] if branch else None
        active = " (active)" if start in by_id and by_id[start]["active"] else ""  # a leaf on the shown path ends it
        while start in by_id and start not in written:  # up from the leaf to the fork already written
            new.append(start)
            start = by_id[start]["parent"]
        new.reverse()
        where = f"after {start}" if start is not None else "from the first question"
        lines += [f"## Branch {number}{active}: {len(branch):,} messages, {where}", ""]
        for message_id in new:
            message = by_id[message_id]
            suffix = " (stopped)" if message["stopped"] else ""
            lines += [f"### {message['role']} {message_id}{suffix}", "", *thought_block(message),
                      *image_lines(message), message["content"], ""]
        written.update(new)
    return lines


def image_names(session: StoredSession) -> dict[str, str]:
    return {sha: name for sha, name, _ in session.images}


def image_entries(message, names: dict[str, str]) -> dict:
    """A question's images as an export names them (the bytes stay in the session's database)."""
    if not message.images:
        return {}
    return {"images": [{"sha256": sha, "name": names.get(sha, "")} for sha in message.images]}


def image_lines(message: dict) -> list[str]:
    """A line for each image a question holds, above its text."""
    return [f"*[image {image['name'] or image['sha256'][:12]} · sha256 {image['sha256'][:12]}…]*"
            for image in message.get("images", ())] + ([""] if message.get("images") else [])


def thought_block(message: dict) -> list[str]:
    """A reply's thought as a collapsible block above its answer (GitHub and most renderers fold
    <details>); nothing for a message without one."""
    thinking = message.get("thinking", "").strip("\n")
    if not thinking:
        return []
    return ["<details>", "<summary>Thinking</summary>", "", thinking, "", "</details>", ""]


def to_markdown(data: dict) -> str:
    model = data["model"]
    lines = [f"# Session {data['name']}", "",
             f"Model: {model['name']} ({model['quant']}) · created {_when(data['created_at'])} · "
             f"last saved {_when(data['updated_at'])}", "", "## Transcript", ""]
    if chosen := data.get("choices"):
        lines[3:3] = [" · ".join(f"{CHOICE_LABELS.get(k, k)}: {v}" for k, v in chosen.items()), ""]
    if "tree" in data:
        lines = lines[:-2]
        system = [m for m in data["messages"] if m["role"] == "system"]
        if system:
            lines += ["## System prompt", "", system[0]["content"], ""]
        lines += _tree_markdown(data)
    else:
        for message in data["messages"]:
            suffix = " (stopped)" if message["stopped"] else ""
            lines += [f"### {message['role']}{suffix}", "", *thought_block(message), *image_lines(message),
                      message["content"], ""]
    lines += ["## Performance journal", ""]
    if not data["journal"]:
        lines += ["No turns recorded.", ""]
        return "\n".join(lines)
    lines += ["| turn | prompt tok | cached | reuse | prefilled | restored | prefill tok/s | TTFT ms | decode tok | "
              "decode tok/s | drafted (accepted) | quant | KV type | backend |",
              "|" + "---:|" * 11 + "---|---|---|"]
    for e in data["journal"]:
        reuse = f"{e['cache_reuse']:.0%}" if e["cache_reuse"] is not None else "–"
        lines.append(
            f"| {e['turn']} | {_cell(e['prompt_tokens'])} | {_cell(e['cached_tokens'])} | {reuse} | "
            f"{_cell(e['prefill_tokens'])} | {_cell(e['restored_tokens'])} | {_cell(e['prefill_tps'], ',.0f')} | "
            f"{_cell(e['ttft_ms'], ',.0f')} | {_cell(e['decode_tokens'])} | {_cell(e['decode_tps'], ',.1f')} | "
            f"{_drafted(e)} | {_cell(e['quant'])} | {_cell(e['kv_type'])} | {_cell(e['backend'])} |")
    lines.append("")
    return "\n".join(lines)


def write_export(path: Path, text: str, *, force: bool = False) -> None:
    """Write an export to `path`, 0600: it is a whole conversation.

    A new file is created with O_EXCL|O_NOFOLLOW, so a symlink planted at `path` (even one
    pointing nowhere yet) makes it fail instead of writing where the link points. `force`
    replaces an existing regular file by renaming a temp file over it, which swaps the name
    and never writes through a link; a symlink at `path` is refused even then."""
    data = text.encode("utf-8")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{path} is a symbolic link; chatapp does not write through links")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path} exists and is not a regular file")
        if not force:
            raise InputError(f"{path} already exists; use --force to overwrite it")
    try:
        if st is not None:
            atomic_write(path, [data])  # removes its temp file when it fails
            return
        fd = create_private(path)
    except FileExistsError:  # something appeared at `path` since the check: never write through it
        raise InputError(f"{path} appeared while exporting; not written") from None
    except OSError as exc:
        raise _write_error(path, exc) from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)  # some file systems take the bytes and report a full disk only here
    except OSError as exc:
        _remove_own(path, fd)  # no empty or partial export is left behind
        raise _write_error(path, exc) from None
    finally:
        os.close(fd)


_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}
"""The path was fine, the write was not: the disk is full, over quota or failing."""


def _write_error(path: Path, exc: OSError) -> ChatappError:
    """A full or failing disk is an output error (exit 1); a path that can't be written is bad input (2)."""
    kind = OutputError if exc.errno in _NO_ROOM else InputError
    return kind(f"cannot write {path}: {exc.strerror or exc}; nothing was written")


def _remove_own(path: Path, fd: int) -> None:
    """Remove the file this export created, and only it: `path` may have been replaced since."""
    try:
        ours, there = os.fstat(fd), os.lstat(path)
        if (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino):
            path.unlink()
    except OSError:
        pass
