"""Typer sub-commands; each module exposes `app`."""
