"""Saved sessions: transcripts in SQLite, KV-cache states in files, save and resume.

Headless: the CLI and the TUI both drive sessions through `SessionManager` and `LiveSession`.
"""

from chatapp.engine.sessions.manager import LiveSession, SessionManager
from chatapp.engine.sessions.names import validate_name
from chatapp.engine.sessions.reports import ResumeReport, SaveReport, format_seconds

__all__ = ["LiveSession", "ResumeReport", "SaveReport", "SessionManager", "format_seconds", "validate_name"]
