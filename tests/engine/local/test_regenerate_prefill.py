"""A regenerate of the last turn computes nothing of the unchanged question again (issue 59):
the cache is cut back to the prompt's end and the logits its prefill left are given back."""

from chatapp.engine.backend import GenerationSettings

from tests.engine.conftest import make_engine, run_turn, runtime_of


def test_regenerate_prefills_nothing_and_repeats_a_greedy_reply(runtime):
    chat = make_engine(runtime, "Be brief.", GenerationSettings(temperature=0.0, max_tokens=24))
    run_turn(chat, "Name a colour.")
    _, second = run_turn(chat, "Name another colour.")
    assert second.prefill_tokens > 1  # the second question was computed once, by its own turn
    runtime.reset_perf()
    again = list(chat.regenerate())[-1].record
    assert again.prefill_tokens == 0
    assert again.cached_tokens == again.prompt_tokens == second.prompt_tokens
    assert runtime.perf().prompt_tokens == 0  # llama.cpp's own counter: no prefill batch ran
    assert again.reply == second.reply  # sampled from the very logits the first reply was


def test_a_cache_changed_under_it_is_prefilled_as_before(runtime):
    """The control: once the rows are gone (a cleared cache), the prompt is prefilled again."""
    chat = make_engine(runtime, "Be brief.", GenerationSettings(temperature=0.0, max_tokens=24))
    _, first = run_turn(chat, "Name a colour.")
    chat._backend.clear_cache()  # test-only: what a restore from elsewhere would do to the rows
    again = list(chat.regenerate())[-1].record
    assert again.prefill_tokens == first.prompt_tokens
    assert again.reply == first.reply


def test_a_second_regenerate_prefills_nothing_either(runtime):
    chat = make_engine(runtime, "", GenerationSettings(temperature=0.7, max_tokens=16, seed=3))
    _, first = run_turn(chat, "Tell me a word.")
    counts = [list(chat.regenerate())[-1].record.prefill_tokens for _ in range(2)]
    assert counts == [0, 0]
    assert len(runtime_of(chat).kv_tokens) >= first.prompt_tokens
