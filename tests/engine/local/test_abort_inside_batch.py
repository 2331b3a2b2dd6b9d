"""A stop reaches llama.cpp inside one running batch (issue 58): its abort callback is asked
between graph nodes, so a stop during a single large prefill batch abandons it part way, and
what llama.cpp kept (its cells) is exactly what the runtime counts, not the whole batch and not
a chunk boundary of chatapp's own."""

from __future__ import annotations

from chatapp.engine.local.llama import LlamaRuntime, LoadOptions

N_BATCH = 2048
"""One batch that llama.cpp runs as several ubatches of its own (512 each by default)."""


def test_a_stop_inside_one_batch_abandons_it_and_the_cells_agree(default_model_path):
    runtime = LlamaRuntime(default_model_path, LoadOptions(n_ctx=N_BATCH, n_batch=N_BATCH, n_threads=2,
                                                           n_threads_batch=2))
    try:
        text = " ".join(f"Line {i}: the keeper trimmed the wick and wrote in the log." for i in range(110))
        tokens = runtime.tokenize(text, special=False)[:1500]
        assert len(tokens) == 1500
        # The control: never saying stop, the callback is asked throughout the batch, which completes.
        asked = []
        assert runtime.prefill(tokens, should_stop=lambda: bool(asked.append(1)))
        assert len(asked) > 40 and runtime.kv_cells_used() == runtime.n_cached == len(tokens)
        runtime.keep_kv_prefix(0)
        asked.clear()

        def stop_after_some_nodes() -> bool:  # a stop that arrives while the batch is running
            asked.append(1)
            return len(asked) > 40

        finished = runtime.prefill(tokens, should_stop=stop_after_some_nodes)
        assert not finished and len(asked) > 40  # asked inside llama_decode, and it gave up there
        kept = runtime.n_cached
        assert 0 <= kept < len(tokens)  # not the whole batch: the stop came in the middle of it
        assert runtime.kv_cells_used() == kept and runtime.kv_tokens == tokens[:kept]
        # The rest goes on from there, and the cache is then the whole text.
        assert runtime.prefill(tokens[kept:])
        assert runtime.kv_cells_used() == runtime.n_cached == len(tokens)
    finally:
        runtime.close()
