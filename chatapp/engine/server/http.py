"""HTTP to a llama-server: JSON requests, one server-sent-event stream that another thread
can cut short, and llama-server's errors turned into one-line chatapp errors.

Built on httpcore, the transport under httpx: importing httpx itself loads its command line
(click, rich, pygments) when those are installed, as they are here, and the engine must stay
free of rich (tests/test_import_hygiene.py).

Nothing the server sends is trusted: every answer is decoded through `answers` (its shape
checked field by field), every answer and every streamed line has a size cap, an ordinary
request has a deadline of seconds, and a reply stream that goes silent, or sends only
keep-alive bytes, for the turn's `stream_timeout` ends with one line.

The API key travels only in the Authorization header; no message here ever contains it, nor
the user:password part of a URL: a server that echoes it in an error has it masked.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import httpcore

from chatapp.engine.server import answers
from chatapp.engine.server.lines import LineBuffer, LineTooLong
from chatapp.engine.server.wording import Loading, Wording
from chatapp.errors import ServerError
from chatapp.format import display_url, human_bytes

CONNECT_TIMEOUT = 10.0
ANSWER_BYTES = 4 << 20
"""The most an answer to a small request may weigh: /props with a long chat template is tens
of KiB. Also the cap on one streamed line (an event; the last one repeats the prompt's text)."""
BYTES_PER_SENT_BYTE = 48
"""...plus this much per byte sent: a /tokenize with pieces of one-byte tokens takes about 30
bytes a token ({"id":49151,"piece":"\\u0001"},), and the prompt a stream's last event repeats
is no longer than the ids it was sent as. So a hostile answer is cut off after a size in
proportion to the question, not gigabytes later."""
LOAD_POLL = 0.25
"""Seconds between /health polls while the server loads its model."""
LOAD_WAIT = 1800.0
"""Seconds to wait for a loading server before giving up (a large model can take minutes)."""
HTTP_ERRORS = (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError,
               httpcore.UnsupportedProtocol, OSError)


class StreamBroken(Exception):
    """The stream ended without its last event: cut short here (abort) or by the server."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds a request other than the reply stream may take in all, reading included. These
    answer at once (tokenize, apply-template, props, health: nothing is computed), or write
    or read one file (slot save and restore); a server that says nothing for longer is stuck."""

    request: float = 15.0
    slot: float = 60.0
    """A slot file: the KV cache of a long context on a slow disk."""


A = TypeVar("A", bound=answers.Answer)


def answer_limit(sent: bytes | None) -> int:
    return ANSWER_BYTES + BYTES_PER_SENT_BYTE * len(sent or b"")


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

    def __init__(self, url: str, api_key: str = "", timeouts: Timeouts = Timeouts()) -> None:
        from chatapp.config import api_key_problem

        self._base, headers = _split(url)
        self.url = display_url(self._base)
        self.timeouts = timeouts
        if problem := api_key_problem(api_key):  # config.validate says it first; this is for direct callers
            raise ServerError(f"the API key {problem}")
        # What the server must never see printed back: the key, and a URL's password in either form.
        secrets = [s for s in (api_key, *_credentials(url), headers.get("Authorization", "")[6:]) if s]
        self.say = Wording(self.url, secrets, CONNECT_TIMEOUT)
        """How what goes wrong is told, in one line."""
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
    def get(self, path: str, kind: type[A], timeout: float | None = None) -> A:
        return self._request("GET", path, None, kind, timeout)

    def post(self, path: str, body: dict, kind: type[A], timeout: float | None = None) -> A:
        return self._request("POST", path, body, kind, timeout)

    def _request(self, method: str, path: str, body: dict | None, kind: type[A], timeout: float | None) -> A:
        content = None if body is None else json.dumps(body).encode()
        timeout = self.timeouts.request if timeout is None else timeout
        try:
            status, data = self._send(method, path, content, timeout)
        except HTTP_ERRORS as exc:
            raise self.say.unreachable(exc, path, timeout) from None
        if status != 200:
            raise self.say.refusal(status, data, path)
        return answers.decode(kind, data, self.url + path)

    def _send(self, method: str, path: str, content: bytes | None, timeout: float) -> tuple[int, bytes]:
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

        def send() -> tuple[int, bytes]:
            deadline = time.monotonic() + timeout
            with self._pool.stream(method, self._base + path, headers=self._headers, content=content,
                                   extensions={"timeout": self._timeouts(timeout), "trace": trace}) as response:
                return response.status, self._read(response, answer_limit(content), deadline, path)

        try:
            return send()
        except (httpcore.ReadError, httpcore.WriteError, httpcore.RemoteProtocolError):
            if fresh:  # a new connection failed: that is the answer, not a stale one
                raise
        return send()

    def _read(self, response: httpcore.Response, limit: int, deadline: float, path: str) -> bytes:
        """The body, refused past `limit` bytes (before reading, when its length says so) and
        cut off at `deadline`: each read waits at most the whole timeout, so a server that
        dribbles a byte at a time is given up on within twice the timeout, not never."""
        declared = [value for name, value in response.headers if name.lower() == b"content-length"]
        if declared and declared[0].strip().isdigit() and int(declared[0]) > limit:
            raise self._too_big(path, limit)
        data = bytearray()
        for chunk in response.iter_stream():
            data += chunk
            if len(data) > limit:
                raise self._too_big(path, limit)
            if time.monotonic() > deadline:
                raise httpcore.ReadTimeout("the answer took longer than its deadline")
        return bytes(data)

    def _too_big(self, path: str, limit: int) -> ServerError:
        return ServerError(f"{self.url}{path} sent more than {human_bytes(limit)}, more than a llama-server "
                           "answers to this: is it a llama-server?")

    def _timeouts(self, read: float) -> dict[str, float]:
        return {"connect": CONNECT_TIMEOUT, "read": read, "write": self.timeouts.request,
                "pool": self.timeouts.request}

    # --- waiting for the model -------------------------------------------------------------
    def wait_until_ready(self, waiting: Callable[[float], None] | None = None, limit: float = LOAD_WAIT) -> None:
        """Poll /health until the model is loaded; `waiting(elapsed_s)` after each 503."""
        started = time.monotonic()
        while True:
            try:
                self.get("/health", answers.Health)
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
    def stream(self, path: str, body: dict, silence: float,
               cancelled: Callable[[], bool] = lambda: False) -> Iterator[answers.Event]:
        """POST and yield each server-sent event. An HTTP error before the stream raises
        (ServerError, ContextFullError); an event of the wrong shape, an error event, or
        `silence` seconds without progress (keep-alive bytes, or the same prompt progress again, do
        not count) raise ServerError; a
        stream that ends early raises StreamBroken. Once `cancelled()` is true, or abort() is
        called, the connection is cut at once."""
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

        content = json.dumps(body).encode()
        lines = LineBuffer(answer_limit(content))
        extensions = {"timeout": self._timeouts(silence), "trace": trace}  # a silent socket: ReadTimeout
        try:
            with self._streams.stream("POST", self._base + path, headers=self._headers, content=content,
                                      extensions=extensions) as response:
                if response.status != 200:
                    deadline = time.monotonic() + self.timeouts.request
                    raise self.say.refusal(response.status, self._read(response, ANSWER_BYTES, deadline, path), path)
                heard, processed = time.monotonic(), -1
                for chunk in response.iter_stream():
                    try:
                        whole = lines.feed(chunk)
                    except LineTooLong:
                        raise ServerError(f"{self.url}{path} sent a line of more than {human_bytes(lines.limit)}: "
                                          "is it a llama-server?") from None
                    for line in whole:
                        event = self._event(line, path)
                        if event is _DONE:
                            return
                        if event is None:
                            continue
                        # Progress is a token, or more of the prompt read: the same progress again is a keep-alive.
                        if event.prompt_progress is None or event.prompt_progress.processed > processed:
                            heard = time.monotonic()
                            processed = event.prompt_progress.processed if event.prompt_progress else processed
                        yield event
                    if time.monotonic() - heard > silence:
                        raise ServerError(f"llama-server at {self.url} sent keep-alives but no progress for "
                                          f"{silence:g} s (stream_timeout)")
                event = self._event(lines.rest(), path)
                if event is not None and event is not _DONE:
                    yield event
        except httpcore.ReadTimeout:
            if gone():
                raise StreamBroken("stopped") from None
            raise ServerError(f"llama-server at {self.url} sent nothing for {silence:g} s (stream_timeout)") from None
        except HTTP_ERRORS as exc:
            if gone() or not isinstance(exc, (httpcore.ConnectError, httpcore.ConnectTimeout)):
                raise StreamBroken(str(exc)) from None
            raise self.say.unreachable(exc, path) from None
        finally:
            with self._lock:
                self._socket = None

    def _event(self, line: bytes, path: str):
        """A `data:` line's event, _DONE for the end marker, None for anything else (blank
        separators and ":" keep-alive comments)."""
        if not line.startswith(b"data: "):
            return None
        payload = line[len(b"data: "):]
        if payload == b"[DONE]":
            return _DONE
        event = answers.decode(answers.Event, payload, self.url + path)
        if event.error is not None:
            raise self.say.refused(event.error.code, event.error, path)
        return event

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


_DONE = object()


def _credentials(url: str) -> list[str]:
    """A URL's password, as typed and decoded, so an echo of it can be masked."""
    try:
        password = urlsplit(url if "://" in url else "http://" + url).password
    except ValueError:
        return []
    return [password, unquote(password)] if password else []


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
