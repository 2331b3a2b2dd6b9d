"""What went wrong with a llama-server, told in one line: a server out of reach, its refusal
(llama-server's error body: {"error": {"code", "message", "type", ...}}), or a model still
loading.

The server's own words (its error message and type) are shown, but never as they came: a
key it echoed back (the Authorization header, a URL's password) is masked, control
characters (ANSI/OSC escapes that could retitle the terminal or set the clipboard, line
breaks) are escaped, and a long message is cut to a line's worth.
"""

from __future__ import annotations

import httpcore

from chatapp.engine.server import answers
from chatapp.errors import ContextFullError, ServerError
from chatapp.format import one_line_text

SHOWN_CHARACTERS = 300
"""The most of a server's message that is shown."""


class Loading(ServerError):
    """503: the server is still loading its model."""


class Wording:
    def __init__(self, url: str, secrets: list[str], connect_timeout: float) -> None:
        self.url = url
        self._secrets = secrets
        self._connect_timeout = connect_timeout

    def unreachable(self, exc: Exception, path: str = "", timeout: float | None = None) -> ServerError:
        if isinstance(exc, httpcore.ConnectTimeout):
            return ServerError(f"no answer from {self.url} within {self._connect_timeout:g} s")
        if isinstance(exc, (httpcore.ConnectError, httpcore.UnsupportedProtocol)):
            reason = str(exc).split("] ")[-1] or "connection failed"
            return ServerError(f"cannot connect to llama-server at {self.url} ({one_line_text(reason)})")
        if isinstance(exc, httpcore.TimeoutException):
            within = f" within {timeout:g} s" if timeout is not None else " in time"
            return ServerError(f"llama-server at {self.url} did not answer {path or 'a request'}{within}")
        return ServerError(f"lost the connection to llama-server at {self.url} ({type(exc).__name__})")

    def refusal(self, status: int, content: bytes, path: str) -> ServerError:
        """llama-server's error body ({"error": {"code", "message", "type", ...}}) as one line."""
        try:
            error = answers.decode(answers.ErrorBody, content, self.url + path).error
        except ServerError:
            error = None  # not llama-server's shape: the status alone says it
        return self.refused(status, error, path)

    def refused(self, status: int, error: answers.ErrorDetail | str | None, path: str) -> ServerError:
        if isinstance(error, str):
            error = answers.ErrorDetail(message=error)
        message = self.shown(error.message) if error else ""
        kind = self.shown(error.type) if error else ""
        if status == 401:
            return ServerError(f"llama-server at {self.url} refused the API key ({message or 'unauthorized'}); "
                               "give the right one with --api-key or CHATAPP_API_KEY")
        if status == 503 and kind == "unavailable_error":
            return Loading(f"llama-server at {self.url} is still loading its model")
        if error is not None and error.type == "exceed_context_size_error":
            count = lambda n: "?" if n is None else f"{n:,}"  # noqa: E731
            return ContextFullError(
                f"this turn needs {count(error.n_prompt_tokens)} prompt tokens, but llama-server's context "
                f"holds {count(error.n_ctx)}; shorten the message or start the server with a larger -c")
        if error is None:
            return ServerError(f"{self.url}{path} answered HTTP {status}: is it a llama-server?")
        return ServerError(f"llama-server at {self.url}: {message} (HTTP {status}{', ' + kind if kind else ''})")

    def shown(self, text: str) -> str:
        """A server's words made fit to print: the key (had it echoed the header) masked, control
        characters escaped, and at most a line's worth of it."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = one_line_text(text)
        return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "…"
