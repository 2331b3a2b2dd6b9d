"""A scripted stand-in for LlamaRuntime, only for UI snapshots, which need identical text
and figures on every run. Feature tests use the real model.

It speaks ChatML, cuts text into words, answers with a fixed reply, and books fixed times
into its counters (4 ms per prefilled token, 10 ms per decoded token).
"""

from __future__ import annotations

import re

from chatapp.engine.llama import PerfCounters, RuntimeInfo

SPECIALS = {"<|im_start|>": 1, "<|im_end|>": 2}
WORD = re.compile(r"<\|im_(?:start|end)\|>|\s*[^\s<]+|\s+|<")
REPLY = ("Prefill reads the whole prompt in parallel; **decode** then adds one token at a time.\n\n"
         "- the KV cache keeps what was computed\n- quantization shrinks the weights")


class ScriptedSampler:
    def __init__(self, runtime: "ScriptedRuntime"):
        self._runtime = runtime

    def sample(self) -> int:
        return self._runtime.next_reply_token()

    def close(self) -> None:
        pass


class ScriptedRuntime:
    def __init__(self, n_ctx: int = 4096, reply: str = REPLY):
        self.info = RuntimeInfo(backend="CPU", gpu_offload=False, layers_offloaded=0, n_layer=30, n_threads=2,
                                n_ctx=n_ctx, kv_type="f16", flash_attn=False)
        self.metadata = {"general.architecture": "llama", "general.name": "scripted"}
        self.kv_bytes_per_token = 23040
        self.adds_bos = False
        self.bos_id = 0
        self._words: dict[str, int] = {"": 0, **SPECIALS}
        self._by_id: dict[int, str] = {v: k for k, v in self._words.items()}
        self._kv: list[int] = []
        self._reply = self.tokenize(reply, special=False)
        self._reply_pos = 0
        self._counters = [0.0, 0, 0.0, 0]

    @property
    def n_ctx(self) -> int:
        return self.info.n_ctx

    def tokenize(self, text: str, *, special: bool, add_bos: bool = False) -> list[int]:
        ids = []
        for word in WORD.findall(text):
            literal = word in SPECIALS and not special
            ids.append(self._id(word, literal))
        return ids

    def _id(self, word: str, literal: bool = False) -> int:
        key = "\0" + word if literal else word  # special-token text typed by a user stays plain text
        if key not in self._words:
            self._words[key] = len(self._words) + 100
            self._by_id[self._words[key]] = word
        return self._words[key]

    def token_bytes(self, token: int) -> bytes:
        return self._by_id.get(token, "").encode()

    def is_special(self, token: int) -> bool:
        return token in (1, 2)

    def is_end_of_generation(self, token: int) -> bool:
        return token == 2

    def render_chat(self, messages, *, add_generation_prompt: bool) -> str:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    @property
    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    def kv_cells_used(self) -> int:
        return len(self._kv)

    @property
    def n_cached(self) -> int:
        return len(self._kv)

    def keep_kv_prefix(self, n: int) -> None:
        del self._kv[n:]

    def clear_kv(self) -> None:
        self._kv.clear()

    def eval(self, tokens: list[int]) -> None:
        self._kv.extend(tokens)
        if len(tokens) > 1:
            self._counters[0] += 4.0 * len(tokens)
            self._counters[1] += len(tokens)
        else:
            self._counters[2] += 10.0
            self._counters[3] += 1

    def sampler(self, **_settings) -> ScriptedSampler:
        self._reply_pos = 0
        return ScriptedSampler(self)

    def next_reply_token(self) -> int:
        if self._reply_pos >= len(self._reply):
            return 2
        self._reply_pos += 1
        return self._reply[self._reply_pos - 1]

    def perf(self) -> PerfCounters:
        return PerfCounters(*self._counters)

    def reset_perf(self) -> None:
        self._counters = [0.0, 0, 0.0, 0]

    def seq_state(self) -> bytes:
        return bytes(len(self._kv))

    def restore_seq_state(self, payload: bytes, tokens: list[int]) -> bool:
        self._kv = list(tokens)
        return True

    def close(self) -> None:
        pass
