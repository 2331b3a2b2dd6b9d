"""`chatapp bench`: measure this machine's figures that the Speed panel compares against."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

import typer

from chatapp.commands.core import default_note
from chatapp.errors import InputError
from chatapp.format import human_bytes, strict_json

app = typer.Typer(no_args_is_help=True, add_completion=False)


def decode_threads(settings) -> int:
    from chatapp.engine.machine.hardware import physical_cores

    return settings.threads or physical_cores()


@app.command("bandwidth")
def bandwidth(
    threads: Annotated[Optional[int], typer.Option(
        "--threads", help="Threads to read with."
                          + default_note("the decode thread count: threads in the config, or the physical cores"))
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the measurement as JSON.")] = False,
) -> None:
    """Measure this machine's memory read bandwidth again (the ceiling for decode) and cache it."""
    from chatapp.config import load_settings
    from chatapp.engine.machine.bandwidth import memory_bandwidth
    from chatapp.engine.opening import local_decode_device

    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    settings = load_settings()
    result = memory_bandwidth(threads or decode_threads(settings), refresh=True)
    backend = local_decode_device(settings)
    if as_json:
        gpu = None if backend == "CPU" else {"backend": backend, "memory_bandwidth_gbps": None}
        typer.echo(strict_json({**asdict(result), "gpu": gpu}))
        return
    typer.echo(f"memory read bandwidth: {result.gbps:.1f} GB/s ({result.threads} threads reading "
               f"{human_bytes(result.buffer_bytes)}, best of {result.passes} passes, {result.seconds:.2f} s)")
    if backend != "CPU":
        typer.echo(f"{backend} memory bandwidth: not measured (decode runs there with these settings)")
