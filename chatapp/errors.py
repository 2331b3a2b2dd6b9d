"""Errors that carry a one-line, user-facing message.

The CLI and the TUI show `title: message` and never a traceback.
"""


class ChatappError(Exception):
    title = "Error"

    def __init__(self, message: str, title: str | None = None):
        super().__init__(message)
        self.message = message
        if title is not None:
            self.title = title

    def __str__(self) -> str:
        return self.message

    def one_line(self) -> str:
        return f"{self.title}: {self.message}"


class ModelError(ChatappError):
    title = "Model"


class ConfigError(ChatappError):
    title = "Config"


class InputError(ChatappError):
    title = "Input"


class ContextFullError(ChatappError):
    title = "Context full"


class SessionError(ChatappError):
    title = "Session"


class ThemeError(ChatappError):
    title = "Theme"


class ServerError(ChatappError):
    """A llama-server could not be reached, refused us, or broke off."""

    title = "Server"
