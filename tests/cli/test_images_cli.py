"""`chatapp ask --image` on the real default model with a synthetic projector beside it (issue 55):
the session keeps the image, a resume encodes nothing and answers as one run of both questions
does, and every bad input is one line before or after the model loads."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.cli.conftest import records
from tests.engine.local.vision import build_projector, picture

FIRST, SECOND = "What is in this picture?", "Is it a boat?"
ASK = ("--json", "--threads", "1", "-n", "6", "--temperature", "0")


@pytest.fixture(scope="module")
def vision_model(tmp_path_factory, default_model_path):
    folder = tmp_path_factory.mktemp("vision")
    model = folder / default_model_path.name
    model.symlink_to(default_model_path)
    build_projector(folder / "mmproj-SmolLM2-135M-Instruct-f16.gguf")
    (folder / "boat.png").write_bytes(picture(5))
    return model


def test_a_resumed_chat_about_an_image_encodes_nothing_and_answers_as_one_run(chatapp_exe, vision_model, tmp_path):
    image = str(vision_model.parent / "boat.png")
    first = chatapp_exe("ask", "-m", str(vision_model), "--image", image, FIRST, "--session", "pic", *ASK)
    [turn1] = records(first)
    assert (turn1["images"], turn1["image_tokens"], turn1["image_encodes"]) == (1, 16, 1)
    assert "image boat.png 40x48: 16 image tokens" in first.stderr
    resumed = chatapp_exe("ask", "-m", str(vision_model), SECOND, "--session", "pic", *ASK)
    [turn2] = records(resumed)
    assert turn2["image_encodes"] == 0 and turn2["restored_tokens"] >= turn1["prompt_tokens"]
    assert turn2["prefill_tokens"] == turn2["prompt_tokens"] - turn2["cached_tokens"] < 20

    one_run = records(chatapp_exe("ask", "-m", str(vision_model), "--image", image, FIRST, SECOND,
                                  "--session", "together", *ASK))
    assert [r["reply"] for r in one_run] == [turn1["reply"], turn2["reply"]]
    assert [r["image_encodes"] for r in one_run] == [1, 0]

    shown = chatapp_exe("sessions", "show", "pic")
    assert f"[image boat.png]\n{FIRST}" in shown.stdout
    exported = json.loads(chatapp_exe("sessions", "export", "pic", "--format", "json").stdout)
    question = next(m for m in exported["messages"] if m["role"] == "user")
    assert question["images"] == [{"sha256": turn1_sha(tmp_path), "name": "boat.png"}]


def turn1_sha(tmp_path) -> str:
    """The image's hash as the session database keeps it, beside its bytes."""
    database = tmp_path / "data" / "chatapp" / "sessions" / "sessions.db"
    assert database.is_file()
    with sqlite3.connect(database) as conn:
        [(sha, data)] = conn.execute("SELECT sha256, data FROM images WHERE session_id ="
                                     " (SELECT id FROM sessions WHERE name = 'pic')").fetchall()
    assert data == picture(5)
    return sha


@pytest.mark.parametrize("case", ["not an image", "no file", "a folder", "no projector", "no mmproj file",
                                  "another model's projector"])
def test_each_bad_image_input_is_one_line(chatapp_exe, vision_model, default_model_path, tmp_path, case):
    image, model, extra = str(vision_model.parent / "boat.png"), str(vision_model), []
    if case == "not an image":
        (tmp_path / "notes.png").write_text("hello")
        image = str(tmp_path / "notes.png")
    elif case == "no file":
        image = str(tmp_path / "gone.png")
    elif case == "a folder":
        image = str(tmp_path)
    elif case == "no projector":
        model = str(default_model_path)
    elif case == "no mmproj file":
        extra = ["--mmproj", str(tmp_path / "gone.gguf")]
    else:
        extra = ["--mmproj", str(build_projector(tmp_path / "mmproj-other.gguf", n_embd=512))]
    out = chatapp_exe("ask", "-m", model, "--image", image, *extra, FIRST, "--incognito", "-n", "2")
    expected = {"not an image": "notes.png is not an image libmtmd reads", "no file": "no image file at",
                "a folder": "is not a file", "no projector": "does not see images",
                "no mmproj file": "no projector file at",
                "another model's projector": "is the projector of another model"}[case]
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.startswith("chatapp:")]
    assert len(lines) == 1 and expected in lines[0], out.stderr
    assert "Traceback" not in out.stderr and not out.stdout
