"""`chatapp neighbours` end to end through the installed script, on the real default model."""

import json

WEEKDAYS = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}


def test_json_lists_id_piece_and_score(chatapp_exe):
    out = chatapp_exe("neighbours", "Monday", "--k", "6", "--json")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert len(found) == 6 and all(set(n) == {"id", "piece", "score"} for n in found)
    assert {n["piece"].strip() for n in found} & (WEEKDAYS - {"Monday"})
    assert out.stderr == ""  # one token: nothing to explain


def test_several_tokens_say_which_one_is_shown(chatapp_exe):
    out = chatapp_exe("neighbours", " 7", "--k", "5", "--json")
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "the text is 2 tokens (1:'·' 2:'7'); showing token 2; --token N picks another"
    assert sum(n["piece"].isdigit() for n in json.loads(out.stdout)) >= 4
    picked = chatapp_exe("neighbours", " 7", "--token", "1", "--k", "5", "--json")
    assert picked.returncode == 0 and "showing token 1" in picked.stderr
    assert json.loads(picked.stdout) != json.loads(out.stdout)


def test_table_output(chatapp_exe):
    out = chatapp_exe("neighbours", "January", "--k", "3")
    assert out.returncode == 0, out.stderr
    assert "Nearest to 'January'" in out.stdout and "cosine" in out.stdout and "February" in out.stdout


def test_bad_input_is_one_line_with_exit_2(chatapp_exe):
    for args, message in [
        (("neighbours", ""), "chatapp: Input: the text is empty"),
        (("neighbours", "x", "--k", "0"), "chatapp: Input: --k must be between 1 and 1000, got 0"),
        (("neighbours", " 7", "--token", "3"), "chatapp: Input: --token must be between 1 and 2"),
        (("neighbours", "x", "--model", "nope"), "chatapp: Model: unknown model 'nope'"),
    ]:
        result = chatapp_exe(*args)
        assert result.returncode == 2, result
        assert message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_one_token_is_one_token(chatapp_exe):
    out = chatapp_exe("neighbours", "x", "--token", "2")
    assert out.returncode == 2
    assert out.stderr == "chatapp: Input: --token must be between 1 and 1: the text has 1 token\n"
    out = chatapp_exe("tokenize", "x")
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "1 token · ids: 104"


def test_a_token_whose_embedding_is_not_finite_is_one_line_not_nan(chatapp_exe, default_model_path, tmp_path):
    """A copy of the default model whose token_embd row for "Monday" has a block scaled by
    infinity (a damaged or hostile file): `--json` printed NaN, which is not JSON."""
    import shutil

    import numpy as np

    from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
    from chatapp.engine.models.gguf_header import read_header

    runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=256))
    try:
        [monday] = runtime.tokenize("Monday", special=False, add_bos=False)
    finally:
        runtime.close()
    copy = tmp_path / "damaged.gguf"
    shutil.copyfile(default_model_path, copy)
    header = read_header(copy)
    tensor = next(t for t in header.tensors if t.name == "token_embd.weight")
    n_embd = tensor.shape[0]
    row_bytes = n_embd // 32 * 34  # Q8_0: per 32 values an f16 scale, then 32 int8s
    with open(copy, "r+b") as model:
        model.seek(header.data_offset + tensor.offset + monday * row_bytes)
        model.write(np.float16(np.inf).tobytes() + bytes([1] * 32))  # inf × 1: infinite values
    out = chatapp_exe("neighbours", "Monday", "--model", str(copy), "--json")
    assert out.returncode == 2 and out.stdout == "", out.stdout[:300]
    assert out.stderr == (f"chatapp: Model: the token_embd.weight row of token {monday} holds NaN or infinite "
                          "values, so it is similar to nothing\n")
