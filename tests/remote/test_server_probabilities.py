"""Token probabilities against a real llama-server on the default model: the in-process figures
equal the server's own (`n_probs`, without and with `post_sampling_probs`), the server backend
reports them, and a server that gives none is one line and exit 2.

Both sides run flash attention (the fixture starts the server with -fa on; the local engine asks
for it) and the same thread count, so their logits agree to float rounding.
"""

from __future__ import annotations

import json

import httpx
import pytest

from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions
from chatapp.engine.opening import connect_engine
from chatapp.engine.server import probs
from chatapp.engine.server.backend import SLOT, sampling

from .conftest import N_CTX, SETTINGS

QUESTION = "Describe a lighthouse at night in two sentences."
CHAIN = GenerationSettings(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, max_tokens=24, seed=9, logprobs=10)
GREEDY = GenerationSettings(temperature=0.0, max_tokens=24, logprobs=10)


@pytest.fixture(scope="module")
def local(default_model_path):
    engine = Engine(LocalBackend(LlamaRuntime(default_model_path, LoadOptions(n_ctx=N_CTX, flash_attn=True))), SETTINGS)
    yield engine
    engine.close()


def local_turn(engine: Engine, generation: GenerationSettings):
    engine.new_chat()
    engine.clear_cache()
    engine.generation = generation
    record = list(engine.send(QUESTION))[-1].record
    return record, engine.cached_tokens()[: record.prompt_tokens]


def remote_turn(url: str, generation: GenerationSettings):
    """The question's turn over the server at `url`, from an empty slot."""
    remote = connect_engine(SETTINGS.replace(server=url))
    try:
        remote.clear_cache()
        remote.generation = generation
        return list(remote.send(QUESTION))[-1].record
    finally:
        remote.close()


def test_in_process_raw_probabilities_equal_llama_server_n_probs(local, llama_server):
    """Greedy on both sides (the same tokens): the top 10 raw candidates of every step agree
    within 1e-3, the server's being its n_probs without post_sampling_probs."""
    mine, _prompt = local_turn(local, GREEDY)
    theirs = remote_turn(llama_server.url, GREEDY)
    assert [p.id for p in theirs.probs] == [p.id for p in mine.probs] and len(mine.probs) == 24
    for a, b in zip(mine.probs, theirs.probs):
        assert abs(a.p - b.p) < 1e-3 and a.rank == b.rank == 1
        assert len(a.top) == len(b.top) == 10
        server = {c.id: c.p for c in b.top}
        for c in a.top:
            if c.id in server:
                assert abs(c.p - server[c.id]) < 1e-3, (a.token, c)
            else:  # a tie at the edge of the list may swap which of two ends it
                assert c.p - min(server.values()) < 1e-3
        assert b.entropy is None and a.entropy > 0  # a server does not send the whole distribution


def _next_token(url: str, ids: list[int], generation: GenerationSettings, *, post: bool, n: int) -> list[dict]:
    body = {"prompt": ids, "n_predict": 1, "cache_prompt": True, "id_slot": SLOT, "stream": False,
            **sampling(generation), "n_probs": n, "post_sampling_probs": post}
    answer = httpx.post(f"{url}/completion", json=body, timeout=60).json()
    (entry,) = answer["completion_probabilities"]
    return entry["top_probs" if post else "top_logprobs"]


def test_after_chain_probabilities_equal_llama_server_post_sampling_probs(local, llama_server):
    """At temperature 0.8, top_k 40, top_p 0.9, min_p 0.05: at every step of an in-process reply,
    the server asked for the next token after the same tokens, with post_sampling_probs, gives
    the after-chain probabilities chatapp reported, within 1e-3. The server backend's own
    figures, worked out from the raw top 40 (n_probs), agree too."""
    record, prompt = local_turn(local, CHAIN)
    reply = [p.id for p in record.probs]
    assert len(reply) >= 12
    compared = 0
    for i, step in enumerate(record.probs):
        ids = prompt + reply[:i]
        post = _next_token(llama_server.url, ids, CHAIN, post=True, n=10)
        mine = {c.id: c.p_sampled for c in step.top}
        for c in post:
            assert c["id"] in mine and abs(c["prob"] - mine[c["id"]]) < 1e-3, (i, c)
        kept = [c for c in step.top if c.p_sampled > 1e-3]
        assert {c.id for c in kept} <= {c["id"] for c in post}
        raw = _next_token(llama_server.url, ids, CHAIN, post=False, n=probs.n_probs(CHAIN))
        worked_out = probs.after_chain([c["logprob"] for c in raw], CHAIN)
        assert worked_out is not None
        server = {c["id"]: c["prob"] for c in post}
        for c, p in zip(raw[:10], worked_out[:10]):  # the server lists the first 10 it kept
            assert abs(p - server.get(c["id"], 0.0)) < 1e-3, (i, c)
        compared += 1
    assert compared == len(record.probs)
    assert any(0 < c.p_sampled < 1 for step in record.probs for c in step.top)  # the chain kept several somewhere


def test_the_server_backend_reports_its_tokens_probabilities(llama_server):
    record = remote_turn(llama_server.url, CHAIN)
    assert len(record.probs) == record.generated_tokens > 0
    for step in record.probs:
        assert len(step.top) == 10 and step.rank is not None and step.rank_sampled is not None
        assert 0 < step.p_sampled <= 1 and step.logprob <= 0 and step.entropy is None
        assert sum(c.p_sampled for c in step.top) <= 1 + 1e-6
        kept = [c.p_sampled > 0 for c in step.top]
        assert kept == sorted(kept, reverse=True)  # the chain keeps a prefix of the raw order
    assert "".join(p.token for p in record.probs) == record.reply


def test_a_server_that_gives_no_probabilities_is_one_line_and_exit_2(chatapp_run, proxy):
    proxy.requests["/completion"] = lambda body: {**body, "n_probs": 0}  # as a server that ignores it
    out = chatapp_run("ask", "Hi", "--json", "--logprobs", "3", "--server", proxy.url, "--temperature", "0",
                      "--max-tokens", "6")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr and "gave no token probabilities" in lines[0]
    (record,) = [json.loads(line) for line in out.stdout.splitlines()]  # the turn itself is kept
    assert record["reply"] and "logprobs" not in record


def test_a_branch_over_the_server_prefills_only_the_chosen_token(llama_server):
    remote = connect_engine(SETTINGS.replace(server=llama_server.url))
    try:
        remote.clear_cache()
        remote.generation = GREEDY
        first = list(remote.send(QUESTION))[-1].record
        reply = remote.last_reply_ids()
        forced = reply[:4] + [first.probs[4].top[1].id]
        record = list(remote.regenerate(forced=forced))[-1].record
        assert remote.last_reply_ids()[:5] == forced
    finally:
        remote.close()
    assert record.prefill_tokens == 1 and record.cached_tokens == first.prompt_tokens + 4
    assert record.extra["forced_prefilled"] == 1 and record.reply.startswith("".join(p.token for p in first.probs[:4]))


def test_the_sampler_views_last_stage_equals_llama_server_post_sampling_probs(default_model_path, llama_server):
    """The sampler chain view (`chatapp sampler`, the palette's "sampler chain") replays a reply
    with llama.cpp's samplers one at a time; at every reply token its last stage, the
    distribution the draw is made from, equals the server's post_sampling_probs within 1e-3."""
    from chatapp.engine.local.next_token import NextTokenViews

    views = NextTokenViews.load(default_model_path, SETTINGS.replace(flash_attn="on"), n_ctx=N_CTX)
    try:
        rt = views.runtime
        rendered = rt.render_chat([{"role": "system", "content": SETTINGS.system_prompt},
                                   {"role": "user", "content": QUESTION}], add_generation_prompt=True)
        prompt = rt.tokenize(rendered, special=True, add_bos=rt.adds_bos)
        chain = {"temperature": CHAIN.temperature, "top_k": CHAIN.top_k, "top_p": CHAIN.top_p, "min_p": CHAIN.min_p,
                 "seed": CHAIN.seed}
        reply = views.generate(prompt, max_tokens=16, **chain)
        replay = views.replay_chain(prompt, reply, **chain)
    finally:
        views.close()
    assert replay.matches == (len(reply), len(reply)) and len(reply) >= 8
    several = 0
    for i, step in enumerate(replay.steps):
        last = step.stages[-1]
        assert last.name == "dist"
        post = _next_token(llama_server.url, prompt + reply[:i], CHAIN, post=True, n=10)
        assert len(post) == min(10, last.kept)
        mine = {c.id: c.p for c in last.top}
        for c in post:
            assert c["id"] in mine and abs(c["prob"] - mine[c["id"]]) < 1e-3, (i, c, last.top)
        several += last.kept > 1
    assert several  # the chain kept more than one candidate somewhere: the probabilities were compared
