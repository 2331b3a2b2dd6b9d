"""GPU offload check: the engine on a GPU build of llama-cpp-python, all layers offloaded against none.

For a machine with a GPU (CI has none). For each of n_gpu_layers -1 (all) and 0 it loads the
model, runs two greedy turns (the second reuses the first's cache), saves the KV state with
llama.cpp's sequence-state functions, restores it and runs a third turn, and prints what the
runtime reports, the speeds, and whether the cache bookkeeping matches llama.cpp's cells.

    python benchmarks/gpu_offload.py [MODEL.gguf]   # default: the catalog's default model
"""
import sys
import time
from pathlib import Path

from chatapp.config import Settings
from chatapp.engine.backend import GenerationSettings
from chatapp.engine.chat.engine import Engine
from chatapp.engine.local.backend import LocalBackend
from chatapp.engine.events import TurnDone
from chatapp.engine.local.llama import LlamaRuntime, LoadOptions, backend_name, gpu_offload_supported

if len(sys.argv) > 1:
    MODEL = Path(sys.argv[1])
else:
    from chatapp.engine.models.resolve import resolve_model

    MODEL = resolve_model()
GREEDY = GenerationSettings(temperature=0.0, max_tokens=96)
print("offload supported:", gpu_offload_supported(), "| backend:", backend_name())


def turn(chat, text):
    for event in chat.send(text):
        if isinstance(event, TurnDone):
            return event.record


replies = {}
for layers in (-1, 0):
    start = time.perf_counter()
    rt = LlamaRuntime(MODEL, LoadOptions(n_ctx=2048, n_gpu_layers=layers, n_threads=8))
    print(f"\n== n_gpu_layers={layers}: loaded in {time.perf_counter() - start:.2f}s: {rt.info}")
    chat = Engine(LocalBackend(rt), Settings(n_ctx=2048, system_prompt="Be brief."))
    chat.generation = GREEDY
    for name, text in (("turn 1", "Tell me a story about a lighthouse keeper."), ("turn 2", "And then what happened?")):
        r = turn(chat, text)
        if name == "turn 1":
            first = r
        print(f"{name}: prompt {r.prompt_tokens} cached {r.cached_tokens} prefill {r.prefill_tokens} tok "
              f"{r.prefill_tps:.0f} tok/s | decode {r.decode_tokens} tok {r.decode_tps:.0f} tok/s | kv {r.kv_used} "
              f"= cells {rt.kv_cells_used()} = bookkeeping {rt.n_cached}")
    replies[layers] = first.reply
    payload, tokens = rt.seq_state(), rt.kv_tokens
    rt.clear_kv()
    restored = rt.restore_seq_state(payload, tokens)
    third = turn(chat, "How did it end?")
    print(f"state {len(payload):,} bytes restored={restored}; turn 3 after restore: cached {third.cached_tokens} "
          f"of {third.prompt_tokens}, prefill {third.prefill_tokens}")
    rt.close()
print("\nturn 1 reply, GPU:", repr(replies[-1][:100]))
print("turn 1 reply, CPU:", repr(replies[0][:100]))
print("GPU and CPU greedy replies identical:", replies[-1] == replies[0])
