"""Errors that carry a one-line, user-facing message.

The CLI and the TUI show `title: message` and never a traceback.
"""

INTERRUPTED = 130
"""The exit status after Ctrl+C, as shells report a process that SIGINT ended."""


class ChatappError(Exception):
    title = "Error"
    exit_code = 2
    """The CLI's exit status: 2 for bad input (the default), 1 when the input was fine but the
    work could not be done (another process changed the session, the output could not be written)."""

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


class SessionConflict(SessionError):
    """Another process changed (or removed) the session while this one ran a turn."""

    exit_code = 1


class SessionRemoved(SessionConflict):
    """Another process removed the session this one was saving into."""


class OutputError(ChatappError):
    """Standard output could not be written: a full disk, a closed stream or a closed pipe."""

    title = "Output"
    exit_code = 1

    def __init__(self, message: str, *, broken_pipe: bool = False):
        super().__init__(message)
        self.broken_pipe = broken_pipe
        """The reader went away (`| head -1`): exit quietly, as standard tools do."""


class ThemeError(ChatappError):
    title = "Theme"


class AttachmentError(ChatappError):
    title = "Attachment"


class ServerError(ChatappError):
    """A llama-server could not be reached, refused us, or broke off."""

    title = "Server"


class ToolError(ChatappError):
    """A tool or MCP server could not be set up, reached or called."""

    title = "Tool"
