"""An HTTP proxy on 127.0.0.1 in front of a real llama-server that passes every request and
answer through unchanged, except the one a test tells it to rewrite.

A real llama-server cannot be made to answer with the wrong shape, ignore n_predict, go
silent mid-reply or echo a header, and a fake server would test chatapp against the fake's
idea of llama-server. So the real server answers, and the proxy changes only the part under
test:

    proxy.answers["/tokenize"] = lambda ask: [1, 2, 3]          # a JSON value, bytes, a Reply, or HOLD
    proxy.requests["/completion"] = lambda body: {**body, "n_predict": -1}
    proxy.stream = lambda lines: ...                               # a stream's lines in, chunks out

A rule may call `ask.upstream()` for the real server's answer to rewrite. A stream rule gets
the real stream's lines (each with its b"\\n") and yields the bytes to send, or a float: a
pause of that many seconds, which is how a stream goes silent or dribbles keep-alives.
Everything held open ends when the test does (close()).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

HOLD = object()
"""An answer rule's result: never answer (the request hangs until the test ends)."""


@dataclass
class Reply:
    status: int
    body: bytes | Iterable[bytes | float]
    """A whole body, or chunks (and pauses, as floats) sent as they come."""


@dataclass
class Ask:
    """One request as the proxy received it."""

    path: str
    body: Any
    headers: dict[str, str]
    _proxy: "RewritingProxy" = field(repr=False)

    def upstream(self) -> Any:
        """The real server's JSON answer to this request."""
        return self._proxy.forward(self).json()


StreamRule = Callable[[Iterator[bytes]], Iterator[bytes | float]]


class RewritingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.answers: dict[str, Callable[[Ask], Any]] = {}
        """Path (with its query) -> a rule for a request that is not a stream."""
        self.requests: dict[str, Callable[[Any], Any]] = {}
        """Path -> how the request body is changed before the real server sees it."""
        self.stream: StreamRule | None = None
        """How a streamed /completion's lines are changed on their way to chatapp (None: not at
        all, but still passed on as they come)."""
        self.passed: list[dict] = []
        """The reply events the stream rule let through unchanged (see `events_until`)."""
        self.closed = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def forward(self, ask: Ask) -> httpx.Response:
        body = ask.body
        if ask.path in self.requests:
            body = self.requests[ask.path](body)
        content = None if body is None else json.dumps(body).encode()
        return self._client.request("GET" if body is None else "POST", self.upstream + ask.path, content=content,
                                    headers=_passed_headers(ask.headers))

    def pause(self, seconds: float) -> bool:
        """Sleep, or return False at once when the test has ended."""
        return not self.closed.wait(seconds)

    def close(self) -> None:
        self.closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


def _passed_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() in ("authorization", "content-type")}


# --- stream rules ------------------------------------------------------------------------------
def reply_events(lines: Iterator[bytes]) -> Iterator[tuple[bytes, dict | None]]:
    """Each line of a stream, with its event when it is a `data:` line of a piece of the reply."""
    for line in lines:
        event = None
        if line.startswith(b"data: "):
            data = json.loads(line[6:])
            if isinstance(data, dict) and "prompt_progress" not in data and not data.get("stop"):
                event = data
        yield line, event


def events_until(proxy: RewritingProxy, pieces: int, then: Callable[[dict], Iterable[bytes | float]]) -> StreamRule:
    """Pass the stream through until `pieces` pieces of the reply went by, then send what
    `then(next_piece)` gives instead of the rest."""

    def rule(lines: Iterator[bytes]) -> Iterator[bytes | float]:
        for line, event in reply_events(lines):
            if event is not None and len(proxy.passed) == pieces:
                yield from then(event)
                return
            if event is not None:
                proxy.passed.append(event)
            yield line

    return rule


def data(value: Any) -> bytes:
    """One server-sent event of this JSON value."""
    return b"data: " + json.dumps(value).encode() + b"\n\n"


def silence(proxy: RewritingProxy) -> Iterator[float]:
    while not proxy.closed.is_set():
        yield 0.2


def keep_alives(proxy: RewritingProxy) -> Iterator[bytes | float]:
    """A comment line (an SSE keep-alive) every 0.2 s, and never an event."""
    while not proxy.closed.is_set():
        yield b": keep-alive\n\n"
        yield 0.2


# --- the HTTP side ---------------------------------------------------------------------------------
def _handler(proxy: RewritingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as llama-server does: chatapp pools connections

        def log_message(self, format: str, *args) -> None:
            pass

        def do_GET(self) -> None:
            self._answer(None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._answer(json.loads(self.rfile.read(length) or b"null"))

        def _answer(self, body: Any) -> None:
            ask = Ask(self.path, body, dict(self.headers.items()), proxy)
            try:
                if isinstance(body, dict) and body.get("stream"):
                    self._stream(ask)
                    return
                rule = proxy.answers.get(self.path)
                if rule is None:
                    answer = proxy.forward(ask)
                    self._send(Reply(answer.status_code, answer.content))
                    return
                result = rule(ask)
                if result is HOLD:
                    while proxy.pause(0.2):
                        pass
                    self.close_connection = True
                    return
                if not isinstance(result, Reply):
                    result = Reply(200, result if isinstance(result, bytes) else json.dumps(result).encode())
                self._send(result)
            except (BrokenPipeError, ConnectionResetError):  # chatapp went away: so does this answer
                self.close_connection = True

        def _stream(self, ask: Ask) -> None:
            body = ask.body
            if ask.path in proxy.requests:
                body = proxy.requests[ask.path](body)
            request = proxy._client.build_request("POST", proxy.upstream + ask.path, json=body,
                                                  headers=_passed_headers(ask.headers))
            upstream = proxy._client.send(request, stream=True)
            try:
                if upstream.status_code != 200:
                    self._send(Reply(upstream.status_code, upstream.read()))
                    return
                lines = (line.encode() + b"\n" for line in upstream.iter_lines())
                self._send(Reply(200, proxy.stream(lines) if proxy.stream else lines), event_stream=True)
            finally:
                upstream.close()

        def _send(self, reply: Reply, event_stream: bool = False) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream" if event_stream else "application/json")
            if isinstance(reply.body, bytes):
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in reply.body:
                if isinstance(chunk, float):
                    if not proxy.pause(chunk):
                        break
                elif chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            else:
                self.wfile.write(b"0\r\n\r\n")
                return
            self.close_connection = True

    return Handler

