"""`ask --logprobs N` without --json prints each reply token's probability and its alternatives,
readable, after the reply: the same figures the JSON gives."""

from __future__ import annotations

import json
import math

from chatapp.format import visible_piece
from tests.cli.conftest import records


def test_logprobs_without_json_prints_the_alternatives_readably(chatapp_exe):
    args = ("ask", "--logprobs", "3", "-n", "5", "--threads", "2", "--temp", "0", "Name a colour.")
    shown = chatapp_exe(*args)
    assert shown.returncode == 0, shown.stderr
    data = records(chatapp_exe(*args, "--json"))[0]
    lines = shown.stdout.splitlines()
    start = lines.index("token probabilities (the model's own; candidates most likely first):")
    rows = lines[start + 1:]
    assert len(rows) == len(data["logprobs"]) == 5
    for row, step in zip(rows, data["logprobs"]):
        assert row.lstrip().startswith(repr(visible_piece(step["token"])))  # spaces shown as ·
        assert f"{math.exp(step['logprob']):.1%}" in row
        others = [c for c in step["top"] if c["id"] != step["id"]]
        assert all(f"{math.exp(c['logprob']):.1%}" in row for c in others)
    assert json.dumps(data)  # the JSON run is unchanged
