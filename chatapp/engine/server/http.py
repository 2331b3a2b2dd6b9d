"""HTTP to a llama-server: JSON requests, one server-sent-event stream that another thread
can cut short, and llama-server's errors turned into one-line chatapp errors.

Built on httpcore, the transport under httpx: importing httpx itself loads its command line
(click, rich, pygments) when those are installed, as they are here, and the engine must stay
free of rich (tests/test_import_hygiene.py).

The API key travels only in the Authorization header; no message here ever contains it, nor
the user:password part of a URL.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from urllib.parse import unquote, urlsplit, urlunsplit

import httpcore

from chatapp.errors import ContextFullError, ServerError
from chatapp.format import display_url

CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 120.0
"""Seconds an ordinary request may take (tokenize, apply-template, props, slot files)."""
LOAD_POLL = 0.25
"""Seconds between /health polls while the server loads its model."""
LOAD_WAIT = 1800.0
"""Seconds to wait for a loading server before giving up (a large model can take minutes)."""
HTTP_ERRORS = (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError,
               httpcore.UnsupportedProtocol, OSError)


class StreamBroken(Exception):
    """The stream ended without its last event: cut short here (abort) or by the server."""


class Loading(ServerError):
    """503: the server is still loading its model."""


def _split(url: str) -> tuple[str, dict[str, str]]:
    """(base URL without credentials, headers that carry them)."""
    try:
        parts = urlsplit(url.strip() if "://" in url else "http://" + url.strip())
        port = parts.port  # raises ValueError for a bad port
    except ValueError as exc:
        raise ServerError(f"{display_url(url)!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerError(f"{display_url(url)!r} is not an http(s) URL of a llama-server")
    headers = {}
    if parts.username is not None:  # http://user:password@host, e.g. behind a reverse proxy
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), headers


class ServerClient:
    """One llama-server. Thread-safe: a turn can stream while another thread tokenizes."""

    def __init__(self, url: str, api_key: str = "") -> None:
        self._base, headers = _split(url)
        self.url = display_url(self._base)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers = [(k.encode(), v.encode()) for k, v in {**headers, "Content-Type": "application/json"}.items()]
        self._pool = httpcore.ConnectionPool(max_connections=8)
        # Streams get a connection of their own, so the socket to cut is the one the trace names.
        self._streams = httpcore.ConnectionPool(max_keepalive_connections=0)
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._aborted = False

    # --- requests ------------------------------------------------------------------------
    def get(self, path: str, timeout: float = REQUEST_TIMEOUT) -> dict | list:
        return self._request("GET", path, None, timeout)

    def post(self, path: str, body: dict, timeout: float = REQUEST_TIMEOUT) -> dict | list:
        return self._request("POST", path, body, timeout)

    def _request(self, method: str, path: str, body: dict | None, timeout: float) -> dict | list:
        content = None if body is None else json.dumps(body).encode()
        try:
            response = self._send(method, path, content, timeout)
        except HTTP_ERRORS as exc:
            raise self.unreachable(exc) from None
        if response.status != 200:
            raise self.refusal(response.status, response.content, path)
        return self._json(response.content, path)

    def _send(self, method: str, path: str, content: bytes | None, timeout: float) -> httpcore.Response:
        """One request, tried again once on a fresh connection when a kept-alive one turns out
        dead (the server restarted or was killed since): without that, the first request after
        a server went away reports a lost connection instead of "cannot connect", and the first
        after a restart fails at all. Every request sent here is idempotent (tokenize, render,
        props, slot files, a cache-priming n_predict=0 completion), so sending it twice is safe;
        streams never come here."""
        fresh = []

        def trace(name: str, info: dict) -> None:
            if name.startswith("connection.connect_tcp"):
                fresh.append(name)

        send = lambda: self._pool.request(method, self._base + path, headers=self._headers, content=content,  # noqa: E731
                                          extensions={"timeout": _timeouts(timeout), "trace": trace})
        try:
            return send()
        except (httpcore.ReadError, httpcore.WriteError, httpcore.RemoteProtocolError):
            if fresh:  # a new connection failed: that is the answer, not a stale one
                raise
        return send()

    def _json(self, content: bytes, path: str):
        try:
            return json.loads(content)
        except ValueError:
            raise ServerError(f"{self.url}{path} did not answer with JSON: is it a llama-server?") from None

    # --- errors --------------------------------------------------------------------------
    def unreachable(self, exc: Exception) -> ServerError:
        if isinstance(exc, httpcore.ConnectTimeout):
            return ServerError(f"no answer from {self.url} within {CONNECT_TIMEOUT:g} s")
        if isinstance(exc, (httpcore.ConnectError, httpcore.UnsupportedProtocol)):
            reason = str(exc).split("] ")[-1] or "connection failed"
            return ServerError(f"cannot connect to llama-server at {self.url} ({reason})")
        if isinstance(exc, httpcore.TimeoutException):
            return ServerError(f"llama-server at {self.url} did not answer in time")
        return ServerError(f"lost the connection to llama-server at {self.url} ({type(exc).__name__})")

    def refusal(self, status: int, content: bytes, path: str) -> ServerError:
        """llama-server's error body ({"error": {"code", "message", "type", ...}}) as one line."""
        try:
            error = json.loads(content).get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        if not isinstance(error, dict):
            error = {"message": str(error)}
        message, kind = str(error.get("message") or ""), str(error.get("type") or "")
        if status == 401:
            return ServerError(f"llama-server at {self.url} refused the API key ({message or 'unauthorized'}); "
                               "give the right one with --api-key or CHATAPP_API_KEY")
        if status == 503 and kind == "unavailable_error":
            return Loading(f"llama-server at {self.url} is still loading its model")
        if kind == "exceed_context_size_error":
            return ContextFullError(
                f"this turn needs {error.get('n_prompt_tokens', '?')} prompt tokens, but llama-server's context "
                f"holds {error.get('n_ctx', '?')}; shorten the message or start the server with a larger -c")
        if not error:
            return ServerError(f"{self.url}{path} answered HTTP {status}: is it a llama-server?")
        return ServerError(f"llama-server at {self.url}: {message} (HTTP {status}{', ' + kind if kind else ''})")

    # --- waiting for the model -------------------------------------------------------------
    def wait_until_ready(self, waiting: Callable[[float], None] | None = None, limit: float = LOAD_WAIT) -> None:
        """Poll /health until the model is loaded; `waiting(elapsed_s)` after each 503."""
        started = time.monotonic()
        while True:
            try:
                self.get("/health")
                return
            except Loading:
                elapsed = time.monotonic() - started
                if elapsed > limit:
                    raise ServerError(f"llama-server at {self.url} was still loading its model after "
                                      f"{limit:,.0f} s") from None
                if waiting is not None:
                    waiting(elapsed)
                time.sleep(LOAD_POLL)

    # --- streaming ---------------------------------------------------------------------------
    def stream(self, path: str, body: dict, cancelled: Callable[[], bool] = lambda: False) -> Iterator[dict]:
        """POST and yield each server-sent event's JSON. An HTTP error before the stream raises
        (ServerError, ContextFullError); a stream that ends early raises StreamBroken. Once
        `cancelled()` is true, or abort() is called, the connection is cut at once."""
        with self._lock:
            self._socket, self._aborted = None, False
        gone = lambda: self._was_aborted() or cancelled()  # noqa: E731

        def trace(name: str, info: dict) -> None:
            if name == "connection.connect_tcp.complete":
                sock = info["return_value"].get_extra_info("socket")
                with self._lock:
                    self._socket = sock
                if gone():
                    _shut(sock)

        extensions = {"timeout": _timeouts(None), "trace": trace}
        try:
            with self._streams.stream("POST", self._base + path, headers=self._headers,
                                      content=json.dumps(body).encode(), extensions=extensions) as response:
                if response.status != 200:
                    raise self.refusal(response.status, response.read(), path)
                for line in _lines(response.iter_stream()):
                    if not line.startswith(b"data: "):
                        continue  # blank separators and ":" keep-alive pings
                    payload = line[len(b"data: "):]
                    if payload == b"[DONE]":
                        return
                    event = self._json(payload, path)
                    if isinstance(event, dict) and "error" in event:
                        raise self.refusal(int(event["error"].get("code", 500)), payload, path)
                    yield event
        except HTTP_ERRORS as exc:
            if gone() or not isinstance(exc, (httpcore.ConnectError, httpcore.ConnectTimeout)):
                raise StreamBroken(str(exc)) from None
            raise self.unreachable(exc) from None
        finally:
            with self._lock:
                self._socket = None

    def _was_aborted(self) -> bool:
        with self._lock:
            return self._aborted

    def abort(self) -> None:
        """From any thread: end the running stream now. Shutting the socket down wakes the
        reader at once (closing it would not) and tells the server, which then cancels the task."""
        with self._lock:
            self._aborted = True
            sock = self._socket
        if sock is not None:
            _shut(sock)

    def close(self) -> None:
        self._pool.close()
        self._streams.close()


def _timeouts(read: float | None) -> dict[str, float | None]:
    return {"connect": CONNECT_TIMEOUT, "read": read, "write": REQUEST_TIMEOUT, "pool": REQUEST_TIMEOUT}


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Lines of a byte stream, without their line ends."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *whole, pending = pending.split(b"\n")
        for line in whole:
            yield line.rstrip(b"\r")
    if pending:
        yield pending.rstrip(b"\r")


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
