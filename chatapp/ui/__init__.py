"""The Textual interface. Nothing here is imported by the engine."""
