"""Runs `chatapp ask`: streams replies, then one stats line (or one JSON object) per turn."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.markup import escape

from chatapp.config import Settings
from chatapp.engine.events import ContextTrimmed, TextDelta, TurnDone
from chatapp.engine.stats import TurnRecord
from chatapp.errors import ServerError


def stats_line(record: TurnRecord) -> str:
    parts = [
        f"prompt {record.prompt_tokens} tok ({record.cached_tokens} cached, {record.prefill_tokens} prefilled)",
        f"prefill {record.prefill_tps:,.0f} tok/s",
        f"TTFT {record.ttft_ms:,.0f} ms",
        f"decode {record.decode_tokens} tok at {record.decode_tps:,.1f} tok/s",
        f"KV {record.kv_used}/{record.n_ctx}",
    ]
    if record.restored_tokens:
        parts.insert(0, f"restored {record.restored_tokens} tok in {record.restore_ms:,.0f} ms")
    if record.finish_reason != "stop":
        parts.append({"length": "hit --max-tokens", "context": "context full",
                      "stopped": "stopped"}.get(record.finish_reason, record.finish_reason))
    return " · ".join(parts)


def run_ask(settings: Settings, model: str | None, prompts: list[str], *, as_json: bool,
            session: str | None = None) -> None:
    from chatapp.commands.core import open_engine

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    manager = None
    if session is not None:
        from chatapp.engine.sessions import SessionManager, validate_name

        validate_name(session)
        manager = SessionManager.open(settings)  # before loading the model: a bad database fails fast
    engine = open_engine(settings, model, err)
    summary = engine.summary
    try:
        live = manager.resume(session, engine) if manager is not None else None
        if live is not None and live.report.notice:
            err.print(f"[dim]session {escape(session)}: {escape(live.report.notice)}[/]")
        for number, prompt in enumerate(prompts, 1):
            record = None
            for event in engine.send(prompt):
                if isinstance(event, ContextTrimmed):
                    err.print(f"[yellow]context full: dropped the oldest {event.dropped_turns} turn(s) "
                              f"({len(event.dropped)} messages) to fit this one[/]")
                elif isinstance(event, TextDelta) and not as_json:
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                elif isinstance(event, TurnDone):
                    record = event.record
                    if live is not None:
                        saved = live.save_turn(record)
                        record = saved.record
                        for notice in saved.notices:
                            err.print(f"[yellow]session {escape(session)}: {escape(notice)}[/]")
                    if as_json:
                        data = record.to_json()
                        data.update(model=summary.name, quant=summary.quant, backend=summary.backend,
                                    layers_offloaded=summary.layers_offloaded, server=summary.server)
                        if summary.kv_bytes_per_token is None:  # the backend cannot tell: not a zero
                            data["kv_bytes_per_token"] = None
                        print(json.dumps(data, ensure_ascii=False), flush=True)
                    else:
                        sys.stdout.write("\n")
                        if not record.extra.get("server_error"):  # a broken turn gets its one line below
                            err.print(f"[dim]{stats_line(record)}[/]")
            if record is not None and record.extra.get("server_error"):
                raise ServerError(str(record.extra["server_error"]))  # what was said is kept (and saved)
            if record is not None and record.finish_reason == "stopped":
                if number < len(prompts):
                    err.print(f"[yellow]stopped; skipped the remaining {len(prompts) - number} prompt(s)[/]")
                break
    finally:
        engine.close()
