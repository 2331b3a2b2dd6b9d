"""A subprocess that saves one session over and over, for the kill -9 and concurrency tests.

    python session_saver.py SESSIONS_DIR NAME TAG PAIRS TIMES [SLOW_MS [branches|grow]]

It prefills a synthetic history tagged TAG, then saves it TIMES times (0: until killed),
printing "begin N" before and "saved N" after each save, or "refused N REASON" when another
process's turns are in the way. With SLOW_MS, the state file is
written in 256 KiB pieces with that pause between them, so a kill lands mid-write, and
"writing" is printed as each state file's write starts. With
"branches", the history is a tree of two branches from the first question (TAG-left and
TAG-right), and before each save the shown branch is switched, so each save also writes the
state of the branch left. With "grow", each save follows a real turn: a new leaf each time,
whose state replaces the one before it (which the save then removes). With "extras", the
session is saved once, then what it keeps besides its tree is written over and over, as the TUI
writes it: the composer's unsent text (`draft N:` and 1 MiB after it) and the last reply's
scored probabilities (a JSON list that long), printing "begin N" and "kept N" around each pair.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from chatapp.engine.chat.tree import MessageTree
from chatapp.engine.models.resolve import resolve_model
from chatapp.engine.sessions import manager as manager_module
from chatapp.engine.sessions import SessionManager
from chatapp.engine.sessions.manager import LiveSession
from chatapp.engine.stats import TurnRecord
from chatapp.errors import SessionConflict
from tests.engine.sessions.session_helpers import SETTINGS, open_engine, prefill_history, synthetic_history


def slowly(encode, pause_s: float):
    def encode_slowly(state):
        print("writing", flush=True)  # the kill tests time their kill from here, not from "begin"
        for chunk in encode(state):
            view = memoryview(chunk)
            for start in range(0, len(view), 256 * 1024):
                yield view[start:start + 256 * 1024]
                time.sleep(pause_s)
    return encode_slowly


def main() -> None:
    directory, name, tag, pairs, times = sys.argv[1:6]
    if len(sys.argv) > 6:
        manager_module.encode_state = slowly(manager_module.encode_state, int(sys.argv[6]) / 1000)
    engine = open_engine(resolve_model())
    leaves = []
    if sys.argv[7:8] == ["branches"]:
        tree = MessageTree()
        for side in ("left", "right"):
            tree.switch(None, descend=False)
            for message in synthetic_history(f"{tag}-{side}", int(pairs))[1:]:
                tree.add(message, tree.leaf)
            leaves.append(tree.leaf)
        prefill_history(engine, [synthetic_history(tag, 0)[0], *tree.messages()])
        engine.switch(leaves[1])
        engine.clear_cache()
        engine._backend.runtime.eval(engine.prompt_ids(add_generation_prompt=False))  # the right branch cached
        print("leaves " + " ".join(leaves), flush=True)
    else:
        prefill_history(engine, synthetic_history(tag, int(pairs)))
    live = LiveSession(SessionManager.open(SETTINGS, Path(directory)), name, engine)
    live.attach()
    if sys.argv[7:8] == ["extras"]:
        keep_extras(live, int(times))
        return
    n = 0
    while int(times) == 0 or n < int(times):
        n += 1
        if leaves:
            engine.switch(leaves[n % 2])  # stashes the branch left: this save writes its state too
        record: TurnRecord | None = None
        if sys.argv[7:8] == ["grow"]:
            record = list(engine.send(f"{tag} question {int(pairs) + n}: say one word."))[-1].record
        print(f"begin {n}", flush=True)
        try:
            # again, though nothing changed: that is the test (or after the turn, as a chat saves)
            report = live.save_turn(record) if record is not None else live.save_now(force=True)
        except SessionConflict as exc:
            print(f"refused {n} {exc}", flush=True)
            continue
        print(f"saved {n} {report.state_bytes} {' | '.join(report.notices)}", flush=True)


EXTRA_CHARS = 1 << 20


def extra_draft(n: int) -> str:
    return f"draft {n}:" + "é" * EXTRA_CHARS


def extra_scores(n: int) -> str:
    return json.dumps([{"n": n, "token": k, "p": 0.5} for k in range(EXTRA_CHARS // 32)])


def keep_extras(live: LiveSession, times: int) -> None:
    live.save_now(force=True)
    store = live.manager.store
    reply = store.get(live.name).messages[-1].id  # as saved: a second saver's ids map to the first's
    n = 0
    while times == 0 or n < times:
        n += 1
        print(f"begin {n}", flush=True)
        store.set_draft(live.name, extra_draft(n))
        store.keep_scores(live.name, reply, extra_scores(n))
        print(f"kept {n}", flush=True)


if __name__ == "__main__":
    main()
