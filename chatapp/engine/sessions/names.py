"""Session names (what a user may call a session) and state keys (what names its KV-state file)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence

from chatapp.errors import SessionError

MAX_LEN = 64
# Letters and digits of any script, then also spaces and . _ - + @ = ; never a path separator.
_NAME = re.compile(r"[^\W_][\w .+@=-]*", re.UNICODE)


def find_name(given: str, newest_first: Sequence[str]) -> str:
    """The saved session `given` means, as `sessions list` shows them (newest first): its exact
    name; else, when no session is called that, its number in the list (1 the newest) or the one
    name it begins, case aside; else `given` itself, which the store then says it does not know.
    A prefix that begins several names is a SessionError naming them."""
    if given in newest_first:
        return given
    if given.isdigit() and 1 <= int(given) <= len(newest_first):
        return newest_first[int(given) - 1]
    folded = given.casefold()
    begun = [name for name in newest_first if name.casefold().startswith(folded)]
    if len(begun) > 1:
        shown = ", ".join(repr(name) for name in begun[:5]) + (", ..." if len(begun) > 5 else "")
        raise SessionError(f"{given!r} begins {len(begun)} session names ({shown}): give more of one")
    return begun[0] if begun else given


def validate_name(name: str) -> str:
    """The name, if it is safe to use; otherwise a SessionError that says what is allowed."""
    if not isinstance(name, str) or not name:
        raise SessionError("the session name is empty")
    if len(name) > MAX_LEN:
        raise SessionError(f"the session name is longer than {MAX_LEN} characters")
    if "/" in name or "\\" in name:
        raise SessionError(f"invalid session name {name!r}: no path separators")
    if not _NAME.fullmatch(name) or name != name.strip():
        raise SessionError(f"invalid session name {name!r}: start with a letter or digit, then use letters, "
                           "digits, spaces and . _ - + @ =")
    return name


TITLE_LEN = 40
"""The most characters of a question a session named after it keeps."""
_NOT_IN_NAMES = re.compile(r"[^\w .+@=-]+", re.UNICODE)
_SENTENCE_END = re.compile(r"[.?!]+(?=\s|$)")


def name_from(question: str, taken: Callable[[str], bool]) -> str:
    """A session name for a chat, from its first question: the first sentence of its first line
    when that is two words or more (else the whole line), in the characters a name allows, cut at
    a word within TITLE_LEN, without the sentence's closing stop, and " 2", " 3"… after it while
    `taken` says the name is in use. A question with no letter or digit gives "chat".

    The first sentence, since it is what a name is typed back as (`--session "What is a KV
    cache"`): the whole line joined its sentences into one ("What is a KV cache Answer in two")."""
    line = next((part for part in question.splitlines() if part.strip()), "")
    first = _SENTENCE_END.split(line, maxsplit=1)[0]
    if len(first.split()) >= 2:
        line = first
    line = line.replace("'", "").replace("\u2019", "")  # "What's" as "Whats", not "What s"
    words = " ".join(_NOT_IN_NAMES.sub(" ", line).replace("_", " ").split())
    words = words.lstrip(" .+@=-")
    if len(words) > TITLE_LEN:
        words = words[:TITLE_LEN + 1].rsplit(" ", 1)[0] if " " in words[:TITLE_LEN + 1] else words[:TITLE_LEN]
    words = words.rstrip(" .+@=-")
    return free_name(words if words and _NAME.fullmatch(words) else "chat", taken)


def free_name(base: str, taken: Callable[[str], bool]) -> str:
    """`base`, or the first of "base 2", "base 3"… that `taken` says is not in use."""
    name, number = base, 1
    while taken(name):
        number += 1
        name = f"{base[:MAX_LEN - len(str(number)) - 1]} {number}"
    return validate_name(name)


_STATE_KEY = re.compile(r"[0-9a-f]{32}")


def new_state_key() -> str:
    return uuid.uuid4().hex


def valid_state_key(key: object) -> bool:
    """Whether a state key read from the database is one chatapp writes (`new_state_key`: 32
    lowercase hex digits). Only such a key becomes a file name: an edited one such as
    "../../tmp/evil" must never reach a path that chatapp writes or deletes."""
    return isinstance(key, str) and _STATE_KEY.fullmatch(key) is not None
