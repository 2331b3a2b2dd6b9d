"""The headless engine: llama.cpp access, chat, tokens, stats, sessions, models.

Nothing under chatapp.engine imports textual or rich (tests/test_import_hygiene.py checks).
"""
