"""Typed settings read from a TOML file at a platformdirs path.

There is no module-level instance: callers load settings when they need them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import tomllib
import unicodedata
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, get_args

import tomlkit
from tomlkit.exceptions import TOMLKitError

from chatapp import paths
from chatapp.errors import ConfigError
from chatapp.private import make_private_dir

KVType = Literal["f16", "q8_0", "q4_0"]
"""The KV-cache types chatapp offers: the one list the CLI, the config and the engine share."""
KV_TYPES: tuple[str, ...] = get_args(KVType)
DraftMode = Literal["ngram", "off"]
"""Speculative decoding: "ngram" drafts by prompt lookup (chatapp.engine.drafting.lookup) and verifies
the drafts in one batch; "off" decodes one token a step. The one list the CLI, the config and
the engine share."""
DRAFT_MODES: tuple[str, ...] = get_args(DraftMode)
FlashAttn = Literal["auto", "on", "off"]
ThinkingHistory = Literal["template", "keep"]
"""A thinking model's earlier thoughts in the prompt: "template" renders them as its template
does (Qwen3's and R1's drop them, so the next turn prefills the previous reply again); "keep"
renders each as it was generated, so the cache holds a prefix of the next turn
(chatapp.engine.thinking). The one list the CLI, the config and the engine share."""
THINKING_HISTORIES: tuple[str, ...] = get_args(ThinkingHistory)
FLASH_ATTN_MODES: tuple[str, ...] = get_args(FlashAttn)
DEFAULT_DRAFT: DraftMode = "off"
"""The default for `draft`, the one place it is set. On ("ngram") only where drafting never
loses on open chat (>= 0.98x of plain decode) and wins on copying (>= 1.3x, and >= llama-server's
best n-gram drafter). With the same q8_0 cache it does both here (benchmarks/spec_vs_llama_server.py:
copy set 1.61-1.80x, every copy task ahead of llama-server's best drafter; chat 0.994-1.099x
against the same loop drafting nothing, benchmarks/speculative.py --same-loop). But it must load
that cache with flash attention instead of the default f16 without, and that configuration's plain
decode ran 0.889x the default's after 2,183 tokens of context: a long reply that copies nothing
would lose a tenth (README, "Where the time went")."""
MAX_DRAFT_TOKENS = 64
"""The most draft tokens one step may verify (draft_max's ceiling). Long drafts pay only while a
reply copies verbatim (llama.cpp's own n-gram drafters propose 48 to 64 tokens then), and each
costs a row of logits; the policy sizes each step's draft from measured costs and acceptance."""
SECRET_SETTINGS = ("api_key",)
"""Settings whose values are never shown: `config show` masks them, errors leave them out."""
ENV_SETTINGS = {"server": "CHATAPP_SERVER", "api_key": "CHATAPP_API_KEY"}
"""Settings an environment variable overrides (a non-empty one beats the config file)."""
TABLE_SECTIONS = ("tools", "mcp_servers", "presets")
"""Tables of the config file that are not Settings: the tools' (chatapp.engine.tools.servers reads them)
and the presets' (chatapp.presets reads them)."""


@dataclass(frozen=True)
class Settings:
    model: str = "smollm2-135m-instruct"
    """A catalog name or a path to a GGUF file."""
    n_ctx: int = 4096
    """Context window in tokens: the KV cache's capacity (rounded up to a multiple of 256)."""
    allow_long_ctx: bool = False
    mmproj: str = ""
    """A vision model's projector (an mmproj GGUF) to read images with; empty: the mmproj-*.gguf
    beside the model, if there is one (chatapp.engine.models.projector)."""
    image_max_tokens: int = 0
    """The most tokens one image may cost, for projectors that scale images to a budget
    (libmtmd's image_max_tokens); 0: the projector's own."""
    """Allow an n_ctx above the model's training context (quality may degrade past it)."""
    threads: int = 0
    """CPU threads; 0 means the number of physical cores."""
    gpu_layers: int = -1
    """Layers to offload to the GPU; -1 means all, when the build supports it."""
    kv_type: KVType = "f16"
    """KV-cache type: f16, q8_0 or q4_0 (the quantized ones need flash attention)."""
    flash_attn: FlashAttn = "auto"
    """Flash attention: on, off, or auto (off for an f16 cache on the CPU, on with a GPU or a
    quantized cache, which needs it). Measured here with llama.cpp's own llama-bench (2 threads,
    the default model): on the CPU it helps only an empty context (decode 209 vs 172 tok/s) and
    loses from 256 tokens on (decode 92 vs 146 tok/s at 256, 32 vs 73 at 2,048; a 16-token
    prefill at 2,048: 42 vs 191 tok/s), where llama.cpp's "auto" turns it on. Drafting loads a
    q8_0 cache with it on (chatapp.engine.local.drafting): its verify batches need that."""
    draft: DraftMode = DEFAULT_DRAFT
    """Speculative decoding in-process: ngram (prompt lookup) or off. Replies are the same
    either way (greedy ones byte for byte); drafting backs off by itself when drafts miss. It
    needs flash attention, and the llama-server backend does not draft."""
    draft_max: int = 48
    """The most draft tokens one decode step verifies (1 to 64); the engine verifies fewer when
    its measured costs say more would not pay. 48, as llama.cpp's ngram-simple drafts: a verbatim
    copy pays most in long batches (on two cores here a batch of 49 costs 21.5 single steps, of 33
    15.3, of 17 8.6), and at 32 a 102-token paragraph copy took 14 steps where llama-server's
    ngram-simple took 12. Replayed without timing noise (benchmarks/draft_replay.py), 48 against
    32: paragraph 1.060 (13 steps), list 1.023, rename 1.001, quote 0.999, config 0.990, chat the
    same; cold paired runs of the paragraph copy, 6 rounds: 1.054. Past 32, only a reply quoting
    the prompt from its first token bets so far (chatapp.engine.drafting.policy.COPY_DRAFTS)."""
    prefill_while_typing: bool = True
    """Prefill the next prompt while its question is typed, so Enter leaves only the last few
    tokens to prefill; replies are the same either way (chatapp.engine.chat.typeahead). Over
    a llama-server it fills the server's prompt cache (requests with n_predict 0)."""
    think_budget: int = -1
    """A thinking model's most thought tokens per reply: past them the closing marker is forced
    and the model answers (llama-server's --reasoning-budget). -1: no budget; 0: no thought."""
    think_budget_message: str = ""
    """Text forced into the thought before its close when the budget runs out, as llama-server's
    --reasoning-budget-message (e.g. "Time is up, I must answer now."); "" for none."""
    think_more: int = 0
    """Thought tokens that think more (Ctrl+F) adds to a reply's thought. 0: the thinking budget,
    or 256 without one. `ask --think-more N` says N itself."""
    thinking_history: ThinkingHistory = "template"
    """Earlier replies' thoughts in the prompt: "template" (as the model's template renders
    them, usually dropped) or "keep" (as generated, so the cache is reused)."""
    incognito: bool = False
    """Keep no chat: one is saved only when you save it as a session (F6). Off, every chat in
    the TUI and every `ask` is a session from its first turn, named after its first question
    (F6 renames it)."""
    temperature: float = 0.7
    top_p: float = 0.95
    """0 to 1; 1 turns it off."""
    top_k: int = 40
    """0 turns it off."""
    min_p: float = 0.05
    """0 to 1; 0 turns it off."""
    max_tokens: int = 512
    seed: int = -1
    """-1 picks a random seed per run."""
    system_prompt: str = "You are a helpful assistant."
    theme: str = "chatapp-dark"
    state_cap_mb: int = 2048
    """Cap on the total size of saved KV-cache states; least recently used go first. 0 keeps none."""
    branch_state_mb: int = 256
    """Memory kept for the KV states of branches recently left, so switching back restores
    instead of prefilling again; least recently used go first. 0 keeps none in memory."""
    server: str = ""
    """URL of a llama-server to run the model on (http:// or https://); empty runs llama.cpp
    in this process. $CHATAPP_SERVER overrides it."""
    api_key: str = dataclasses.field(default="", repr=False)
    """The API key that server asks for. $CHATAPP_API_KEY overrides it. A config file holding
    one is written 0600; chatapp never prints, logs, exports or saves it anywhere else."""
    stream_timeout: float = 120.0
    """Seconds a llama-server's reply may go without a token (or prompt progress): a stream that
    sends nothing, or only keep-alive bytes, this long ends the turn with one line, the partial
    reply kept."""

    def replace(self, **changes) -> "Settings":
        clean = {k: v for k, v in changes.items() if v is not None}
        return validate(dataclasses.replace(self, **clean))


MAX_TEMPERATURE = 5.0
MAX_TOKENS = 1 << 20
MAX_TOP_K = 1_000_000
"""More than any vocabulary: top_k is a count of candidate tokens."""
MAX_GPU_LAYERS = 100_000
MAX_SEED = 2**32 - 1
MAX_STATE_CAP_MB = 1 << 30
MAX_STREAM_TIMEOUT = 86_400.0
CTX_STEP = 256
"""llama.cpp sizes the context in steps of this many tokens."""


def _in_range(name: str, value: float, low: float, high: float, what: str = "") -> None:
    finite = math.isfinite(value) if isinstance(value, float) else True  # a huge int is fine to compare
    if not (finite and low <= value <= high):
        raise ConfigError(f"{name} must be {what or f'{low:,g} to {high:,g}'}, got {value!r}")


def validate(settings: Settings) -> Settings:
    """Refuse settings that make no sense, with one line naming the setting and its range. The
    CLI options, the config file and the TUI's sampling screen all come through here."""
    if settings.n_ctx < 16:
        raise ConfigError(f"n_ctx must be at least 16, got {settings.n_ctx}")
    # No ceiling here: chatapp.engine.machine.memory_check weighs n_ctx against the machine when a model loads.
    if settings.kv_type not in KV_TYPES:
        raise ConfigError(f"kv_type must be one of {', '.join(KV_TYPES)}, got {settings.kv_type!r}")
    if settings.flash_attn not in FLASH_ATTN_MODES:
        raise ConfigError(f"flash_attn must be one of {', '.join(FLASH_ATTN_MODES)}, got {settings.flash_attn!r}")
    if settings.draft not in DRAFT_MODES:
        raise ConfigError(f"draft must be one of {', '.join(DRAFT_MODES)}, got {settings.draft!r}")
    _in_range("draft_max", settings.draft_max, 1, MAX_DRAFT_TOKENS)
    _in_range("think_budget", settings.think_budget, -1, MAX_TOKENS, f"-1 (no budget) or 0 to {MAX_TOKENS:,}")
    if len(settings.think_budget_message) > 1000 or "\n" in settings.think_budget_message:
        raise ConfigError("think_budget_message must be one line of at most 1,000 characters")
    _in_range("think_more", settings.think_more, 0, MAX_TOKENS, f"0 (the thinking budget) or 1 to {MAX_TOKENS:,}")
    if settings.thinking_history not in THINKING_HISTORIES:
        raise ConfigError(f"thinking_history must be one of {', '.join(THINKING_HISTORIES)}, "
                          f"got {settings.thinking_history!r}")
    if settings.threads < 0:
        raise ConfigError(f"threads must be 0 (auto) or more, got {settings.threads}")
    _in_range("image_max_tokens", settings.image_max_tokens, 0, MAX_TOKENS,
              f"0 (the projector's own) or 1 to {MAX_TOKENS:,}")
    _in_range("gpu_layers", settings.gpu_layers, -1, MAX_GPU_LAYERS, f"-1 (all) or 0 to {MAX_GPU_LAYERS:,}")
    if settings.max_tokens < 1:
        raise ConfigError(f"max_tokens must be at least 1, got {settings.max_tokens}")
    _in_range("max_tokens", settings.max_tokens, 1, MAX_TOKENS)
    if settings.temperature < 0:
        raise ConfigError(f"temperature must be 0 or more, got {settings.temperature}")
    if settings.server and not settings.server.startswith(("http://", "https://")):
        raise ConfigError("server must be an http:// or https:// URL (or empty to run in-process)")
    _in_range("temperature", settings.temperature, 0.0, MAX_TEMPERATURE, f"0 (greedy) to {MAX_TEMPERATURE:g}")
    _in_range("top_p", settings.top_p, 0.0, 1.0)
    _in_range("min_p", settings.min_p, 0.0, 1.0)
    _in_range("top_k", settings.top_k, 0, MAX_TOP_K, f"0 (off) to {MAX_TOP_K:,}")
    _in_range("seed", settings.seed, -1, MAX_SEED, f"-1 (random) or 0 to {MAX_SEED:,}")
    _in_range("state_cap_mb", settings.state_cap_mb, 0, MAX_STATE_CAP_MB,
              f"0 (keep no KV states) to {MAX_STATE_CAP_MB:,}")
    _in_range("branch_state_mb", settings.branch_state_mb, 0, MAX_STATE_CAP_MB,
              f"0 (keep none in memory) to {MAX_STATE_CAP_MB:,}")
    _in_range("stream_timeout", settings.stream_timeout, 1.0, MAX_STREAM_TIMEOUT,
              f"1 to {MAX_STREAM_TIMEOUT:,g} seconds")
    if not settings.model.strip():
        raise ConfigError("model is empty; leave the setting out to use the default model")
    if problem := api_key_problem(settings.api_key):
        raise ConfigError(f"api_key {problem}")
    return settings


def api_key_problem(key: str) -> str | None:
    """Why this API key cannot go in an Authorization header, in words that never show it: a
    control character (a pasted line end, say) is not allowed in a header, and surrounding
    space is a paste the server would not match. None when it is fine."""
    if any(unicodedata.category(c) == "Cc" for c in key):
        return "has a control character in it (a line end or tab pasted with it?); give the key alone"
    if key != key.strip():
        return "starts or ends with a space; give the key without it"
    return None


def adjusted(settings: Settings) -> tuple[Settings, list[str]]:
    """The settings as they will run, and what that changes, in one line each: threads beyond
    this machine's logical CPUs are capped, n_ctx is rounded up to llama.cpp's step, and a
    state cap of 0 keeps no KV states."""
    settings = validate(settings)
    notices = []
    cpus = os.cpu_count() or 1
    if settings.threads > cpus:
        notices.append(f"threads {settings.threads:,} is more than this machine's {cpus} logical CPUs; using {cpus}")
        settings = dataclasses.replace(settings, threads=cpus)
    if settings.n_ctx % CTX_STEP:
        padded = -(-settings.n_ctx // CTX_STEP) * CTX_STEP
        notices.append(f"n_ctx {settings.n_ctx:,} is rounded up to {padded:,}: llama.cpp sizes the context "
                       f"in steps of {CTX_STEP} tokens")
        settings = dataclasses.replace(settings, n_ctx=padded)
    if settings.state_cap_mb == 0:
        notices.append("state_cap_mb is 0: no KV states are kept, so resumed sessions re-prefill")
    return settings, notices


MAX_CONFIG_BYTES = paths.MiB
"""A config file is a few hundred bytes; one past a MiB is not one (and is not read whole)."""


def read_text(path: Path) -> str | None:
    """The config file's text, or None when there is no file. A named pipe, a device or a file
    over MAX_CONFIG_BYTES is refused in one line before it is read: reading one would wait
    forever or never end, and every command reads the config."""
    try:
        return paths.read_capped(path, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def read_table(path: Path) -> dict | None:
    """The config file's raw TOML table, or None when there is no file."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"cannot read {path}: its values are nested too deep") from None


def load_settings(path: Path | None = None) -> Settings:
    """Read the config file (a missing file gives the defaults), then the environment's
    overrides ($CHATAPP_SERVER, $CHATAPP_API_KEY)."""
    path = path or paths.config_file()
    table = read_table(path)
    return with_environment(Settings() if table is None else from_table(table, path))


def with_environment(settings: Settings, environ: dict[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    overrides = {name: environ[var] for name, var in ENV_SETTINGS.items() if environ.get(var)}
    return validate(dataclasses.replace(settings, **overrides)) if overrides else settings


def from_table(raw: dict, path: Path) -> Settings:
    known = {f.name: f for f in fields(Settings)}
    values = {}
    for key, value in raw.items():
        if key in TABLE_SECTIONS:
            continue
        if key not in known:
            raise ConfigError(f"{path}: unknown setting {key!r}")
        expected = type(getattr(Settings(), key))
        if key == "flash_attn" and isinstance(value, bool):  # written by chatapp before "auto"
            value = "on" if value else "off"
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or isinstance(value, bool) != (expected is bool):
            shown = type(value).__name__ if key in SECRET_SETTINGS else repr(value)
            raise ConfigError(f"{path}: {key} must be {expected.__name__}, got {shown}")
        values[key] = value
    return validate(Settings(**values))


def toml_value(value: str | float | bool) -> str:
    """A value as TOML writes it (tomlkit escapes strings the way TOML wants)."""
    return tomlkit.item(value).as_string()


def save_setting(key: str, value: str | float | bool, path: Path | None = None) -> Path:
    """Set one key in the config file and leave the rest of it, comments and order included,
    as it was (tomlkit edits the document rather than rewriting it).

    The edited text must read back as the old table with just that key changed, or nothing
    is written: a file the edit can't safely touch stays the user's to fix.
    """
    from chatapp.private import atomic_write

    path = path or paths.config_file()
    if key not in {f.name for f in fields(Settings)}:
        raise ConfigError(f"unknown setting {key!r}")
    text = read_text(path) or ""
    try:
        document = tomlkit.parse(text)
        document[key] = value
        edited = tomlkit.dumps(document)
        table = tomllib.loads(edited)
        ok = table == {**tomllib.loads(text), key: value}
    except (tomllib.TOMLDecodeError, TOMLKitError, RecursionError):
        ok = False
    if not ok:
        raise ConfigError(f"cannot set {key} in {path} without changing other settings; edit it by hand")
    from_table(table, path)  # the new value must be valid too
    try:
        make_private_dir(path.parent)
        atomic_write(path, [edited.encode("utf-8")])  # 0600: the file may hold an API key
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def exposed_key_warning(path: Path | None = None) -> str | None:
    """A warning when the config file holds an API key and other users can read it."""
    path = path or paths.config_file()
    try:
        if not os.stat(path).st_mode & (stat.S_IRGRP | stat.S_IROTH):
            return None
        table = read_table(path)
    except (OSError, ConfigError):  # no file, or one the command itself will report
        return None
    if not table or not any(table.get(key) for key in SECRET_SETTINGS):
        return None
    return f"warning: {path} holds an API key and other users can read it; run: chmod 600 {path}"


def to_toml(settings: Settings) -> str:
    lines = [f"{field.name} = {toml_value(getattr(settings, field.name))}" for field in fields(Settings)]
    return "\n".join(lines) + "\n"
