"""The keys `chatapp ask --json` prints (tests/cli/test_core_cli.py, tests/remote/test_server_cli.py)."""

from __future__ import annotations


ASK_KEYS = {"reply", "prompt_tokens", "cached_tokens", "prefill_tokens", "prefill_ms", "prefill_tps", "ttft_ms",
            "decode_tokens", "decode_ms", "decode_tps", "kv_used", "n_ctx", "kv_bytes_per_token", "dropped_turns",
            "model", "quant", "backend"}
