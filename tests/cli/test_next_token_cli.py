"""`chatapp perplexity`, `chatapp lens` and `chatapp sampler` end to end through the installed
script, on the real default model."""

import json
import math
import re


def test_perplexity_json_gives_each_tokens_surprise_and_the_perplexity(chatapp_exe, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The cat sat on the mat. " * 6 + "\n")
    out = chatapp_exe("perplexity", str(text), "--ctx", "16", "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    tokens = found["tokens"]
    assert set(tokens[0]) == {"id", "piece", "surprise"} and tokens[0]["surprise"] is None
    assert "".join(t["piece"] for t in tokens) == text.read_text()
    surprise = [t["surprise"] for t in tokens[1:]]
    assert all(s >= 0 for s in surprise) and found["scored"] == len(surprise)
    assert math.isclose(found["ppl"], math.exp(sum(surprise) / len(surprise)), rel_tol=1e-4)
    assert found["ctx"] == 16 and found["llama_perplexity"] is not None  # 2 full windows: its estimate
    # the repeats are predictable: the last sentences surprise less than the first
    assert sum(surprise[-8:]) < sum(surprise[:8])
    estimate = json.loads(chatapp_exe("perplexity", str(text), "--ctx", "16", "--estimate", "--json").stdout)
    counted = [t["surprise"] for t in estimate["tokens"] if t["surprise"] is not None]
    assert len(counted) == estimate["scored"] == found["llama_perplexity"]["scored"]
    assert math.isclose(estimate["ppl"], found["llama_perplexity"]["ppl"], rel_tol=1e-4)


def test_perplexity_strip_and_refusals(chatapp_exe, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Hello there, how are you today?")
    out = chatapp_exe("perplexity", str(text))
    assert out.returncode == 0, out.stderr
    # piped, no colour shows a shade: each shaded token says its own after it, and the legend too
    strip = out.stdout.splitlines()[0]
    marks = re.findall("⁽[¹²³]⁾", strip)
    assert marks and re.sub("⁽[¹²³]⁾", "", strip) == "Hello there, how are you today?"
    assert "perplexity" in out.stdout and "very surprising⁽³⁾" in out.stdout
    for args, message in [(("perplexity", str(tmp_path / "missing.txt")), "chatapp: Input: cannot read"),
                          (("perplexity", str(text), "--ctx", "4"), "chatapp: Input: --ctx must be at least 16")]:
        bad = chatapp_exe(*args)
        assert bad.returncode == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_hostile_inputs_to_perplexity_and_lens_are_one_line_each(chatapp_exe, tmp_path, default_model_path):
    """A device read without end, a named pipe nobody writes to (a wait without end, before), a
    folder, a text past the cap and a one-token text for --token: one line, exit 2, at once."""
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    with big.open("wb") as out:  # sparse: past the cap without writing 32 MiB
        out.truncate(33 * 2**20)
    cases = [(("perplexity", "/dev/zero"), "cannot read /dev/zero: it is a character device, not a regular file; "
                                           "pipe it in as -"),
             (("perplexity", str(fifo)), "it is a named pipe, not a regular file; pipe it in as -"),
             (("perplexity", str(tmp_path)), "it is a directory, not a regular file"),
             (("perplexity", str(big)), "it is 33 MiB, more than the 32 MiB chatapp reads of it"),
             (("lens", "hello", "--token", "9"), "--token needs a text of at least 2 tokens (this one is 1)"),
             (("lens", "The sky is", "--token", "99999999999999999999"),
              "--token must be between 2 and 3 (the text's tokens), got 99999999999999999999"),
             # a negative window crashed llama.cpp (SIGSEGV) before; one past the training context
             # measured positions the model never saw, and said "windows of 100000000"
             *((("perplexity", str(tmp_path / "words.txt"), f"--ctx={ctx}"), message) for ctx, message in (
                 (-5, "--ctx must be at least 16, got -5"), (0, "--ctx must be at least 16, got 0"))),
             (("perplexity", str(tmp_path / "words.txt"), "--ctx", "100000000"),
              "--ctx 100,000,000 is above the model's training context of 8,192 tokens"),
             (("perplexity", str(tmp_path / "words.txt"), "--ctx", "-5", "--compare", str(default_model_path)),
              "--ctx must be at least 16, got -5")]
    (tmp_path / "words.txt").write_text("The quick brown fox jumps over the lazy dog. " * 20)
    for args, message in cases:
        bad = chatapp_exe(*args)
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1 and not bad.stdout, (args, bad.stderr)


def test_lens_json_ends_in_the_models_own_logits(chatapp_exe):
    out = chatapp_exe("lens", "The capital of France is", "--k", "3", "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert len(found["layers"]) == 30 and [layer["layer"] for layer in found["layers"]] == list(range(30))
    assert all(set(c) == {"id", "piece", "p"} for layer in found["layers"] for c in layer["top"])
    last = found["layers"][-1]["top"]
    assert [c["id"] for c in last] == [c["id"] for c in found["logits_top"]]
    assert all(abs(a["p"] - b["p"]) < 1e-3 for a, b in zip(last, found["logits_top"]))
    assert found["token"]["id"] == found["logits_top"][0]["id"] and not found["token"]["given"]
    given = json.loads(chatapp_exe("lens", "The capital of France is Paris", "--token", "6", "--json").stdout)
    assert given["token"]["piece"] == " Paris" and given["token"]["given"]


def test_sampler_json_replays_the_drawn_reply_stage_by_stage(chatapp_exe):
    out = chatapp_exe("sampler", "Name a colour.", "--seed", "9", "--temperature", "1.0", "--max-tokens", "12",
                      "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["settings"]["seed"] == 9 and found["matches"]["equal"] == found["matches"]["compared"] > 0
    step = found["steps"][0]
    assert [s["stage"] for s in step["stages"]] == ["top_k", "top_p", "min_p", "temperature", "dist"]
    assert step["stages"][0]["kept"] <= 40
    again = json.loads(chatapp_exe("sampler", "Name a colour.", "--seed", "9", "--temperature", "1.0",
                                   "--max-tokens", "12", "--json").stdout)
    assert again["reply"] == found["reply"]  # the same seed, the same draw
    table = chatapp_exe("sampler", "Name a colour.", "--seed", "9", "--max-tokens", "6", "--token", "1")
    assert table.returncode == 0, table.stderr
    assert "Token 1" in table.stdout and "min_p" in table.stdout and "no repetition penalty" in table.stdout


def test_perplexity_compare_against_the_same_file_costs_nothing(chatapp_exe, tmp_path, default_model_path):
    text = tmp_path / "text.txt"
    text.write_text("The cat sat on the mat. " * 6)
    out = chatapp_exe("perplexity", str(text), "--ctx", "16", "--compare", str(default_model_path), "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["kld_mean"] == 0 and found["same_top"] == 1 and found["compare"]["ppl"] == found["ppl"]
    assert all(t["kld"] == 0 and t["same_top"] for t in found["tokens"][1:])
    size = default_model_path.stat().st_size
    assert [f["size_bytes"] for f in found["files"]] == [size, size] and found["files"][1]["name"] == str(
        default_model_path)
    shown = chatapp_exe("perplexity", str(text), "--ctx", "16", "--compare", str(default_model_path))
    assert shown.returncode == 0, shown.stderr
    assert "KL divergence: the same (KLD < 0.01)" in shown.stdout and "the same top token at 100.0%" in shown.stdout
    assert shown.stdout.count("93.8 MiB, decodes") == 2
