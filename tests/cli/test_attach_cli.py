"""`chatapp ask --attach`: retrieval end to end, across two processes, and every bad input."""

from __future__ import annotations


from tests.cli.conftest import records
from tests.engine.retrieval.conftest import DOCS
from tests.cli.attach_inputs import bad_inputs

ASK = ("--json", "--temperature", "0", "--max-tokens", "16", "--ctx", "2048", "--threads", "1")
"""One fixed thread: the second turn attends over more than 256 cells, where an f16 cache's
single steps split attention across threads, so a reply depends on how many decode threads ran
(which the thread policy measures, then backs off under load); comparing replies across runs
needs the same count in each."""
Q1 = "How do I disable Rich globally in Typer?"
Q2 = "Since which version does Typer include Click's source code?"


def test_a_resumed_session_retrieves_the_same_chunks_and_restores_its_kv_state(chatapp_exe):
    doc = str(DOCS / "typer.md")
    first_run = chatapp_exe("ask", "--session", "s", "--attach", doc, Q1, *ASK)
    [first] = records(first_run)
    assert "attached typer.md: " in first_run.stderr and " chunks" in first_run.stderr
    assert first["retrieved"] and all(e["file"] == "typer.md" and e["score"] > 0 for e in first["retrieved"])
    resumed = chatapp_exe("ask", "--session", "s", Q2, *ASK)
    [second] = records(resumed)
    assert "session s: 1 attachment restored: typer.md" in resumed.stderr
    assert second["restored_tokens"] > 0  # the transcript re-rendered, retrieved blocks included, matched the state
    assert second["prefill_tokens"] == second["prompt_tokens"] - second["restored_tokens"]
    one_process = records(chatapp_exe("ask", "--attach", doc, Q1, Q2, *ASK))
    assert [first["retrieved"], second["retrieved"]] == [r["retrieved"] for r in one_process]
    assert [first["reply"], second["reply"]] == [r["reply"] for r in one_process]
    assert second["retrieved"] != first["retrieved"]


def test_text_output_names_the_sources_on_stderr(chatapp_exe, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("The staging server is called heron.\nIt listens on port 8443.\n")
    out = chatapp_exe("ask", "--attach", str(notes), "--temperature", "0", "--max-tokens", "8", "Which port?")
    assert out.returncode == 0, out.stderr
    assert "attached notes.txt: 20 tokens, whole" in out.stderr
    assert "retrieved: notes.txt, whole file" in out.stderr


def test_two_attachments_are_both_placed_whole_and_named(chatapp_exe, tmp_path):
    (tmp_path / "notes.txt").write_text("The staging server is called heron.\nIt listens on port 8443.\n")
    (tmp_path / "owners.md").write_text("# Owners\n\nAda runs heron.\n")
    out = chatapp_exe("ask", "--attach", str(tmp_path / "notes.txt"), "--attach", str(tmp_path / "owners.md"),
                      "Who runs the staging server?", *ASK)
    [record] = records(out)
    assert [{k: e[k] for k in ("file", "start_line", "end_line", "score")} for e in record["retrieved"]] == [
        {"file": "notes.txt", "start_line": 1, "end_line": 2, "score": None},
        {"file": "owners.md", "start_line": 1, "end_line": 3, "score": None},
    ]
    for entry in record["retrieved"]:
        assert list(entry) == ["file", "start_line", "end_line", "tokens", "score"]
        assert isinstance(entry["tokens"], int) and entry["tokens"] > 0
    assert "retrieved: notes.txt, whole file, owners.md, whole file" in out.stderr


def test_files_of_one_name_in_two_folders(chatapp_exe, tmp_path):
    for folder, name in (("staging", "heron"), ("production", "egret")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "notes.txt").write_text(f"The {folder} server is called {name}.\n")
    # Attached as folders, each file is named by its path in its folder: both go in, told apart.
    out = chatapp_exe("ask", "--attach", str(tmp_path / "staging"), "--attach", str(tmp_path / "production"),
                      "What are the servers called?", *ASK)
    [record] = records(out)
    assert [(e["file"], e["score"]) for e in record["retrieved"]] == [
        ("staging/notes.txt", None), ("production/notes.txt", None)]
    assert all(list(e) == ["file", "start_line", "end_line", "tokens", "score"] for e in record["retrieved"])
    # Attached as files, each is named by the end of its path that tells them apart, as the
    # folders did: both go in, and neither answer is lost to a name.
    out = chatapp_exe("ask", "--attach", str(tmp_path / "staging" / "notes.txt"),
                      "--attach", str(tmp_path / "production" / "notes.txt"), "What are the servers called?", *ASK)
    [record] = records(out)
    assert [e["file"] for e in record["retrieved"]] == ["staging/notes.txt", "production/notes.txt"]



def test_each_bad_input_fails_in_one_line_before_the_model_loads(chatapp_exe, tmp_path):
    for what, (path, why) in bad_inputs(tmp_path).items():
        # A model that does not exist: only an attachment check that comes first can answer.
        out = chatapp_exe("ask", "--model", str(tmp_path / "no-model.gguf"), "--attach", str(path), "Hello?")
        assert out.returncode == 2, what
        assert out.stdout == "", what
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("chatapp: Attachment: "), (what, out.stderr)
        assert why in lines[0], (what, lines[0])
